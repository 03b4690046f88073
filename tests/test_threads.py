"""The thread count a CPU embedding runs each batch with (common/models/threads.py): the candidate counts, the rounds
of probes that shared cores start and how often they come, a failed batch left untimed, and ``embed``'s vectors at
every count, with torch's setting restored afterwards."""

import numpy as np
import pytest
import torch

from common.models import threads
from common.models.threads import Threads, thread_candidates


def test_candidates_are_the_most_and_its_halvings_down_to_one():
    assert thread_candidates(16) == [16, 8, 4, 2, 1]
    assert thread_candidates(6) == [6, 3, 1]
    assert thread_candidates(2) == [2, 1]
    assert thread_candidates(1) == [1]


class Clocks:
    """A wall clock, a CPU-time clock and the machine's idle ticks that a batch advances: by its cost per token at
    the thread count it ran with, by that time × the count × the share of their cores the threads got, and by that
    time × the cores nobody used (2 cores: the ones our threads and other work leave free)."""

    def __init__(self):
        self.wall = self.cpu = 0.0
        self.idle = self.total = 0.0

    def run(self, threads, cost, share, batches, others=0, tokens=100):
        used = []
        for _ in range(batches):
            with threads.batch(tokens):
                count = torch.get_num_threads()
                used.append(count)
                seconds = cost[count] * tokens
                self.wall += seconds
                self.cpu += seconds * count * share[count]
                self.idle += seconds * max(0, 2 - count - others)
                self.total += seconds * 2
        return used


def chooser(most=2, probe_every=4, look_every=2):
    clocks = Clocks()
    return Threads(most=most, probe_every=probe_every, clock=lambda: clocks.wall, cpu_clock=lambda: clocks.cpu,
                   idle_clock=lambda: (clocks.idle, clocks.total), cores=2, look_every=look_every), clocks


IDLE = {"cost": {2: 1.0, 1: 2.0}, "share": {2: 1.0, 1: 1.0}}  # 2 threads twice as fast, each with its core
BUSY = {"cost": {2: 3.0, 1: 2.0}, "share": {2: 0.6, 1: 1.0}, "others": 1}  # another process takes a core


def test_an_idle_machine_runs_every_batch_with_the_most_threads_and_probes_nothing():
    before = torch.get_num_threads()
    threads, clocks = chooser()
    try:
        assert clocks.run(threads, batches=40, **IDLE) == [2] * 40
        assert threads.cost == {}
    finally:
        threads.close()
    assert torch.get_num_threads() == before


def test_shared_cores_start_a_round_whose_cheapest_count_runs_until_the_next_and_a_free_machine_brings_back_the_most():
    threads, clocks = chooser()
    try:
        assert clocks.run(threads, batches=3, **IDLE) == [2, 2, 2]
        # the first batch beside a busy process gets 0.6 of its cores: a round probes 2 and 1 threads at once, and 1
        # (2.0 s a token against 3.0) runs the next 4 batches; the next round, probing the other way round,
        # confirms 1 and doubles the wait to 8
        assert clocks.run(threads, batches=9, **BUSY) == [2, 2, 1, 1, 1, 1, 1, 1, 2]
        assert threads.cost == {2: 3.0, 1: 2.0} and threads.wait == 8
        # the busy process ends: at 1 thread its share cannot show it, but the machine's idle core does at the next
        # look (2 batches on), which starts a round at once instead of after the wait of 8: 2 threads are cheaper
        # again, and from then on nothing is probed
        assert clocks.run(threads, batches=15, **IDLE) == [1] * 2 + [2, 1] + [2] * 11
        assert threads.count == 2 and threads.wait == 4
    finally:
        threads.close()


