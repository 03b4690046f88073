"""The order 03 draws its rows in (common/train/batches.py): the length buckets' sampler sorts within windows, covers
every row and depends on the seed and the epoch."""

import numpy as np

from common.train.batches import BucketBatchSampler


def test_bucket_sampler_sorts_within_windows_covers_every_row_and_depends_on_seed_and_epoch():
    lengths = np.random.default_rng(0).integers(1, 500, size=103)
    sampler = BucketBatchSampler(lengths, batch_size=8, window=4, seed=7, drop_last=False)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 13
    assert sorted(i for b in batches for i in b) == list(range(103))
    order = np.random.default_rng([7, 0]).permutation(103)
    windows = [set(order[s:s + 32].tolist()) for s in range(0, 103, 32)]
    for b in batches:  # every batch comes from one window, longest first
        assert any(set(b) <= w for w in windows)
        assert list(lengths[b]) == sorted(lengths[b], reverse=True)
    assert batches == list(sampler)
    sampler.epoch = 1
    assert batches != list(sampler)
    dropped = BucketBatchSampler(lengths, batch_size=8, window=4, seed=7, drop_last=True)
    assert len(list(dropped)) == len(dropped) == 12 and all(len(b) == 8 for b in dropped)
