"""The CPU's packed rows: a batch's texts laid end to end in one row (``tokens.Packed``, which ``collate`` makes where
the loop packs rows), run by ``Encoder.embed_row`` with this module's attention plan (``Packing``) and its word vectors
looked up once (``WordLookup``). Why it is faster, with its figures: docs/benchmarks.md ("Packed rows", "One word
lookup a step")."""

import inspect

import numpy as np
import torch
from torch import nn

from common.models.cpu_attention import ATTENTION
from common.models.pooling import text_offsets


# Every layer but attention works token by token, so on the packed row its matrix products, GELU, layer norms and
# dropout see only real tokens. On the demo's triplets (all-MiniLM-L6-v2, 128 tokens, batches of 16 in file order)
# three padded length groups hold 12.8 % more tokens than the texts; six hold 6.1 % more. Attention runs per bucket
# of texts: a bucket of unequal lengths is padded, with an additive mask, and only its real rows are kept.

# a bucket's fixed cost, in attention scores per head: runs of texts merge into one padded bucket where their
# padding costs less than this. One 128-token text's scores (chosen by measurement: docs/benchmarks.md, "Defaults")
BUCKET_COST = 16384


def plan_buckets(lengths, bucket_cost=BUCKET_COST):
    """Cut texts (in packed order) into contiguous runs minimising Σ (texts · longest²) + ``bucket_cost`` a run: the
    attention work of each padded run plus a fixed cost for each. Returns the cut points ``[0, …, n]``; of equal
    costs, the shortest last run."""
    lengths = np.asarray(lengths, dtype=np.float64)
    n = len(lengths)
    best, back = np.zeros(n + 1), np.zeros(n + 1, dtype=np.int64)
    for last in range(1, n + 1):
        # runs first..last-1 for first = last-1 down to 0: their longest text is a running maximum
        longest = np.maximum.accumulate(lengths[last - 1::-1])
        cost = best[last - 1::-1] + np.arange(1, last + 1) * longest * longest + bucket_cost
        i = int(np.argmin(cost))
        best[last], back[last] = cost[i], last - 1 - i
    cuts = [n]
    while cuts[-1]:
        cuts.append(int(back[cuts[-1]]))
    return cuts[::-1]


class Packing:
    """Texts of ``lengths`` laid end to end: their positions and attention buckets.

    The buckets' padded tokens are laid end to end too (``index`` gathers them from the packed row, and ``keep``
    takes the real ones back), so that each attention layer costs three gathers (q, k, v) and one take whatever the
    number of buckets; where no bucket pads, both are None and the buckets are views of the packed row. The plan
    travels to the attention function as the ``packing`` keyword, which transformers' layers pass through."""

    def __init__(self, lengths, bucket_cost=BUCKET_COST):
        lengths = np.asarray(lengths, dtype=np.int64)
        if not len(lengths) or lengths.min() < 1:
            raise ValueError("packing needs at least one text, each of at least one token")
        self.lengths = torch.from_numpy(lengths)
        self.cu, self.positions = text_offsets(self.lengths)
        cu = self.cu.numpy()
        cuts = plan_buckets(lengths, bucket_cost)
        self.shapes, index, valid = [], [], []
        for first, last in zip(cuts[:-1], cuts[1:]):
            longest = int(lengths[first:last].max())
            self.shapes.append((last - first, longest))
            step = np.arange(longest)
            ok = step[None, :] < lengths[first:last, None]
            index.append(np.where(ok, cu[first:last, None] + step[None, :], 0).reshape(-1))
            valid.append(ok)
        self.index = self.keep = None
        self._valid, self._bias = valid, {}
        if not all(v.all() for v in valid):
            self.index = torch.from_numpy(np.concatenate(index))
            self.keep = torch.from_numpy(np.flatnonzero(np.concatenate([v.reshape(-1) for v in valid])))

    def masks(self, dtype):
        """Each bucket's additive mask ``[texts, 1, 1, L]`` (0 for a token, the dtype's minimum for padding), or
        None where it has no padding."""
        if dtype not in self._bias:
            self._bias[dtype] = [None if v.all() else torch.zeros(v.shape, dtype=dtype).masked_fill_(
                torch.from_numpy(~v), torch.finfo(dtype).min)[:, None, None, :] for v in self._valid]
        return self._bias[dtype]

    def take(self, tokens):
        """Packed ``[T, heads, d]`` → each bucket's ``[texts, heads, L, d]``."""
        if self.index is not None:
            tokens = tokens.index_select(0, self.index)
        parts = tokens.split([n * length for n, length in self.shapes])
        return [p.view(n, length, *tokens.shape[1:]).transpose(1, 2) for p, (n, length) in zip(parts, self.shapes)]

    def put(self, outs):
        """Each bucket's ``[texts, heads, L, d]`` → the packed row's ``[T, heads, d]``."""
        out = torch.cat([o.transpose(1, 2).reshape(-1, o.shape[1], o.shape[3]) for o in outs])
        return out if self.keep is None else out.index_select(0, self.keep)


