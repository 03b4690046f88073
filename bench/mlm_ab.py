"""CPU seconds a masked-LM training step takes with this checkout's objective and with another checkout's, in one
process, interleaved: whether a change to ``common/train/objectives/mlm.py`` slowed the step.

    git archive COMMIT | tar -x -C /tmp/before          # the earlier objective
    OMP_NUM_THREADS=1 python bench/mlm_ab.py --before /tmp/before
    OMP_NUM_THREADS=1 python bench/mlm_ab.py --before /tmp/before --new-first

A step is what 03's loop runs: ``collate_train`` of 8 blocks of 256 tokens of the arXiv sample's abstracts (as
``bench/train.py`` builds them), forward, the mean masked-LM loss and its backward pass (as 03's loop runs them) and a fused AdamW step,
all-MiniLM-L6-v2 with a fresh masked-LM head, the CPU layer 03 installs (``cpu.install``). Both objectives are built in this process
(the other checkout's ``mlm.py`` on this checkout's ``common/``), and each round times two steps of each, on the same
blocks, the order alternating. The time is the process's CPU time on one thread (``time.process_time``), which other
work on a shared machine disturbs far less than the wall clock; the order in which the two models are built may
matter (memory layout), so run it both ways (``--new-first``).
"""

import argparse
import importlib.util
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def objective_module(path, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(path, "common", "train", "objectives", "mlm.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the other checkout (its common/train/objectives/mlm.py)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--new-first", action="store_true", help="build this checkout's model first")
    parser.add_argument("--work", default=os.path.join(ROOT, "bench", "out", "train"))
    args = parser.parse_args()
    import torch
    from bench.train import ensure_arxiv, minilm
    from common.models import cpu
    spec = importlib.util.spec_from_file_location("train_script", os.path.join(ROOT, "03_train.py"))
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    data = ensure_arxiv(args.work)
    argv = ["--objective", "mlm", "--data", data, "--model", minilm(), "--out", os.path.join(args.work, "ab"),
            "--max-length", "256", "--batch-size", "8", "--cache-dir", os.path.join(args.work, "mlm-cache")]
    settings = script.parse_args(argv)
    modules = {"before": objective_module(args.before, "mlm_before"), "this": objective_module(ROOT, "mlm_this")}
    sides = {}
    for name in ("this", "before") if args.new_first else ("before", "this"):
        torch.manual_seed(0)
        objective = modules[name].MLMObjective(settings, None)
        model = cpu.install(objective.build()).train()
        objective.load_data()
        objective.set_epoch(0)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-5, fused=True)
        sides[name] = (objective, model, optimizer)
    rows = sides["this"][0].train_rows

    def step(name, i):
        objective, model, optimizer = sides[name]
        found = objective.losses(model, objective.collate(rows[8 * i:8 * i + 8]))
        # a checkout from before losses returned (losses, log values) returns the loss alone
        (found[0] if isinstance(found, tuple) else found).mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for name in sides:  # untimed
        for i in range(2):
            step(name, i)
    times = {"before": [], "this": []}
    for r in range(args.rounds):
        for name in ("before", "this") if r % 2 == 0 else ("this", "before"):
            start = time.process_time()
            for i in range(2):
                step(name, 2 + 2 * r + i)
            times[name].append((time.process_time() - start) / 2)
    ratios = [b / a for a, b in zip(times["before"], times["this"])]
    print(f"CPU seconds a step, torch threads {torch.get_num_threads()}, {'this' if args.new_first else 'before'} "
          "built first:")
    for name, values in times.items():
        print(f"  {name:6s} {' '.join(f'{t:.3f}' for t in values)}  (median {statistics.median(values):.3f})")
    print(f"  this / before, median of the rounds' ratios: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
