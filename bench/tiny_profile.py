"""Where a training step of the tiny rows (bench/all.py's tiny-*) goes, ours and theirs: milliseconds a step in
collate, forward, backward, optimizer, logging and the rest, timed by wrappers around the calls each loop makes.

    python bench/tiny_profile.py                          # tiny-mlm: 3 rounds of 120 steps a side, 20 left out
    python bench/tiny_profile.py --row tiny-triplet --rounds 1 --cprofile 25
    OMP_NUM_THREADS=1 python bench/tiny_profile.py --clock cpu  # a step's work on one thread, on a busy machine

Each side runs in a fresh process, --rounds times, interleaved, on the tiny BERT (bench/shared.py's TINY_SHAPE) at
--batch × --length, as bench/all.py's row runs it: ours 03_train.py (called in the process, --log-every 10), theirs
bench/train.py's Trainer (transformers' for mlm, sentence-transformers' for triplet and mnrl). A step is the interval
between two consecutive ends of the optimizer's ``step``; the categories are the time spent inside these calls (the
outermost one where they nest), the same calls on both sides where the two loops share them (Accelerate's):

| category  | the calls timed                                                                                    |
|-----------|----------------------------------------------------------------------------------------------------|
| collate   | the DataLoader iterator's ``__next__``: sampler, rows and collate function (ours the objective's    |
|           | ``collate_train``; sentence-transformers' collator tokenises there, transformers' masks there)      |
| forward   | ours the objective's ``losses``; theirs ``Trainer.compute_loss`` (sentence-transformers' own)       |
| backward  | ``Accelerator.backward``, both sides                                                               |
| optimizer | gradient clipping, the optimizer's ``step`` and ``zero_grad`` (or the module's), the schedule's     |
|           | ``step``; theirs also ``Trainer._get_grad_norm``                                                   |
| logging   | ours ``RunFolder.write_log``, tqdm, ``Accelerator.reduce``; theirs                                 |
|           | ``Trainer._maybe_log_save_evaluate`` and the callbacks                                             |
| other     | the step's time less the above: each loop's own Python, seeding, checks, Accelerate's data-loader   |
|           | wrapper                                                                                            |

--row tiny-embed times --calls calls of the embed row's function (ours ``embed``, theirs ``encode``) on --docs
abstracts instead, a call for a step: collate is tokenising and padding, forward the model with its pooling.

--cprofile N adds each side's N functions of most own time over the timed steps (cProfile, which slows Python-heavy
code more than the kernels: read it for where, not for how long).
"""

import argparse
import json
import os
import runpy
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.shared import OFFLINE, TINY_SHAPE, build_model  # noqa: E402

CATEGORIES = ("collate", "forward", "backward", "optimizer", "logging", "other")


class Timers:
    """Seconds spent in wrapped calls by category (the outermost wrapped call only, where they nest), and the
    times at which the optimizer's steps end."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.spent = dict.fromkeys(CATEGORIES[:-1], 0.0)
        self.calls = dict.fromkeys(CATEGORIES[:-1], 0)
        self.active = False
        self.ends, self.snapshots, self.counted = [], [], []

    def wrap(self, owner, name, category, step_end=False):
        original = owner.__dict__[name]
        timers = self

        def wrapper(*args, **kwargs):
            if timers.active:
                return original(*args, **kwargs)
            timers.active = True
            start = timers.clock()
            try:
                return original(*args, **kwargs)
            finally:
                now = timers.clock()
                timers.spent[category] += now - start
                timers.calls[category] += 1
                timers.active = False
                if step_end:
                    timers.mark(now)

        wrapper.__wrapped__ = original
        setattr(owner, name, wrapper)

    def mark(self, now=None):
        """A step ends (now)."""
        self.ends.append(self.clock() if now is None else now)
        self.snapshots.append(dict(self.spent))
        self.counted.append(dict(self.calls))

    def per_step(self, warm):
        """Milliseconds a step in each category over the steps after the first ``warm``."""
        if len(self.ends) <= warm + 1:
            raise SystemExit(f"error: {len(self.ends)} optimizer steps timed; need more than --warm {warm} + 1")
        n = len(self.ends) - 1 - warm
        first, last = self.snapshots[warm], self.snapshots[-1]
        out = {c: (last[c] - first[c]) * 1e3 / n for c in CATEGORIES[:-1]}
        total = (self.ends[-1] - self.ends[warm]) * 1e3 / n
        out["other"] = total - sum(out.values())
        calls = {c: (self.counted[-1][c] - self.counted[warm][c]) / n for c in CATEGORIES[:-1]}
        return {"steps": n, "total": total, **out, "calls": calls}


def install_shared(timers):
    """The wrappers both sides share: the data loader, Accelerate's backward, the optimizer and the schedule."""
    import torch
    from accelerate import Accelerator
    from accelerate.optimizer import AcceleratedOptimizer
    from torch.utils.data.dataloader import _BaseDataLoaderIter
    timers.wrap(_BaseDataLoaderIter, "__next__", "collate")
    timers.wrap(Accelerator, "backward", "backward")
    timers.wrap(Accelerator, "clip_grad_norm_", "optimizer")
    timers.wrap(AcceleratedOptimizer, "step", "optimizer", step_end=True)
    timers.wrap(AcceleratedOptimizer, "zero_grad", "optimizer")
    timers.wrap(torch.nn.Module, "zero_grad", "optimizer")
    timers.wrap(torch.optim.lr_scheduler.LRScheduler, "step", "optimizer")
    timers.wrap(Accelerator, "reduce", "logging")


