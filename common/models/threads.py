"""How many threads each batch of embedding runs with on a CPU (``inference.embed``): ``Threads`` follows the cores
actually free, batch by batch (docs/benchmarks.md, "float32 embedding beside other work").
"""

import contextlib
import os
import time

import torch

# On a CPU that other work shares, a parallel region waits for its slowest thread: with one busy process beside it
# on 2 cores, ``embed`` at 2 threads ran at 18.9 documents/s and at 1 thread at 27.2; idle, 2 threads ran at 49.6
# (docs/benchmarks.md, "float32 embedding beside other work"). Which count is faster is a property of the moment,
# not of the machine, so ``Threads`` watches the batches themselves:
#
# - A batch's *share* is the CPU time the process got over the wall time × its threads. On the 2-core AMD EPYC, at 2
#   threads, its median was 1.00 idle, 0.64 beside one busy process and 0.50 beside two (``bench/contention.py``).
# - While every thread gets its core (share ≥ ``SHARED``), every batch runs with the most threads and nothing is
#   probed: an idle machine pays nothing.
# - When the share falls below it, or while a count below the most runs (whose share cannot say whether cores came
#   free), a *round* runs one batch with each candidate count (the most, then halvings down to 1; every other round
#   the other way round) and keeps the one whose batch cost least per padded token. Rounds come every
#   ``PROBE_EVERY`` batches at first; each round that confirms the count already chosen doubles the wait, up to
#   ``LONGEST_WAIT``; a change of count, or a free machine, resets it.
# - While fewer threads run, the machine's own idle time (``/proc/stat``) is read every ``LOOK_EVERY`` batches: where
#   at least half a core stood idle since the last look, the other work has ended and a round starts at once. (In a
#   container the host's idle cores show too; then rounds come every ``LOOK_EVERY`` batches at most.)
#
# The first batch is a warm-up and is not timed. Every count computes the same vectors up to the rounding of a
# parallel reduction.

SHARED = 0.85  # share of CPU time per thread below which the cores are taken to be shared
FREED = 0.5  # idle cores, on average since the last look, that start a round while fewer threads run
LOOK_EVERY = 8  # batches between two looks at the machine's idle time while fewer threads run
PROBE_EVERY = 32  # batches before the first round, and between rounds until one confirms the count
LONGEST_WAIT = 512  # batches between rounds at most


def thread_candidates(most):
    """``most`` and its halvings down to 1: 16 → 16, 8, 4, 2, 1."""
    found = [most]
    while found[-1] > 1:
        found.append(found[-1] // 2)
    return found


def system_idle():
    """The whole machine's idle and total CPU time so far, in clock ticks (``/proc/stat``'s first line: idle +
    iowait, and the sum of its first eight fields), or None where it cannot be read."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
        ticks = [int(x) for x in fields[1:9]]
    except (OSError, ValueError):
        return None
    if not fields or fields[0] != "cpu" or len(ticks) < 5:
        return None
    return ticks[3] + ticks[4], sum(ticks)


class Threads:
    """Chooses a thread count per batch: ``with Threads() as threads:`` around the batches, ``with
    threads.batch(tokens):`` around each, which runs it with the chosen count and times it; leaving the outer block
    restores the count torch had. ``most`` None: ``torch.get_num_threads()``."""

    def __init__(self, most=None, probe_every=PROBE_EVERY, clock=time.perf_counter, cpu_clock=time.process_time,
                 idle_clock=system_idle, cores=None, look_every=LOOK_EVERY):
        self.before = torch.get_num_threads()
        self.idle_clock, self.cores, self.look_every = idle_clock, cores or os.cpu_count() or 1, look_every
        self.idle_mark = None  # the machine's idle and total ticks when the count last changed or was looked at
        self.candidates = thread_candidates(most or self.before)
        self.most = self.candidates[0]
        self.probe_every, self.clock, self.cpu_clock = probe_every, clock, cpu_clock
        self.count = self.most  # the count batches run with outside rounds
        self.wait = probe_every  # batches from one round to the next
        self.since = probe_every  # batches since the last round: a first sign of sharing starts one at once
        self.probes = []  # counts still to probe in this round
        self.cost = {}  # count → seconds per padded token of its batch in the current round
        self.batches = self.rounds = 0

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()

    def close(self):
        torch.set_num_threads(self.before)

    @contextlib.contextmanager
    def batch(self, tokens):
        """One batch, run with the count of the moment: a probe's within a round, else the chosen one. A batch that
        fails, and the first (a warm-up), are not timed."""
        count = self.probes[0] if self.probes else self.count
        if torch.get_num_threads() != count:
            torch.set_num_threads(count)
        start, cpu, timed = self.clock(), self.cpu_clock(), self.batches > 0
        self.batches += 1
        yield
        if timed:
            self.timed(count, self.clock() - start, self.cpu_clock() - cpu, tokens)

    def timed(self, count, seconds, cpu, tokens):
        """What one timed batch says: its cost, and whether the next batches start, go on or end a round."""
        if self.probes:
            self.cost[self.probes.pop(0)] = seconds / max(tokens, 1)
            if not self.probes:
                self._end_round()
            return
        self.since += 1
        if count < self.most and self.since % self.look_every == 0 and self._freed():
            self.wait = self.since = self.probe_every  # the other work has ended: a round at once
        if count == self.most and not (count > 1 and cpu < SHARED * seconds * count):
            self.wait = self.probe_every  # the cores are free: the next sign of sharing is probed at once
        elif self.since >= self.wait:
            # batches run longest first, so a later probe times shorter texts, cheaper per token: every other round
            # probes in the reverse order, so that no count is always the one timed on the shorter batches
            self.probes = self.candidates[::-1] if self.rounds % 2 else list(self.candidates)
            self.cost, self.rounds = {}, self.rounds + 1

    def _freed(self):
        """Whether at least ``FREED`` cores stood idle, on average, since the last look (or the end of a round)."""
        now, before = self.idle_clock(), self.idle_mark
        self.idle_mark = now
        if now is None or before is None or now[1] <= before[1]:
            return False
        return (now[0] - before[0]) / (now[1] - before[1]) * self.cores >= FREED

    def _end_round(self):
        self.idle_mark = self.idle_clock()
        best = min(self.cost, key=self.cost.get)
        self.wait = min(self.wait * 2, LONGEST_WAIT) if best == self.count else self.probe_every
        self.count, self.since = best, 0