# Architectures whose positions count from the first token whatever the token ids, so that ``inputs_embeds`` gives
# what ``input_ids`` gives. RoBERTa-style models number positions by skipping padding ids, which a text can hold,
# and keep the model's own forward.
PACKED_TYPES = ("bert", "distilbert", "electra")


def packable(transformer):
    """Whether ``Encoder.embed_row`` reads this transformer's architecture: of ``PACKED_TYPES``, with its plain word
    embedding, not a decoder."""
    words = transformer.get_input_embeddings()
    return (transformer.config.model_type in PACKED_TYPES and type(words) is nn.Embedding
            and not getattr(transformer.config, "is_decoder", False))


def differences(transformer):
    """What ``Encoder.embed_row`` relies on that this packable transformer, as this release of transformers writes it,
    lacks, one phrase each (none: an empty list): attention functions from transformers' interface, which the
    packing plan reaches as a keyword; a forward that takes ``inputs_embeds`` and ``position_ids``; and ``**kwargs``
    on every module that hands the attention mask down, so that the plan travels beside it."""
    name = type(transformer).__name__
    found = [] if getattr(transformer, "_supports_attention_backend", False) else \
        [f"{name} takes no attention function of transformers' interface (_supports_attention_backend)"]
    parameters = inspect.signature(type(transformer).forward).parameters
    found += [f"{name}.forward({keyword}=)" for keyword in ("inputs_embeds", "position_ids")
              if keyword not in parameters]
    for module in dict.fromkeys(type(m) for m in transformer.modules()):
        parameters = inspect.signature(module.forward).parameters
        if "attention_mask" in parameters and not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            found.append(f"{module.__name__}.forward(**kwargs)")
    return found


def packs(transformer):
    """Whether ``Encoder.embed_row`` reads this transformer: ``packable``, with the CPU's attention."""
    return packable(transformer) and transformer.config._attn_implementation == ATTENTION


class WordLookup(torch.autograd.Function):
    """``F.embedding`` whose weight gradient is summed into a ``[vocabulary, d]`` buffer the encoder keeps between
    steps (``_word_grad``), where PyTorch's own backward allocates and zeroes a new tensor of that size each time (47
    MB for a BERT vocabulary at d = 384; docs/wikispecter.md, "One word lookup a step"). Autograd takes the returned
    tensor as the parameter's ``.grad`` where there is none yet; where there is one (gradient accumulation), the
    ordinary backward runs, so that the buffer is never written while it is a live gradient."""

    @staticmethod
    def forward(ctx, ids, weight, embedding, owner):
        ctx.save_for_backward(ids)
        ctx.embedding, ctx.owner = embedding, owner
        return nn.functional.embedding(ids, weight, embedding.padding_idx)

    @staticmethod
    def backward(ctx, grad):
        ids, = ctx.saved_tensors
        weight, padding = ctx.embedding.weight, ctx.embedding.padding_idx
        if weight.grad is not None:
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
