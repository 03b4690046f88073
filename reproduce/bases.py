"""The pretrained bases side by side: each phase's last validation, read from its run folder (log.jsonl and
manifest.json), as a Markdown table.

    python reproduce/bases.py mlm-only=work/bert-mini-128,work/bert-mini \
        mlm+nsp=work/bert-mini-nsp-128,work/bert-mini-nsp

Each ``NAME=RUN,RUN,...`` is one base and its runs in the order they trained. The masked-token accuracy is the
share of the masked validation tokens whose most likely prediction is the original, on the run's own validation
examples: 03's blocks for a masked-LM-only run, segment pairs for an ``--nsp`` run, both cut from the same held-out
documents where the runs share the data and seed. A base trained without next-sentence prediction has no
next-sentence head, so it has no NSP accuracy to report.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import cli, io  # noqa: E402
from common.io import InputError  # noqa: E402

NUMBERS = ("step", "val_accuracy", "val_loss")
NSP_NUMBERS = ("val_nsp_accuracy", "val_nsp_loss")


def last_validation(run):
    """The last validation record of a run's log.jsonl, its figures checked to be numbers."""
    path = os.path.join(run, "log.jsonl")
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file (has {run} trained?)")
    found = [(lineno, r) for lineno, r in io.read_jsonl(path) if "val_loss" in r]
    if not found:
        raise InputError(f"{path}: no validation record")
    lineno, record = found[-1]
    for key in NUMBERS + (NSP_NUMBERS if "val_nsp_accuracy" in record else ()):
        if not isinstance(record.get(key), (int, float)) or isinstance(record.get(key), bool):
            raise InputError(f"{path}:{lineno}: {key} is not a number")
    return record


def validated(run):
    """How many examples a run validated on (its manifest's count), or None without a manifest."""
    count = (io.read_manifest(run).get("counts") or {}).get("val_examples")
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def table(bases):
    """``bases``: (name, [run folder, ...]) pairs. One row per run."""
    lines = ["| base | run | step | validated on | masked-token accuracy | masked-LM loss | NSP accuracy | NSP loss |",
             "|---|---|---:|---|---:|---:|---:|---:|"]
    for name, runs in bases:
        for run in runs:
            record = last_validation(run)
            pairs = "val_nsp_accuracy" in record
            count = validated(run)
            examples = "segment pairs" if pairs else "blocks"
            lines.append(
                f"| {name} | {os.path.basename(os.path.normpath(run))} | {record['step']:,} | "
                f"{f'{count:,} ' if count is not None else ''}{examples} | {100 * record['val_accuracy']:.2f} % | "
                f"{record['val_loss']:.3f} | "
                + (f"{100 * record['val_nsp_accuracy']:.2f} % | {record['val_nsp_loss']:.3f} |" if pairs else
                   "– (no next-sentence head) | – |"))
    return "\n".join(lines)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bases", nargs="+", metavar="NAME=RUN,RUN", help="a base and its run folders, in training order")
    args = p.parse_args(argv)
    bases = []
    for item in args.bases:
        name, _, runs = item.partition("=")
        if not name or not runs:
            p.error(f"{item!r}: expected NAME=RUN[,RUN...]")
        bases.append((name, runs.split(",")))
    print(table(bases))


if __name__ == "__main__":
    cli.run(lambda: main(sys.argv[1:]))
