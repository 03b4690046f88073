"""How the training rows become batches: drawn in a permutation from (seed, epoch), the same in every process and on
resume, optionally in batches of similar token length, collated ahead on a GPU (``loaders``); a batch cut into parts
(``--chunk-tokens``), which 03's loop runs forward and backward one part at a time, or into the chunks its GradCache
embeds one at a time (``--cache-chunk``)."""

import signal

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from common.io import InputError


class EpochSampler(Sampler):
    """A permutation of the training rows drawn from (seed, epoch): the same in every process and on resume."""

    def __init__(self, n, seed):
        self.n, self.seed, self.epoch = n, seed, 0

    def __iter__(self):
        return iter(np.random.default_rng([self.seed, self.epoch]).permutation(self.n).tolist())

    def __len__(self):
        return self.n


class BucketBatchSampler(Sampler):
    """Batches of similar token length that keep the corpus's length mix: the (seed, epoch) permutation is cut
    into windows of ``window`` batches, each window sorted by length and cut into batches, and the batches are
    shuffled with the same generator (the "sortish" sampler of fairseq and transformers)."""

    def __init__(self, lengths, batch_size, window, seed, drop_last):
        self.lengths, self.batch_size, self.window = np.asarray(lengths), batch_size, window
        self.seed, self.drop_last, self.epoch = seed, drop_last, 0

    def __iter__(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        order = rng.permutation(len(self.lengths))
        span = self.batch_size * self.window
        for start in range(0, len(order), span):
            chunk = order[start:start + span]
            order[start:start + span] = chunk[np.argsort(-self.lengths[chunk], kind="stable")]
        batches = [order[i:i + self.batch_size].tolist() for i in range(0, len(order), self.batch_size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        return iter([batches[i] for i in rng.permutation(len(batches))])

    def __len__(self):
        n = len(self.lengths)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


class BatchParts:
    """``--chunk-tokens``'s collate: ``objective.collate(rows)``, or for a batch holding more than ``budget`` tokens
    ``{"parts": [collate(part), ...], "sizes": [...]}``, the fewest parts of consecutive rows of near-equal count
    that keep each part near the budget (one row at least), which the loop runs forward and backward one at a
    time. Only for an objective whose examples' losses are independent (``Objective.independent``)."""

    def __init__(self, objective, budget):
        self.objective, self.budget = objective, budget

    def __call__(self, rows):
        rows = np.asarray(rows)
        tokens = int(self.objective.row_tokens(rows).sum())
        count = min(len(rows), -(-tokens // self.budget))
        if count <= 1:
            return self.objective.collate(rows)
        parts = np.array_split(rows, count)
        return {"parts": [self.objective.collate(p) for p in parts], "sizes": [len(p) for p in parts]}


class CacheChunks:
    """``--cache-chunk``'s collate, for an objective whose loss is computed from the batch's embeddings together
    (``Objective.embeds``): the batch of ``rows`` with its embedding inputs in chunks of ``size`` consecutive rows,
    ``{"chunks": [inputs, ...], ...}``, each as ``objective.collate`` makes it for its rows (padded to its own
    longest text), and the batch's per-example values joined; the loop's GradCache embeds a chunk at a time."""

    def __init__(self, objective, size):
        self.objective, self.size = objective, size

    def __call__(self, rows):
        rows = np.asarray(rows)
        parts = [self.objective.collate(rows[s:s + self.size]) for s in range(0, len(rows), self.size)]
        batch = {key: torch.cat([part[key] for part in parts]) for key in parts[0] if key != "inputs"}
        batch["chunks"] = [part["inputs"] for part in parts]
        return batch


def ignore_sigterm(worker):
    """A data-loader worker lives on through SIGTERM (Slurm sends it to every process of the job), so that the loop,
    which checkpoints on it, is not stopped first by a worker's death."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def loaders(objective, args, gpu):
    """The training data loader over ``objective.train_rows`` (its sampler beside it, whose epoch the loop sets) and
    the validation one. On a GPU, batches are collated ahead by ``--loader-workers`` processes into pinned memory
    and copied while the kernels queued before run; the same batches (each example's randomness is its own), in the
    same order."""
    rows = objective.train_rows
    collate = BatchParts(objective, args.chunk_tokens) if args.chunk_tokens else \
        CacheChunks(objective, args.cache_chunk) if args.cache_chunk else objective.collate
    ahead = {"pin_memory": gpu, "num_workers": args.loader_workers if gpu else 0}
    if ahead["num_workers"]:
        ahead["worker_init_fn"] = ignore_sigterm
    if args.length_buckets:
        sampler = BucketBatchSampler(objective.train_lengths(), args.batch_size, args.length_buckets, args.seed,
                                     args.drop_last)
        train_dl = DataLoader(rows, batch_sampler=sampler, collate_fn=collate, **ahead)
    else:
        sampler = EpochSampler(len(rows), args.seed)
        train_dl = DataLoader(rows, batch_size=args.batch_size, sampler=sampler, drop_last=args.drop_last,
                              collate_fn=collate, **ahead)
    if not len(train_dl):
        raise InputError(f"{len(rows)} training rows make no full batch of {args.batch_size}")
    val_dl = DataLoader(objective.val_rows, batch_size=args.batch_size, collate_fn=objective.collate, pin_memory=gpu)
    return sampler, train_dl, val_dl
