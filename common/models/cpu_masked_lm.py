"""The CPU's masked LM: a BERT's last layer at the masked positions only (``last_layer_at``: its queries and
feed-forward block there, keys and values from every position), which ``MaskedLM`` runs at ``masked_positions``
(``cpu.install`` sets it where ``bert_last_layer`` holds), and the vocabulary projection there alone. Why it is
faster, with its figures: docs/benchmarks.md ("Masked-LM training")."""

import operator

import torch
from torch import nn

from common.models.cpu_attention import ATTENTION, sdpa_cpu_dropout


def bert_last_layer(base):
    """Whether ``last_layer_at`` computes this model's last layer: a BERT layer (BERT, MiniLM, …) with absolute
    positions, no cross-attention, and an attention this module can call."""
    config, layers = base.config, getattr(getattr(base, "encoder", None), "layer", None)
    return (layers is not None and len(layers) > 1 and type(layers[-1]).__name__ == "BertLayer"
            and getattr(config, "position_embedding_type", "absolute") == "absolute"
            and not config.is_decoder and not getattr(config, "add_cross_attention", False)
            and config._attn_implementation in ("sdpa", ATTENTION, "eager"))


# what ``last_layer_at`` calls of a BertLayer, by its path from the layer
LAST_LAYER_PARTS = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.self.dropout",
                    "attention.self.num_attention_heads", "attention.self.attention_head_size",
                    "attention.self.scaling", "attention.output", "intermediate", "output")


def differences(base):
    """What ``MaskedLM``'s ``masked_positions`` relies on that this BERT model (``model_type`` "bert"), as this
    release of transformers writes it, lacks, one phrase each (none: an empty list): its layers as
    ``encoder.layer``, a ``ModuleList`` (cut short to run every layer but the last through the model's own forward),
    the last of them a ``BertLayer`` with ``LAST_LAYER_PARTS``."""
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList):
        return [f"{type(base).__name__}.encoder.layer (a ModuleList)"]
    if type(layers[-1]).__name__ != "BertLayer":
        return [f"{type(base).__name__}.encoder.layer of BertLayer"]
    found = []
    for path in LAST_LAYER_PARTS:
        try:
            operator.attrgetter(path)(layers[-1])
        except AttributeError:
            found.append(f"BertLayer.{path}")
    return found


def last_layer_at(layer, hidden, attention_mask, masked):
    """A ``BertLayer``'s output at the ``masked`` positions only (``[M, d]``, in the order of ``masked.nonzero()``):
    keys and values from every position of ``hidden`` ``[B, L, d]``, queries from the masked ones, padded per row
    to the row's most; then the attention output, residual and LayerNorm, and the feed-forward block, on the masked
    positions alone. Dropout as the layer's own (attention probabilities through ``sdpa_cpu_dropout``). The layer's
    sub-modules are called directly, not the layer itself, so hooks on the layer (and any wrapping of it: gradient
    checkpointing, FSDP) do not apply to it."""
    attention = layer.attention.self
    batch, length, _ = hidden.shape
    heads, size = attention.num_attention_heads, attention.attention_head_size
    rows, cols = masked.nonzero(as_tuple=True)
    slots = (torch.cumsum(masked, 1) - 1)[rows, cols]  # each masked position's place among its row's
    picked = hidden[rows, cols]
    projected = attention.query(picked)  # under autocast in its dtype, not the hidden states'
    # at least one query slot: a batch with nothing masked still runs every parameter (DDP keeps in step)
    query = projected.new_zeros(batch, max(1, int(masked.sum(1).max())), heads * size).index_put(
        (rows, slots), projected)
    query = query.view(batch, -1, heads, size).transpose(1, 2)
    key = attention.key(hidden).view(batch, length, heads, size).transpose(1, 2)
    value = attention.value(hidden).view(batch, length, heads, size).transpose(1, 2)
    # padding as a boolean mask (True: attend), which the attention function turns into its additive bias
    keep = None if attention_mask is None or bool(attention_mask.all()) else attention_mask[:, None, None, :].bool()
    context, _ = sdpa_cpu_dropout(attention, query, key, value, keep,
                                  dropout=attention.dropout.p if attention.training else 0.0,
                                  scaling=attention.scaling, is_causal=False)
    context = context.reshape(batch, -1, heads * size)[rows, slots]
    attended = layer.attention.output(context, picked)
    return layer.output(layer.intermediate(attended), attended)
