"""The faster ways an ``Encoder`` reaches the vectors its ``embed`` defines (each padded batch through the
transformer, its last hidden states pooled), kept here so that the model reads without them:

- ``forward``, in CPU training (a BERT-style model prepared by ``attention.fast_dropout``): the texts of every group
  laid end to end in one packed row (``packing.py``), with or without gradient and in evaluation too, so that a
  forward replayed under the same random state (GradCache) draws the same dropout masks;
- ``forward``, in training with gradient elsewhere: the word vectors of every group looked up at once, their
  gradient one ``[vocabulary, d]`` tensor a step, not one a group (``_WordLookup``);
- ``embed_packed``, in inference on a GPU with flash attention: the texts unpadded, read from their cumulative
  lengths;
- ``hidden_states``, for a Longformer: its forward at each batch's own length (``sliding_window.py``), not padded
  to a multiple of its window.

Each is held to the definition by a test: tests/test_packing.py, tests/test_dropout.py, tests/test_models.py and
tests/test_sliding_window.py.
"""

import torch
from torch import nn

from common.models import packing, sliding_window
from common.models.attention import ATTENTION

# Architectures whose positions count from the first token whatever the token ids, so that ``inputs_embeds`` gives
# what ``input_ids`` gives (tests/test_dropout.py). RoBERTa-style models number positions by skipping padding ids,
# which a text can hold, and keep the ordinary path.
WORD_LOOKUP_TYPES = ("bert", "distilbert", "electra")


def hidden_states(transformer, input_ids, attention_mask):
    """The last hidden states ``[B, L, d]`` of one padded batch; a Longformer's at the batch's own length, not a
    multiple of its window."""
    if sliding_window.is_longformer(transformer):
        return sliding_window.hidden_states(transformer, input_ids, attention_mask)
    return transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def embed_packed(encoder, input_ids, lengths):
    """Embeddings of texts laid end to end in one row, without padding: ``input_ids`` ``[T]``, ``lengths``
    ``[n]`` summing to T. Needs an attention that reads variable-length sequences from their cumulative
    lengths (flash attention on a GPU)."""
    cu, positions = packing.offsets(lengths)
    flash_cu, longest = cu.to(torch.int32), int(lengths.max())
    hidden = encoder.transformer(input_ids=input_ids[None], position_ids=positions[None], cu_seq_lens_q=flash_cu,
                                 cu_seq_lens_k=flash_cu, max_length_q=longest,
                                 max_length_k=longest).last_hidden_state[0]
    return encoder.normalized(packing.pool(hidden, lengths, cu, encoder.pooling))


def forward(encoder, groups):
    """``Encoder.forward``'s embeddings of padded ``groups`` by the packed row or the single word lookup, or None
    where neither applies (then each group is embedded as ``Encoder.embed``)."""
    transformer = encoder.transformer
    words = transformer.get_input_embeddings()
    known = transformer.config.model_type in WORD_LOOKUP_TYPES and type(words) is nn.Embedding
    lookup = (known and torch.is_grad_enabled() and words.weight.requires_grad and words.max_norm is None
              and not words.scale_grad_by_freq and not words.sparse)
    if (known and transformer.config._attn_implementation == ATTENTION and words.weight.device.type == "cpu"
            and not getattr(transformer.config, "is_decoder", False)):
        lengths = torch.cat([mask.sum(1) for _, mask in groups])
        ids = torch.cat([ids[mask.bool()] for ids, mask in groups])
        plan = packing.Packing(lengths.numpy())
        vectors = _WordLookup.apply(ids, words.weight, words, encoder) if lookup else words(ids)
        hidden = transformer(inputs_embeds=vectors[None], position_ids=plan.positions[None],
                             packing=plan).last_hidden_state[0]
        return encoder.normalized(packing.pool(hidden, plan.lengths, plan.cu, encoder.pooling))
    if not lookup:
        return None
    vectors = _WordLookup.apply(torch.cat([ids.reshape(-1) for ids, _ in groups]), words.weight, words, encoder)
    out, start = [], 0
    for ids, mask in groups:
        embeds = vectors[start:start + ids.numel()].view(*ids.shape, -1)
        start += ids.numel()
        hidden = transformer(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
        out.append(encoder.pool(hidden, mask))
    return torch.cat(out)


class _WordLookup(torch.autograd.Function):
    """``F.embedding`` whose weight gradient, on a CPU, is summed into a ``[vocabulary, d]`` buffer the encoder keeps
    between steps (``_word_grad``), where PyTorch's own backward allocates and zeroes a new tensor of that size each
    time (47 MB for a BERT vocabulary at d = 384; docs/wikispecter.md, "One word lookup a step"). Autograd takes the
    returned tensor as the parameter's ``.grad`` where there is none yet; where there is one (gradient
    accumulation), the ordinary backward runs, so that the buffer is never written while it is a live gradient."""

    @staticmethod
    def forward(ctx, ids, weight, embedding, owner):
        ctx.save_for_backward(ids)
        ctx.embedding, ctx.owner = embedding, owner
        return nn.functional.embedding(ids, weight, embedding.padding_idx)

    @staticmethod
    def backward(ctx, grad):
        ids, = ctx.saved_tensors
        weight, padding = ctx.embedding.weight, ctx.embedding.padding_idx
        if grad.device.type != "cpu" or weight.grad is not None:
            return None, torch.ops.aten.embedding_backward(grad, ids, weight.shape[0], -1 if padding is None
                                                           else padding, False, False), None, None
        buffer = getattr(ctx.owner, "_word_grad", None)
        if buffer is None or buffer.shape != weight.shape or buffer.dtype != grad.dtype:
            buffer = ctx.owner._word_grad = torch.empty(weight.shape, dtype=grad.dtype)
        rows, grad = ids.reshape(-1), grad.reshape(-1, grad.shape[-1])
        if padding is not None:
            grad = grad.masked_fill((rows == padding)[:, None], 0)
        buffer.zero_().index_add_(0, rows, grad)
        return None, buffer.view_as(buffer), None, None
