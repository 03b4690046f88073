"""Wall time and peak memory of a command's whole process tree (the benchmarks' stopwatch)."""

import subprocess
import time

import psutil


def run_measured(cmd, cwd=None, poll=0.05):
    """``(seconds, peak RSS in bytes summed over the process tree, exit status, stderr)`` of a command."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd)
    root = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            tree = [root] + root.children(recursive=True)
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(poll)
    return time.perf_counter() - start, peak, proc.returncode, proc.stderr.read().decode(errors="replace")
