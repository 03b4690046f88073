"""The number of torch threads a CPU embedding runs each batch with, following the cores actually free.

On a CPU that other work shares, a parallel region waits for its slowest thread: with one busy process beside it on
2 cores, ``embed`` at 2 threads ran at 18.9 documents/s and at 1 thread at 27.2; idle, 2 threads ran at 49.6
(docs/benchmarks.md, "float32 embedding beside other work"). Which count is faster is a property of the moment, not
of the machine, so ``Threads`` watches the batches themselves:

- A batch's *share* is the CPU time the process got over the wall time × its threads. Idle it is 1.00 on the 2-core
  AMD EPYC; beside one busy process 0.6 at 2 threads; beside two, 0.5.
- While every thread gets its core (share ≥ ``SHARED``), every batch runs with the most threads and nothing is
  probed: an idle machine pays nothing.
- When the share falls below it, or while a count below the most runs (whose share cannot say whether cores came
  free), a *round* runs one batch with each candidate count (the most, then halvings down to 1; every other round
  the other way round) and keeps the one whose batch cost least per padded token. Rounds come every
  ``PROBE_EVERY`` batches at first; each round that confirms the count already chosen doubles the wait, up to
  ``LONGEST_WAIT``; a change of count, or a free machine, resets it. Cores freed while fewer threads run are
  found only by the next round, up to ``LONGEST_WAIT`` batches later.

The first batch is a warm-up and is not timed. Every count computes the same vectors up to the rounding of a parallel
reduction (tests/test_threads.py).
"""

import time

import torch

SHARED = 0.85  # share of CPU time per thread below which the cores are taken to be shared
PROBE_EVERY = 32  # batches before the first round, and between rounds until one confirms the count
LONGEST_WAIT = 512  # batches between rounds at most


def candidates(most):
    """``most`` and its halvings down to 1: 16 → 16, 8, 4, 2, 1."""
    found = [most]
    while found[-1] > 1:
        found.append(found[-1] // 2)
    return found


class Threads:
    """Chooses a thread count per batch. ``with threads.batch(tokens):`` runs the batch with the chosen count and
    times it; ``close`` restores the count torch had. ``most`` None: ``torch.get_num_threads()``."""

    def __init__(self, most=None, probe_every=PROBE_EVERY, clock=time.perf_counter, cpu_clock=time.process_time):
        self.before = torch.get_num_threads()
        self.candidates = candidates(most or self.before)
        self.most = self.candidates[0]
        self.probe_every, self.clock, self.cpu_clock = probe_every, clock, cpu_clock
        self.count = self.most  # the count batches run with outside rounds
        self.wait = probe_every  # batches from one round to the next
        self.since = probe_every  # batches since the last round: a first sign of sharing starts one at once
        self.probes = []  # counts still to probe in this round
        self.cost = {}  # count → seconds per padded token of its batch in the current round
        self.batches = self.rounds = 0

    def choose(self):
        return self.probes[0] if self.probes else self.count

    def batch(self, tokens):
        return _Timed(self, self.choose(), tokens)

    def timed(self, count, seconds, cpu, tokens):
        """What one timed batch says: its cost, and whether the next batches start, go on or end a round."""
        if self.probes:
            self.cost[self.probes.pop(0)] = seconds / max(tokens, 1)
            if not self.probes:
                self._end_round()
            return
        self.since += 1
        shared = count > 1 and cpu < SHARED * seconds * count
        if count == self.most and not shared:
            self.wait = self.probe_every  # the cores are free: the next sign of sharing is probed at once
        elif self.since >= self.wait and len(self.candidates) > 1:
            # batches run longest first, so a later probe times shorter texts, cheaper per token: every other round
            # probes in the reverse order, so that no count is always the one timed on the shorter batches
            self.probes = self.candidates[::-1] if self.rounds % 2 else list(self.candidates)
            self.cost, self.rounds = {}, self.rounds + 1

    def _end_round(self):
        best = min(self.cost, key=self.cost.get)
        self.wait = min(self.wait * 2, LONGEST_WAIT) if best == self.count else self.probe_every
        self.count, self.since = best, 0

    def close(self):
        torch.set_num_threads(self.before)


class _Timed:
    def __init__(self, threads, count, tokens):
        self.threads, self.count, self.tokens = threads, count, tokens

    def __enter__(self):
        if torch.get_num_threads() != self.count:
            torch.set_num_threads(self.count)
        self.start, self.cpu = self.threads.clock(), self.threads.cpu_clock()
        return self

    def __exit__(self, kind, *_):
        threads = self.threads
        if kind is None and threads.batches:
            threads.timed(self.count, threads.clock() - self.start, threads.cpu_clock() - self.cpu, self.tokens)
        threads.batches += 1
        return False
