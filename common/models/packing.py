"""Training forwards without padding on the CPU: the texts of a step laid end to end as one row.

Every layer but attention works token by token, so on the packed row its matrix products, GELU, layer norms and
dropout see only real tokens. On the demo's triplets (all-MiniLM-L6-v2, 128 tokens, batches of 16 in file order)
three padded length groups hold 12.8 % more tokens than the texts; six hold 6.1 % more. Attention runs per bucket
of texts (``Packing``): a bucket of unequal lengths is padded, with an additive mask, and only its real rows are
kept.

Positions count from each text's first token (``position_ids``), so BERT-style models see what they see padded. The
plan travels to the attention function as the ``packing`` keyword, which transformers' layers pass through.
"""

import numpy as np
import torch
import torch.nn.functional as F

from common.models.dropout import DroppedAttention, keep_mask

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


def offsets(lengths):
    """For texts of ``lengths`` (a 1-D integer tensor) laid end to end: their cumulative lengths ``[n + 1]`` and
    each token's position in its own text ``[T]``, on the lengths' device."""
    cu = F.pad(torch.cumsum(lengths, 0), (1, 0))
    return cu, torch.arange(int(cu[-1]), device=lengths.device) - torch.repeat_interleave(cu[:-1], lengths)


def pool(hidden, lengths, cu, pooling):
    """One float32 vector per text from packed ``[T, d]`` states: the first token's (``"cls"``), or the mean over the
    text (summed in float32), as ``Encoder.pool``."""
    if pooling == "cls":
        return hidden[cu[:-1]].float()
    segment = torch.repeat_interleave(torch.arange(len(lengths), device=hidden.device), lengths)
    out = torch.zeros(len(lengths), hidden.shape[-1], dtype=torch.float32, device=hidden.device)
    return out.index_add(0, segment, hidden.float()) / lengths[:, None].float()


class Packing:
    """Texts of ``lengths`` laid end to end: their positions and attention buckets.

    The buckets' padded tokens are laid end to end too (``index`` gathers them from the packed row, and ``keep``
    takes the real ones back), so that each attention layer costs three gathers (q, k, v) and one take whatever the
    number of buckets; where no bucket pads, both are None and the buckets are views of the packed row."""

    def __init__(self, lengths, bucket_cost=BUCKET_COST):
        lengths = np.asarray(lengths, dtype=np.int64)
        if not len(lengths) or lengths.min() < 1:
            raise ValueError("packing needs at least one text, each of at least one token")
        self.lengths = torch.from_numpy(lengths)
        self.cu, self.positions = offsets(self.lengths)
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


def packed_attention(query, key, value, packing, dropout, scale):
    """Attention of each text over its own tokens, for packed ``[1, heads, T, d]`` q, k, v; returns ``[1, T, heads,
    d]`` as transformers' attention functions do. With 0 < dropout < 1 the probabilities are dropped with
    ``dropout.keep_mask`` (``dropout.DroppedAttention``); otherwise PyTorch's scaled-dot-product attention runs."""
    qs, ks, vs = (packing.take(t[0].transpose(0, 1)) for t in (query, key, value))  # from [T, heads, d]
    outs = []
    for qb, kb, vb, bias in zip(qs, ks, vs, packing.masks(query.dtype)):
        if 0 < dropout < 1:
            keep = keep_mask((*qb.shape[:-1], kb.shape[-2]), dropout, qb.dtype)
            outs.append(DroppedAttention.apply(qb * scale, kb, vb, bias, keep))
        else:
            outs.append(F.scaled_dot_product_attention(qb, kb, vb, attn_mask=bias, scale=scale))
    return packing.put(outs)[None], None
