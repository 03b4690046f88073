"""Peak memory of one node's training processes on a generated corpus of 1,000,000 documents: 03_train.py's triplet
objective (or --objective mlm: the masked LM over every document), a few steps of a tiny model, on 1 and on 4 CPU
processes (torchrun), each side in a fresh --out.

    nice python bench/node_memory.py                                   # this checkout, 1 and 4 processes
    nice python bench/node_memory.py --objective mlm                   # the masked LM's
    git archive COMMIT | tar -x -C /tmp/before
    nice python bench/node_memory.py --code /tmp/before --label before # another checkout on the same corpus

Memory is the peak, sampled every --poll seconds, of the training processes' proportional set size summed
(/proc/PID/smaps_rollup's Pss: a page that N processes map counts 1/N in each, so pages they share count once in
the sum; the torchrun launcher is left out), beside their resident sizes summed (which count a shared page once a
process). Goal (issue 63): 4 processes together at most 1.5 × one. The corpus (docs.jsonl with --docs documents of
about 60 words, and --triplets training triplets over them) and the model are built once under --work.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared import OFFLINE, ROOT, build_model  # noqa: E402

sys.path.insert(0, ROOT)
from common import cli  # noqa: E402

TRAIN = ["--max-length", "32", "--batch-size", "4", "--max-steps", "3", "--log-every", "1", "--eval-every", "0",
         "--checkpoint-every", "0"]


def corpus(work, docs, triplets):
    """WORK/data: docs.jsonl of ``docs`` documents (a title and about 60 words drawn from 5,000 made-up ones, seed 0)
    and triplets.train.jsonl of ``triplets`` (query, positive, negative) ids drawn among them; made once."""
    data = os.path.join(work, f"data-{docs}-{triplets}")
    if os.path.exists(os.path.join(data, "triplets.train.jsonl")):
        return data
    rng = np.random.default_rng(0)
    syllables = ["ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "va", "ze", "an", "en", "or", "ul"]
    words = np.array(["".join(rng.choice(syllables, size=rng.integers(2, 5))) for _ in range(5000)])
    tmp = data + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    with open(os.path.join(tmp, "docs.jsonl"), "w", encoding="utf-8") as f:
        for start in range(0, docs, 10_000):
            n = min(10_000, docs - start)
            drawn = words[rng.integers(0, len(words), size=(n, 60))]
            f.writelines(json.dumps({"id": f"doc{start + k}", "title": f"Document {start + k}",
                                     "text": " ".join(drawn[k])}) + "\n" for k in range(n))
    with open(os.path.join(tmp, "triplets.train.jsonl"), "w", encoding="utf-8") as f:
        for q, p, n in rng.integers(0, docs, size=(triplets, 3)).tolist():
            f.write(json.dumps({"query": f"doc{q}", "pos": f"doc{p}", "neg": f"doc{n}"}) + "\n")
    os.replace(tmp, data)
    return data


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pss(pid):
    """A process's proportional set size in bytes (0 once it has ended)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
    except (OSError, StopIteration, ValueError):
        return 0


def measured(cmd, processes, poll, env):
    """``(seconds, peak PSS sum, peak RSS sum, exit status, stderr's tail)`` of the training processes of ``cmd``:
    the command itself for one process, the launcher's children for several."""
    start = time.perf_counter()
    # stderr to a file: a pipe nobody reads until the end fills with progress bars and stops the run writing them
    stderr = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
    root = psutil.Process(proc.pid)
    peak_pss = peak_rss = 0
    while proc.poll() is None:
        try:
            tree = [root] if processes == 1 else root.children(recursive=True)
            peak_pss = max(peak_pss, sum(pss(p.pid) for p in tree))
            peak_rss = max(peak_rss, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(poll)
    seconds = time.perf_counter() - start
    with stderr:
        stderr.seek(max(0, stderr.seek(0, os.SEEK_END) - 3000))
        return seconds, peak_pss, peak_rss, proc.returncode, stderr.read().decode(errors="replace")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default=os.path.join(ROOT, "bench", "out", "node_memory"))
    parser.add_argument("--code", default=ROOT, help="the checkout whose 03_train.py runs (default: this one)")
    parser.add_argument("--label", default="this checkout", help="what the table calls --code")
    parser.add_argument("--docs", type=cli.number(int, cli.COUNT), default=1_000_000)
    parser.add_argument("--triplets", type=cli.number(int, cli.COUNT), default=20_000)
    parser.add_argument("--processes", type=cli.number(int, cli.COUNT), nargs="+", default=[1, 4],
                        help="the first is the one the others are compared with")
    parser.add_argument("--objective", choices=("triplet", "mlm"), default="triplet")
    parser.add_argument("--poll", type=cli.number(float, cli.POSITIVE), default=0.2, help="seconds between samples")
    args = parser.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    data, model = corpus(args.work, args.docs, args.triplets), build_model(args.work, "tiny")
    env = dict(os.environ, **OFFLINE, OMP_NUM_THREADS="1", PYTHONPATH=args.code)
    print(f"03_train.py --objective {args.objective}, {args.docs:,} documents")
    print("| code | processes | peak PSS, summed | peak RSS, summed | × one process (PSS) | wall |")
    print("|---|---:|---:|---:|---:|---:|")
    one = None
    for n in args.processes:
        out = os.path.join(args.work, f"run-{n}")
        shutil.rmtree(out, ignore_errors=True)
        script = [os.path.join(args.code, "03_train.py"), "--data", data, "--model", model, "--out", out,
                  "--objective", args.objective, *TRAIN]
        launch = [sys.executable] if n == 1 else [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node",
                                                   str(n), "--master_port", str(free_port())]
        seconds, peak_pss, peak_rss, status, tail = measured(launch + script, n, args.poll, env)
        if status:
            sys.exit(f"error: {n} processes failed (exit {status}):\n{tail}")
        one = one or peak_pss
        print(f"| {args.label} | {n} | {peak_pss / 2**20:,.0f} MiB | {peak_rss / 2**20:,.0f} MiB | "
              f"{peak_pss / one:.2f} | {seconds:.0f} s |", flush=True)


if __name__ == "__main__":
    main()
