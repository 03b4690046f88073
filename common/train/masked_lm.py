"""The masked-LM model that ``--objective mlm`` trains (``MaskedLM``: a transformers masked-LM or pre-training model
with the encoder inside it that the project pools and saves), and a BERT layer computed at the masked positions only
(``last_layer_at``), which it runs as its last layer.
"""

import torch
from torch import nn

from common.io import InputError
from common.models.encoder import Encoder


class MaskedLM(nn.Module):
    """A masked-LM model; ``encoder`` is the same transformer with pooling (not a registered sub-module: its
    parameters are the model's own, optimised and saved once).

    Only masked positions are predicted, so only they go through the vocabulary projection (BERT's ``cls``,
    RoBERTa's ``lm_head``) and, in a BERT, through most of the last layer (``last_layer_at``): its keys and values
    come from every position, its queries, attention output and feed-forward block only from the masked ones. The
    logits are those of the whole model at the masked positions (tests/test_search.py checks them against
    ``BertForMaskedLM``); on 8 blocks of 256 tokens of all-MiniLM-L6-v2 this leaves out about a tenth of a step's
    arithmetic (docs/benchmarks.md, "Masked-LM training").

    With ``nsp`` (``mlm`` a ``BertForPreTraining``: ``cls.predictions`` and ``cls.seq_relationship``) the model also
    predicts the next sentence from BERT's pooler over ``[CLS]``, so the ``[CLS]`` position goes through the last
    layer too, and the pooler, which ``Encoder`` freezes for pooling of its own, is trained."""

    def __init__(self, mlm, pooling, normalize, nsp=False):
        super().__init__()
        self.mlm = mlm
        self.nsp = nsp
        self.__dict__["encoder"] = Encoder(mlm.base_model, pooling, normalize)
        heads = getattr(mlm, "cls", getattr(mlm, "lm_head", None))
        self.__dict__["head"] = heads.predictions if nsp else heads
        if nsp:
            mlm.base_model.pooler.requires_grad_(True)

    def forward(self, input_ids, attention_mask, masked, token_type_ids=None):
        """Logits ``[number of masked positions, vocabulary]``, in the order of ``masked.nonzero()``; with ``nsp``,
        ``(those logits, next-sentence logits [batch, 2])``."""
        if self.nsp:
            return self._pretraining(input_ids, attention_mask, masked, token_type_ids)
        if self.head is None:
            return self.mlm(input_ids=input_ids, attention_mask=attention_mask).logits[masked]
        base = self.mlm.base_model
        layers = getattr(getattr(base, "encoder", None), "layer", None)
        if not _bert_last_layer(base, layers):
            hidden = base(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            return self.head(hidden[masked])
        base.encoder.layer = layers[:-1]  # every layer but the last, through the model's own forward
        try:
            hidden = base(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        finally:
            base.encoder.layer = layers
        return self.head(last_layer_at(layers[-1], hidden, attention_mask, masked))

    def _pretraining(self, input_ids, attention_mask, masked, token_type_ids):
        base, relationship = self.mlm.base_model, self.mlm.cls.seq_relationship
        layers = getattr(getattr(base, "encoder", None), "layer", None)
        if not _bert_last_layer(base, layers):
            out = base(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return self.head(out.last_hidden_state[masked]), relationship(out.pooler_output)
        pooler = base.pooler
        base.encoder.layer, base.pooler = layers[:-1], None  # the pooler reads the last layer's [CLS], not this
        try:
            hidden = base(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state
        finally:
            base.encoder.layer, base.pooler = layers, pooler
        at = masked.clone()
        at[:, 0] = True
        states = last_layer_at(layers[-1], hidden, attention_mask, at)
        first = at.nonzero(as_tuple=True)[1] == 0  # each row's [CLS], first of its row's positions
        return self.head(states[masked[at]]), relationship(pooler(states[first][:, None]))


def _bert_last_layer(base, layers):
    """Whether ``last_layer_at`` computes this model's last layer: a BERT layer (BERT, MiniLM, …) with absolute
    positions, no cross-attention, and an attention this module can call."""
    from common.models.attention import ATTENTION
    config = base.config
    return (layers is not None and len(layers) > 1 and type(layers[-1]).__name__ == "BertLayer"
            and getattr(config, "position_embedding_type", "absolute") == "absolute"
            and not config.is_decoder and not getattr(config, "add_cross_attention", False)
            and config._attn_implementation in ("sdpa", ATTENTION, "eager"))


def check_nsp(model, nsp, what):
    """``--nsp`` needs a pre-training model with BERT's pooler and next-sentence head (a one-line error else)."""
    heads = getattr(model, "cls", None)
    if nsp and not (hasattr(heads, "predictions") and hasattr(heads, "seq_relationship")
                    and getattr(model.base_model, "pooler", None) is not None):
        raise InputError(f"--nsp: {what} has no next-sentence-prediction head in transformers "
                         f"({model.config.model_type}'s pre-training model is {type(model).__name__}); BERT's is "
                         "BertForPreTraining")


def last_layer_at(layer, hidden, attention_mask, masked):
    """A ``BertLayer``'s output at the ``masked`` positions only (``[M, d]``, in the order of ``masked.nonzero()``):
    keys and values from every position of ``hidden`` ``[B, L, d]``, queries from the masked ones, padded per row
    to the row's most; then the attention output, residual and LayerNorm, and the feed-forward block, on the masked
    positions alone. Dropout as the layer's own (attention probabilities through the project's attention
    function). The layer's sub-modules are called directly, not the layer itself, so hooks on the layer (and any
    wrapping of it: gradient checkpointing, FSDP) do not apply to it."""
    from common.models.attention import sdpa_cpu_dropout
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