def test_without_an_idle_core_in_sight_fewer_threads_keep_their_wait():
    threads, clocks = chooser()
    try:
        clocks.run(threads, batches=1, **IDLE)
        assert clocks.run(threads, batches=9, **BUSY) == [2, 2, 1, 1, 1, 1, 1, 1, 2]
        # still busy: the looks every 2 batches find no idle core, so the next round waits the full 8 batches
        assert clocks.run(threads, batches=10, **BUSY) == [1] * 8 + [2, 1]
        # where the machine's idle time cannot be read, only the rounds find freed cores
        threads.idle_clock = lambda: None
        assert clocks.run(threads, batches=18, **IDLE) == [1] * 16 + [1, 2]
    finally:
        threads.close()


def test_rounds_that_keep_the_most_threads_beside_other_work_come_ever_more_rarely():
    threads, clocks = chooser()
    shared = {"cost": {2: 1.5, 1: 2.0}, "share": {2: 0.7, 1: 1.0}}  # shared, yet 2 threads stay faster
    try:
        used = clocks.run(threads, batches=66, **shared)
        # the first shared batch (1, after the warm-up) starts a round at once; each round keeps 2 threads and
        # doubles the wait from 4: the next rounds follow 8, 16 and 32 batches at 2 threads, every other one probing
        # 1 thread first
        assert [i for i, count in enumerate(used) if count == 1] == [3, 12, 31, 64]
        assert threads.wait == 64
    finally:
        threads.close()


def test_one_thread_is_never_probed_against_itself():
    threads, clocks = chooser(most=1)
    try:
        assert clocks.run(threads, batches=40, cost={1: 1.0}, share={1: 0.3}) == [1] * 40
    finally:
        threads.close()


def test_a_failed_batch_is_not_timed():
    threads, clocks = chooser()
    threads.since = 0
    for _ in range(2):
        with pytest.raises(RuntimeError):
            with threads.batch(10):
                raise RuntimeError("out of memory")
    threads.close()
    assert threads.cost == {} and threads.since == 0 and threads.batches == 2


def test_embed_gives_the_vectors_of_one_thread_and_restores_the_thread_count(tiny_model, monkeypatch):
    """``embed`` on a CPU changes the thread count between batches (here every batch counts as shared, so rounds of
    probes run); every count computes the same vectors up to the rounding of a parallel reduction, and torch's
    setting is what it was afterwards, also after an error in the middle of a round."""
    from common.models.inference import embed
    from common.models.loading import load_encoder
    from common.models.tokens import TokenStore
    encoder, tokenizer, _ = load_encoder(tiny_model, pooling="mean", max_length=48)
    texts = [f"text {i} " + "word " * (i % 40) for i in range(200)]
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one = embed(encoder, TokenStore(tokenizer, texts, 48), batch_size=4)
    finally:
        torch.set_num_threads(before)
    monkeypatch.setattr(threads, "SHARED", 2.0)  # no share reaches it: the cores always look shared
    used, set_threads = [], torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (used.append(n), set_threads(n)))

    class FailsAtBatch:
        """An output array whose ``n``-th batch cannot be written. The 4th is the first round's 1-thread probe: the
        warm-up, the batch that finds the cores shared and the 2-thread probe come before it."""
        def __init__(self, n):
            self.rows, self.writes = np.zeros((len(texts), encoder.dimension), dtype=np.float32), 0
            self.n = n

        def __setitem__(self, key, value):
            self.writes += 1
            if self.writes == self.n:
                raise OSError("disk full")
            self.rows[key] = value

    torch.set_num_threads(2)
    try:
        chosen = FailsAtBatch(0)
        embed(encoder, TokenStore(tokenizer, texts, 48), batch_size=4, out=chosen)
        assert 1 in used and torch.get_num_threads() == 2  # a round ran a batch at 1 thread; 2 are back
        used.clear()
        with pytest.raises(OSError):
            embed(encoder, TokenStore(tokenizer, texts, 48), batch_size=4, out=FailsAtBatch(4))
        assert used[-2:] == [1, 2] and torch.get_num_threads() == 2  # failed at 1 thread, then restored
    finally:
        set_threads(before)
    np.testing.assert_allclose(chosen.rows, one, rtol=0, atol=1e-5)
