"""Run every fuzz target one after another (``make fuzz``) and print a table: inputs run, seconds, the coverage
libFuzzer reached (``cov``: code edges, ``ft``: features), the corpus it kept and the process's peak resident
memory. Stops at the first target that
finds a defect (its input is in ``fuzz/out/TARGET/``).

    python fuzz/all.py [--runs 100000] [TARGET ...]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STATS = re.compile(r"#(\d+)\s+DONE\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\S+) .*rss: (\d+)Mb")


def main():
    sys.path.insert(0, HERE)
    from targets import TARGETS
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("targets", nargs="*", default=list(TARGETS), help="targets to run (default: all)")
    p.add_argument("--runs", type=int, default=100_000, help="inputs per target")
    args = p.parse_args()
    print("| target | inputs | seconds | inputs/s | cov | ft | corpus | peak RSS |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    for name in args.targets:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "run.py"), name, f"-runs={args.runs}"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _, stderr = proc.communicate()
        seconds = time.perf_counter() - started
        # its work folder (run.py's), which libFuzzer's exit leaves behind
        shutil.rmtree(os.path.join("/dev/shm", f"docembed-fuzz-{proc.pid}"), ignore_errors=True)
        found = STATS.findall(stderr)
        if proc.returncode or not found:
            sys.exit(f"{name}: exit status {proc.returncode}\n{stderr[-3000:]}")
        runs, cov, ft, corpus, size, rss = found[-1]
        print(f"| {name} | {int(runs):,} | {seconds:,.0f} | {int(runs) / seconds:,.0f} | {cov} | {ft} | "
              f"{corpus} ({size}) | {rss} MB |", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from common import cli  # a missing or damaged input is one line, as in the numbered scripts
    cli.run(main)
