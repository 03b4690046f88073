"""The CPU layer's dropout (``cpu.install``): ``nn.Dropout`` becomes ``Dropout``, the same Bernoulli(p) mask drawn
from NumPy's SFC64 in blocks over torch's threads (``keep_mask``), not PyTorch's ``bernoulli_``; the attention's
dropout draws its masks here too (``cpu_attention.py``). Why it is faster, with its figures: docs/benchmarks.md
("CPU dropout").

Reproducibility: each dropout mask is seeded with one draw from PyTorch's global generator, and each block of
``BLOCK`` elements has its own stream from that seed and the block's number, so a run's masks follow from
``torch.manual_seed``, resume with the checkpointed RNG state like PyTorch's own, and do not depend on the number of
threads. A float mask costs 4 bytes an element to keep for the backward pass where PyTorch's own keeps 1.
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
    """A tensor of ``shape`` and ``dtype`` (float64 drawn as such; other dtypes from a float32 mask): each element 0
    (dropped) with probability p (to 2⁻³²), independently, else 1 / (1 - p). Applying a float mask is one
    vectorised multiplication, where PyTorch's operations on a boolean mask (``where``, ``masked_fill_``) are
    slower."""
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
    """``torch.nn.functional.dropout`` with the mask drawn by ``keep_mask``."""
    if not training or not 0 < p < 1:
        return nn.functional.dropout(x, p, training)
    return x * keep_mask(x.shape, p, x.dtype)


class Dropout(nn.Dropout):
    """``nn.Dropout`` (same ``p``, same place in the model) whose mask comes from ``keep_mask``."""

    def forward(self, x):
        if self.inplace:
            return super().forward(x)
        return dropout(x, self.p, self.training)
