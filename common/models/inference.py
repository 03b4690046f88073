"""Inference: the embeddings of every text of a ``TokenStore`` (``embed``), in length-sorted batches written as they
are computed, the same cut into one shard per process and gathered (``embed_sharded``), and the device a loaded
encoder goes to where nothing else says (``default_device``).
"""

import contextlib

import numpy as np
import torch

from common.models.batching import length_batches, token_budget


def default_device():
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _packed_attention(transformer):
    """Whether this model can read unpadded (variable-length) batches here: flash attention on a GPU, for an
    architecture transformers offers it for."""
    from transformers.utils import is_flash_attn_2_available
    return (transformer.device.type == "cuda" and getattr(transformer, "_supports_flash_attn", False)
            and is_flash_attn_2_available())


@contextlib.contextmanager
def _attention(transformer, implementation):
    before = transformer.config._attn_implementation
    if implementation == before:
        yield
        return
    transformer.set_attn_implementation(implementation)
    try:
        yield
    finally:
        transformer.set_attn_implementation(before)


def _threads(device):
    """On a CPU, the thread count each batch runs with (``threads.Threads``); elsewhere nothing."""
    if device.type != "cpu":
        return contextlib.nullcontext()
    from common.models.threads import Threads
    return Threads()


@torch.inference_mode()
def embed(encoder, store, batch_size=64, batch_tokens=None, progress=None, rows=None, out=None):
    """Embeddings of every text in ``store`` (or of positions ``rows``), float32 ``[N, d]``, in the store's order.

    The texts are sorted by token length once and cut by ``length_batches`` (``batch_tokens`` None: the device's
    default budget, ``batching.BATCH_TOKENS``; 0: ``batch_size`` alone). Each batch's rows are written into
    ``out`` as soon as they are computed, so ``out`` may be a memory-mapped NPY (``vectors.open_npy``) and the vectors
    are never held whole in memory; without it a new array is returned. On a GPU the encoder runs in bfloat16 and,
    where flash attention is installed, on unpadded batches. On a CPU it runs in bfloat16 autocast where the encoder
    is ``precision.encoder_for``'s bf16 view (``encoder.bf16``), each batch with every thread torch has unless
    ``threads.Threads`` sees the cores shared and finds fewer faster."""
    device = next(encoder.parameters()).device
    encoder.eval()
    rows = np.arange(len(store)) if rows is None else np.asarray(rows)
    if out is None:
        out = np.zeros((len(rows), encoder.dimension), dtype=np.float32)
    packed = _packed_attention(encoder.transformer)
    with _attention(encoder.transformer, "flash_attention_2" if packed else
                    encoder.transformer.config._attn_implementation), \
            torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda" or encoder.bf16), \
            _threads(device) as threads:
        for idx in length_batches(store.lengths()[rows], batch_size, token_budget(batch_tokens, device.type)):
            if packed:
                ids, lengths = store.packed(rows[idx])
                vectors = encoder.embed_packed(ids.to(device), lengths)
            else:
                ids, mask = store.pad(rows[idx])
                with threads.batch(ids.numel()) if threads else contextlib.nullcontext():
                    vectors = encoder.embed(ids.to(device), mask.to(device))
            out[idx] = vectors.float().cpu().numpy()
            if progress is not None:
                progress.update(len(idx))
    return out


class Rows:
    """The rows ``rows`` of ``out`` as what ``embed`` writes into: its item i is ``out[rows[i]]``."""

    def __init__(self, out, rows):
        self.out, self.rows = out, rows

    def __setitem__(self, idx, value):
        self.out[self.rows[idx]] = value


def embed_sharded(encoder, store, batch_size=64, batch_tokens=None, progress=None, out=None, block=4096,
                  collect=True, first=None, ready=None):
    """``embed`` with the texts cut into one contiguous shard per process (under ``accelerate launch`` or any
    initialised process group) and the shards gathered in order, ``block`` rows of each at a time, into ``out`` (or
    a new array) on every process; with ``collect=False`` this process takes part in the gathering but keeps
    nothing and returns None (a process that only helps need not hold every vector). Each text is embedded exactly
    as one process would embed it (same tokens, no gradient); only the length-sorted batch it shares padding with
    differs, which the attention mask makes irrelevant (up to the rounding of a product of another shape).

    On one process, with ``first`` (positions) and ``ready``, the texts ``first`` are embedded before the others
    and ``ready(out)`` is called as soon as their rows are in ``out``, so that work on them runs while the rest is
    embedded (05 classifies the topic documents then); under several processes ``ready`` is not called."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        if first is None or ready is None or not len(first):
            return embed(encoder, store, batch_size, batch_tokens, progress, out=out)
        if out is None:
            out = np.zeros((len(store), encoder.dimension), dtype=np.float32)
        first = np.unique(first)
        rest = np.setdiff1d(np.arange(len(store)), first)
        embed(encoder, store, batch_size, batch_tokens, progress, first, Rows(out, first))
        ready(out)
        embed(encoder, store, batch_size, batch_tokens, progress, rest, Rows(out, rest))
        return out
    world, rank = dist.get_world_size(), dist.get_rank()
    bounds = np.linspace(0, len(store), world + 1).astype(np.int64)
    sizes = np.diff(bounds)
    mine = embed(encoder, store, batch_size, batch_tokens, progress, np.arange(bounds[rank], bounds[rank + 1]))
    if out is None and collect:
        out = np.zeros((len(store), mine.shape[1]), dtype=np.float32)
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    for start in range(0, int(sizes.max()), block):
        padded = torch.zeros(min(block, int(sizes.max()) - start), mine.shape[1], device=device)
        part = torch.from_numpy(mine[start:start + len(padded)])
        padded[:len(part)] = part.to(device)
        parts = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(parts, padded)
        if not collect:
            continue
        for r, p in enumerate(parts):
            n = int(np.clip(sizes[r] - start, 0, len(padded)))
            out[bounds[r] + start:bounds[r] + start + n] = p[:n].cpu().numpy()
    return out if collect else None
