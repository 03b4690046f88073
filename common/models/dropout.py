"""Dropout on the CPU without PyTorch's slow mask: the same Bernoulli(p) drop mask and 1 / (1 - p) scaling of
what is kept, drawn and applied several times faster.

PyTorch's CPU dropout fills a float tensor with ``bernoulli_`` and multiplies by it; with dropout on the attention
probabilities, transformers' SDPA attention also leaves the fused attention kernel for PyTorch's composite one.
Both are a large share of a CPU training step (docs/benchmarks.md, "CPU dropout"). Here the mask comes from
NumPy's SFC64 generator, 32 random bits an element compared with ``round(p · 2³²)``, in blocks spread over
PyTorch's number of threads, as a float tensor of 0 and 1 / (1 - p): applying a float mask is one vectorised
multiplication, where PyTorch's operations on a boolean mask (``where``, ``masked_fill_``) are slower. A float mask
costs 4 bytes an element to keep for the backward pass where PyTorch's own keeps 1.

Reproducibility: each mask is seeded with one draw from PyTorch's global generator, and each block of
``BLOCK`` elements has its own stream from that seed and the block's number, so a run's masks follow from
``torch.manual_seed``, resume with the checkpointed RNG state like PyTorch's own, and do not depend on the number
of threads. ``attention.py`` puts ``Dropout`` and ``DroppedAttention`` into a loaded model; ``packing.py`` uses
``DroppedAttention`` for packed texts. This module imports neither.
"""

import concurrent.futures
import os

import numpy as np
import torch
from torch import nn

BLOCK = 1 << 18  # elements per random stream (and per task of the thread pool)
_pool = None


def _forget_pool():
    """A forked child inherits the pool object but not its threads; it builds its own."""
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool)


def _fill(out, seed, block, cut, scale):
    """``out`` (a block) ← ``scale`` where the block's random bits are >= ``cut``, else 0."""
    bits = np.random.SFC64([seed, block]).random_raw((len(out) + 1) // 2).view(np.int32)[:len(out)]
    np.multiply(np.greater_equal(bits, cut), out.dtype.type(scale), out=out)


def keep_mask(shape, p, dtype=torch.float32):
    """A tensor of ``shape`` and ``dtype`` (float64 drawn as such; other dtypes from a float32 mask): each element 0 (dropped) with probability p (to
    2⁻³²), independently, else 1 / (1 - p)."""
    global _pool
    n = int(np.prod(shape, dtype=np.int64))
    seed = int(torch.randint(0, 2 ** 62, (), dtype=torch.int64))
    # bits are uniform on [-2^31, 2^31): P(bits < cut) = round(p * 2^32) / 2^32
    cut, scale = round(p * 2 ** 32) - 2 ** 31, 1.0 / (1.0 - p)
    out = np.empty(n, dtype=np.float64 if dtype == torch.float64 else np.float32)
    tasks = [(out[start:start + BLOCK], seed, i, cut, scale) for i, start in enumerate(range(0, n, BLOCK))]
    threads = torch.get_num_threads()
    if len(tasks) > 1 and threads > 1:
        if _pool is None or _pool._max_workers != threads:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="dropout")
        list(_pool.map(lambda task: _fill(*task), tasks))  # NumPy releases the GIL in both steps
    else:
        for task in tasks:
            _fill(*task)
    return torch.from_numpy(out).view(shape).to(dtype)


def dropout(x, p, training=True):
    """``torch.nn.functional.dropout`` with the mask drawn by ``keep_mask`` on a CPU tensor."""
    if not training or x.device.type != "cpu" or not 0 < p < 1:
        return nn.functional.dropout(x, p, training)
    return x * keep_mask(x.shape, p, x.dtype)


class Dropout(nn.Dropout):
    """``nn.Dropout`` (same ``p``, same place in the model) whose CPU mask comes from ``keep_mask``."""

    def forward(self, x):
        if self.inplace:
            return super().forward(x)
        return dropout(x, self.p, self.training)


class DroppedAttention(torch.autograd.Function):
    """softmax(q kᵀ + bias) ⊙ keep, times v, with its backward written out. q, k, v are ``[B, H, L, d]``, q already
    scaled by the attention's own scale; ``bias`` is an additive mask that broadcasts to ``[B, H, L, L]`` (or None);
    ``keep`` is ``[B, H, L, L]`` from ``keep_mask`` (0 or 1 / (1 - p)).

    The probabilities P and the dropped ones D = P ⊙ keep are kept; the backward needs no mask: with G = grad · vᵀ
    and T = G ⊙ D, the scores' gradient P ⊙ (G ⊙ keep − rowsum(G ⊙ keep ⊙ P)) is T − P ⊙ rowsum(T), done in place
    on T."""

    @staticmethod
    def forward(ctx, q, k, v, bias, keep):
        b, h, n, d = q.shape
        q, k, v = (t.reshape(b * h, t.shape[-2], d) for t in (q, k, v))
        probs = torch.bmm(q, k.transpose(1, 2))
        if bias is not None:
            probs.view(b, h, n, -1).add_(bias)
        probs = torch.softmax(probs, dim=-1)
        dropped = probs * keep.reshape(probs.shape)
        ctx.save_for_backward(q, k, v, probs, dropped)
        ctx.shape = (b, h)
        return torch.bmm(dropped, v).view(b, h, n, d)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, probs, dropped = ctx.saved_tensors
        b, h = ctx.shape
        grad = grad.reshape(b * h, grad.shape[-2], grad.shape[-1])
        # Dᵀ · grad as (gradᵀ · D)ᵀ: only the [L, d] operands are transposed
        grad_v = torch.bmm(grad.transpose(1, 2), dropped).transpose(1, 2)
        scores = torch.bmm(grad, v.transpose(1, 2)).mul_(dropped)
        scores.addcmul_(probs, scores.sum(-1, keepdim=True), value=-1.0)
        grad_q = torch.bmm(scores, k)
        grad_k = torch.bmm(q.transpose(1, 2), scores).transpose(1, 2)
        return (grad_q.view(b, h, *grad_q.shape[1:]), grad_k.view(b, h, *grad_k.shape[1:]),
                grad_v.view(b, h, *grad_v.shape[1:]), None, None)