def run_ours(args, objective, data, timers):
    from tqdm import tqdm
    from common.train import objectives
    from common.train.rundir.run_folder import RunFolder
    from bench.train import minilm
    cls = objectives.get(objective)
    timers.wrap(cls, "losses", "forward")
    timers.wrap(RunFolder, "write_log", "logging")
    timers.wrap(tqdm, "update", "logging")
    timers.wrap(tqdm, "set_postfix", "logging")
    train = runpy.run_path(os.path.join(ROOT, "03_train.py"), run_name="tiny_profile")["main"]
    extra = {"mnrl": ["--query-max-length", str(args.length), "--no-normalize"],
             "mlm": ["--cache-dir", os.path.join(args.work, "mlm-cache")]}.get(objective, [])
    with tempfile.TemporaryDirectory() as out:
        train(["--objective", objective, "--data", data, "--model", minilm(), "--out", out, "--pooling", "mean",
               "--max-length", str(args.length), "--batch-size", str(args.batch), "--epochs", "100",
               "--log-every", "10", "--eval-every", "0", "--checkpoint-every", "0", "--max-steps", str(args.steps),
               *extra])


def run_theirs(args, objective, data, timers):
    from transformers import Trainer
    from transformers.trainer_callback import CallbackHandler
    from bench.train import run_theirs
    timers.wrap(Trainer, "compute_loss", "forward")
    timers.wrap(Trainer, "_get_grad_norm", "optimizer")
    timers.wrap(Trainer, "_maybe_log_save_evaluate", "logging")
    timers.wrap(CallbackHandler, "call_event", "logging")
    if objective != "mlm":  # sentence-transformers' own compute_loss, on whichever of its classes defines it
        from sentence_transformers import SentenceTransformerTrainer
        owner = next(c for c in SentenceTransformerTrainer.__mro__ if "compute_loss" in c.__dict__)
        if owner is not Trainer:
            timers.wrap(owner, "compute_loss", "forward")
    run_theirs(data, args.steps, args.batch, objective, args.length)


def run_embed(args, side, timers):
    """tiny-embed: --calls calls of the embed row's function on --docs abstracts, after one untimed; a call is a
    step. Collate is tokenising and padding (ours ``TokenStore``, theirs sentence-transformers' ``preprocess``),
    forward the model with its pooling (ours ``Encoder.embed``, theirs the ``SentenceTransformer``'s forward)."""
    from bench.shared import embed_texts, embedder
    from bench.train import minilm
    if side == "ours":
        from common.models.encoder import Encoder
        from common.models.tokens import TokenStore
        timers.wrap(TokenStore, "__init__", "collate")
        timers.wrap(TokenStore, "pad", "collate")
        timers.wrap(Encoder, "embed", "forward")
    else:
        from sentence_transformers import SentenceTransformer
        for name, category in (("preprocess", "collate"), ("forward", "forward")):
            timers.wrap(next(c for c in SentenceTransformer.__mro__ if name in c.__dict__), name, category)
    texts = embed_texts(args.work, args.docs)
    run = embedder(side, minilm(), args.length, args.batch, None, "cpu", say=lambda *a: None)
    run(texts)
    timers.mark()
    for _ in range(args.calls):
        run(texts)
        timers.mark()


def one(args, side):
    """One side in this process: its per-step table and, with --cprofile, its most expensive functions."""
    import cProfile
    import io
    import pstats
    from bench.train import ensure_data
    timers = Timers(time.process_time if args.clock == "cpu" else time.perf_counter)
    embed = args.row == "tiny-embed"
    warm, last = (0, args.calls + 1) if embed else (args.warm, args.steps)
    profiler = cProfile.Profile() if args.cprofile else None
    if profiler:  # from the end of the warm-up to the end of the last timed step
        timers.ends = _Hooked(lambda: profiler.enable() if len(timers.ends) == warm + embed else
                              profiler.disable() if len(timers.ends) == last else None)
    if embed:
        run_embed(args, side, timers)
    else:
        objective = args.row.removeprefix("tiny-")
        data = ensure_data(args.work, objective)
        install_shared(timers)
        (run_ours if side == "ours" else run_theirs)(args, objective, data, timers)
    found = timers.per_step(warm)
    import torch
    found["threads"] = torch.get_num_threads()
    if profiler:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(args.cprofile)
        found["cprofile"] = text.getvalue()
    return found


class _Hooked(list):
    """A list that calls ``hook`` after each append (the profile starts at the end of the warm-up steps)."""

    def __init__(self, hook):
        super().__init__()
        self.hook = hook

    def append(self, item):
        super().append(item)
        self.hook()


