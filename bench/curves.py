"""Training-loss curves of runs side by side, one panel per group of runs, from each run's log.jsonl: for instance the
same training in float32 and in bfloat16.

    python bench/curves.py --out docs/figures/bf16-search.png \
        --panel "masked LM" float32=work/search-mlm bf16=work/bf16/search-mlm \
        --panel "MNRL from the adapted model" float32=work/search-mlm-mnrl bf16=work/bf16/search-mlm-mnrl

Each panel plots every logged training loss (thin) and its moving mean over --smooth log lines (thick) against the
step, and, on a second axis, the first validation metric of --metric that the panel's first run logged. Runs are
told apart by colour and line style (solid, dashed, dotted), so that curves lying on each other stay visible.
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from common import io  # noqa: E402
from common.outdir import folders  # noqa: E402


def read_log(run):
    """A run's log.jsonl as the training loop reads it (``run_log.read_log``), every value a number (one line naming
    the file otherwise)."""
    from common.train.rundir.run_log import read_log
    path = os.path.join(run, "log.jsonl")
    records = read_log(path)
    for record in records:
        for key in record:
            io.field(record, path, key, kind=(int, float))
    return records


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--panel", nargs="+", action="append", required=True, metavar="TITLE NAME=RUN",
                        help="a panel's title, then its runs as NAME=RUN_DIR (repeatable)")
    parser.add_argument("--metric", default="val_ndcg@10,val_loss",
                        help="validation metrics, comma-separated: the first one a panel's first run logged goes on "
                             "the second axis")
    parser.add_argument("--smooth", type=int, default=10, help="log lines in the moving mean")
    parser.add_argument("--out", required=True, help="PNG to write")
    args = parser.parse_args()
    if args.smooth < 1:
        parser.error("--smooth: at least 1 log line")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    fig, axes = plt.subplots(1, len(args.panel), figsize=(5.5 * len(args.panel), 4), squeeze=False)
    for ax, (title, *runs) in zip(axes[0], args.panel):
        metric_ax = metric = None
        for i, spec in enumerate(runs):
            name, _, run = spec.partition("=")
            if not run:
                parser.error(f"--panel {title!r}: {spec!r} is not NAME=RUN_DIR")
            log = read_log(run)
            steps = np.array([r["step"] for r in log if "loss" in r])
            loss = np.array([r["loss"] for r in log if "loss" in r])
            if not len(loss):
                parser.error(f"{run}/log.jsonl: no training loss logged")
            color, style = f"C{i}", ("-", "--", ":")[i % 3]
            ax.plot(steps, loss, color=color, alpha=0.2, linewidth=0.8)
            k = min(args.smooth, len(loss))
            mean = np.convolve(loss, np.ones(k) / k, mode="valid")
            ax.plot(steps[k - 1:], mean, color=color, linestyle=style, linewidth=max(2.5 - 0.8 * i, 0.8),
                    label=f"{name} training loss")
            # one metric a panel: the first of --metric that its first run logged
            metric = metric or next((m for m in args.metric.split(",") if any(m in r for r in log)), None)
            if metric and any(metric in r for r in log):
                metric_ax = metric_ax or ax.twinx()
                metric_ax.plot(*zip(*[(r["step"], r[metric]) for r in log if metric in r]), color=color,
                               linestyle=style, marker="os^"[i % 3], markerfacecolor="none", label=f"{name} {metric}")
                metric_ax.set_ylabel(metric)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel("training loss")
        handles, labels = ax.get_legend_handles_labels()
        if metric_ax is not None:
            more = metric_ax.get_legend_handles_labels()
            handles, labels = handles + more[0], labels + more[1]
        ax.legend(handles, labels, fontsize=8)
    fig.tight_layout()
    with folders.writing(*os.path.split(os.path.abspath(args.out))) as staged:
        fig.savefig(staged, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    from common import cli  # a missing or damaged input is one line, as in the numbered scripts
    cli.run(main)