def median_side(rounds):
    """Each category's median over the rounds of one side (the step's too), the calls of the first round."""
    keys = (*CATEGORIES, "total")
    return {**{k: statistics.median(r[k] for r in rounds) for k in keys}, "steps": rounds[0]["steps"],
            "calls": rounds[0]["calls"]}


def table(args, sides, rounds):
    """The markdown lines: the sides' medians by category, and each round's steps/s and ratio."""
    unit = f"ms a call ({args.docs} texts)" if args.row == "tiny-embed" else "ms/step"
    lines = [f"| category | ours {unit} | theirs {unit} | ours − theirs |", "|---|---:|---:|---:|"]
    for key in (*CATEGORIES, "total"):
        a, b = sides["ours"][key], sides["theirs"][key]
        if a == b == 0:  # tiny-embed has no backward, optimizer or logging
            continue
        name = "**step**" if key == "total" else key
        lines.append(f"| {name} | {a:.2f} | {b:.2f} | {a - b:+.2f} |")
    ratio = sides["theirs"]["total"] / sides["ours"]["total"]
    shape = ", ".join(f"{k.replace('num_', '').replace('_', ' ')} {v}" for k, v in TINY_SHAPE.items())
    model = f"the tiny BERT ({shape})" if args.model == "tiny" else "all-MiniLM-L6-v2"
    per, rate = (args.docs, "texts/s") if args.row == "tiny-embed" else (1, "steps/s")
    each = ", ".join(f"{per * 1e3 / o['total']:.1f} / {per * 1e3 / t['total']:.1f} ({t['total'] / o['total']:.2f}×)"
                     for o, t in zip(rounds["ours"], rounds["theirs"]))
    clock = "CPU" if args.clock == "cpu" else "wall"
    timed = (f"{args.calls} calls on {args.docs} abstracts timed after 1" if args.row == "tiny-embed" else
             f"{sides['ours']['steps']} steps timed after {args.warm}")
    return [f"{args.row}: {model}, batch {args.batch} × {args.length} tokens, {clock} time, torch threads "
            f"{rounds['ours'][0]['threads']}, {timed}, medians of {len(rounds['ours'])} interleaved rounds: ours "
            f"{per * 1e3 / sides['ours']['total']:.1f} {rate}, theirs {per * 1e3 / sides['theirs']['total']:.1f} "
            f"(**{ratio:.2f}×**); rounds ours / theirs {rate}: {each}", "", *lines]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--row", choices=("tiny-mlm", "tiny-triplet", "tiny-mnrl", "tiny-embed"),
                        default="tiny-mlm")
    parser.add_argument("--batch", type=int, default=4, help="bench/all.py's --tiny-batch")
    parser.add_argument("--length", type=int, default=16, help="bench/all.py's --tiny-length")
    parser.add_argument("--steps", type=int, default=120, help="training rows: optimizer steps a side")
    parser.add_argument("--calls", type=int, default=5, help="tiny-embed: timed calls on the --docs abstracts")
    parser.add_argument("--docs", type=int, default=300, help="tiny-embed: the embed row's abstracts")
    parser.add_argument("--warm", type=int, default=20, help="steps left out of the figures")
    parser.add_argument("--rounds", type=int, default=3,
                        help="fresh processes of each side, ours first in odd rounds and theirs in even ones; the "
                             "table gives the medians")
    parser.add_argument("--cprofile", type=int, default=0, metavar="N",
                        help="also print each side's N functions of most own time in the first round (0: none)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall time, or the process's CPU time: with OMP_NUM_THREADS=1, the work of a step without "
                             "the waits other processes on the cores cause (a busy machine's measure)")
    parser.add_argument("--model", choices=("tiny", "minilm"), default="tiny",
                        help="the tiny BERT, or all-MiniLM-L6-v2 as published (the real rows' model)")
    parser.add_argument("--work", default=os.path.join(ROOT, "bench", "out", "train"))
    parser.add_argument("--one", choices=("ours", "theirs"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args, args.one)))
        return
    env = dict(os.environ, **OFFLINE)
    if args.model == "tiny":
        env["BENCH_MODEL"] = build_model(args.work, "tiny")
    rounds, loads = {"ours": [], "theirs": []}, []
    for r in range(args.rounds):
        loads.append(os.getloadavg()[0])
        for side in ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours"):
            argv = sys.argv[1:] + ["--one", side] + ([] if r == 0 else ["--cprofile", "0"])
            out = subprocess.run([sys.executable, os.path.abspath(__file__), *argv], cwd=ROOT, env=env,
                                 capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"error: {side} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
            rounds[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
    loads.append(os.getloadavg()[0])
    sides = {side: median_side(found) for side, found in rounds.items()}
    print("\n".join(table(args, sides, rounds)))
    print(f"\nload average at each round's start and at the end: {', '.join(f'{x:.2f}' for x in loads)}; timed "
          "calls a step: " + "; ".join(f"{side} " + ", ".join(f"{k} {v:g}" for k, v in found["calls"].items())
                                      for side, found in sides.items()))
    for side, found in rounds.items():
        if "cprofile" in found[0]:
            print(f"\n{side}: cProfile over the timed steps of the first round\n{found[0]['cprofile']}")


if __name__ == "__main__":
    main()
