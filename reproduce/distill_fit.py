"""Whether a distilled student learns its structural teacher: the mean cosine between the student's vector and its
target (the teacher's vector that ``04_distill.py train`` fits it to) on the documents it was trained on and on
held-out documents of the same corpus, after every epoch, as a table and a figure.

    python reproduce/distill_fit.py --train work/fit/train-data --teachers work/fit/teach \\
        --heldout work/fit/heldout-data --heldout-teachers work/fit/teach-heldout \\
        --run plain-mse=work/fit/plain-mse --run only-mse=work/fit/only-mse --max-length 256 --figure work/fit/fit.png

Each ``--run NAME=RUN`` is a ``04_distill.py train`` run folder trained on ``--train`` from ``--teachers`` with
``--save-epochs``: its start model (step 0, the ``--model`` its manifest names) and each ``RUN/epoch_K`` are
embedded with their own pooling (the student's sentence-transformers config) at ``--max-length``. On the training
documents the target is ``TEACHERS/sbert.npy``, what the student was fitted to. On the held-out documents it is the
structural teacher's full-width vectors of those documents (``04 teachers`` run on ``--heldout``:
``HELDOUT_TEACHERS/sbert_full.npy``) projected onto the axes ``--teachers`` projected onto (refitted from
``TEACHERS/sbert_full.npy`` with the seed and width its manifest records, the same PCA call), so that both targets
lie in the same space. Where the training documents' cosine stays under ``--goal``, the last three epochs' cosines
are extrapolated linearly in log(steps) to where they would reach it: a projection, not a measurement, and under
04's decaying learning rate (linear or cosine to 0 over the run) the last epochs flatten with the schedule, so it
says little about a longer run.
"""

import argparse
import glob
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import cli, io  # noqa: E402
from common.data.docs_jsonl import Documents  # noqa: E402
from common.distill import teachers  # noqa: E402
from common.io import InputError, field  # noqa: E402
from common.models.inference import embed  # noqa: E402
from common.models.loading import load_encoder  # noqa: E402
from common.models.tokens import TokenStore  # noqa: E402
from common.vectors import load_npy, read_rows  # noqa: E402


def mean_cosine(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return float((a * b).sum(axis=1).mean())


def heldout_target(teach, heldout_teach, ids):
    """The held-out documents' full-width teacher vectors projected onto ``teach``'s axes (``[N, dim]``; the full
    width where ``teach`` kept it)."""
    path = os.path.join(teach, "manifest.json")
    manifest = io.read_manifest(teach)
    if not manifest:
        raise InputError(f"{path}: no such file; give 04_distill.py teachers' folder as --teachers")
    full = np.asarray(read_rows(heldout_teach, f"{teachers.STRUCTURAL}_full", ids), dtype=np.float64)
    dim = field(manifest, path, "counts", kind=dict).get("teacher_dim")
    if dim is None:
        return full
    train_full = load_npy(os.path.join(teach, f"{teachers.STRUCTURAL}_full.npy"))
    if (not isinstance(dim, int) or isinstance(dim, bool) or train_full.ndim != 2
            or full.shape[1] != train_full.shape[1]):
        raise InputError(f"{heldout_teach}: its teacher's width {full.shape[1]} is not {teach}'s, or {path}'s "
                         f"teacher_dim {dim!r} is not a width")
    axes, _ = teachers.principal_axes(train_full, dim, field(manifest, path, "seed", kind=int))
    return full @ axes.T.astype(np.float64)


def checkpoints(run):
    """(step, model folder) of a run's start model and of each epoch it saved, in order."""
    manifest = io.read_manifest(run)
    path = os.path.join(run, "manifest.json")
    if not manifest:
        raise InputError(f"{path}: no such file; give a finished 04_distill.py train run")
    args = field(manifest, path, "args", kind=dict)
    steps = field(manifest, path, "counts", kind=dict).get("steps")
    epochs = args.get("epochs")
    if not isinstance(steps, int) or not isinstance(epochs, int) or epochs < 1:
        raise InputError(f"{path}: counts.steps and args.epochs must be integers")
    found = sorted(glob.glob(os.path.join(run, "epoch_*")), key=lambda p: int(re.sub(r"\D", "", os.path.basename(p))))
    if not found:
        raise InputError(f"{run}: no epoch_K folders; train it with --save-epochs")
    start = args.get("model")
    if not isinstance(start, str):
        raise InputError(f"{path}: args.model is not a model folder")
    if not os.path.isabs(start) and not os.path.exists(start):
        start = os.path.join(os.path.dirname(os.path.abspath(run)), "..", start)
    per_epoch = steps / epochs
    return [(0, start)] + [(round(per_epoch * int(re.sub(r"\D", "", os.path.basename(p)))), p) for p in found]


def fit(model, parts, max_length, batch_size):
    """The model's mean cosine to the target on each part: {part: cosine}."""
    encoder, tokenizer, _ = load_encoder(model, max_length=max_length, say=lambda *a: None)
    found = {}
    for name, (docs, target) in parts.items():
        store = TokenStore(tokenizer, docs.inputs(tokenizer.sep_token or ""), max_length)
        found[name] = mean_cosine(embed(encoder, store, batch_size=batch_size), target)
    return found


def projection(rows, goal):
    """Steps at which the training cosine would reach ``goal``, extrapolated linearly in log(steps) from the last
    three epochs; None where the curve does not rise."""
    last = [(s, c) for s, c in rows if s > 0][-3:]
    if len(last) < 2:
        return None
    slope, intercept = np.polyfit(np.log10([s for s, _ in last]), [c for _, c in last], 1)
    if slope <= 0:
        return None
    return float(10 ** ((goal - intercept) / slope))


def figure(curves, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for name, rows in curves.items():
        steps = [r[0] for r in rows]
        line, = ax.plot(steps, [r[1]["train"] for r in rows], marker="o", label=f"{name}, training documents")
        ax.plot(steps, [r[1]["heldout"] for r in rows], marker="o", linestyle="--", color=line.get_color(),
                label=f"{name}, held-out documents")
    ax.set_xlabel("optimizer steps")
    ax.set_ylabel("mean cosine to the target")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=120)
    os.replace(tmp, path)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", required=True, help="the data directory the runs were trained on")
    p.add_argument("--teachers", required=True, help="04_distill.py teachers' folder the runs were trained from")
    p.add_argument("--heldout", required=True, help="a data directory of other documents of the same corpus")
    p.add_argument("--heldout-teachers", required=True, help="04_distill.py teachers' folder of --heldout")
    p.add_argument("--run", action="extend", nargs="+", required=True, metavar="NAME=RUN")
    p.add_argument("--max-length", type=cli.number(int, cli.LENGTH), default=256)
    p.add_argument("--batch-size", type=cli.number(int, cli.COUNT), default=32)
    p.add_argument("--goal", type=cli.number(float, cli.OPEN_SHARE), default=0.9)
    p.add_argument("--figure", help="where to draw the curves (PNG)")
    args = p.parse_args(argv)
    runs = cli.named(args.run, "--run", "a run folder")
    train, heldout = Documents(args.train), Documents(args.heldout)
    parts = {"train": (train, teachers.read_vectors(args.teachers, teachers.STRUCTURAL, train.ids)),
             "heldout": (heldout, heldout_target(args.teachers, args.heldout_teachers, heldout.ids))}
    overlap = set(parts["train"][0].ids) & set(parts["heldout"][0].ids)
    if overlap:
        raise InputError(f"--heldout {args.heldout}: {len(overlap)} of its documents are in --train")
    print(f"| run | epoch | steps | cosine, {len(parts['train'][0].ids):,} training documents | "
          f"cosine, {len(parts['heldout'][0].ids):,} held-out documents |")
    print("|---|---:|---:|---:|---:|")
    curves = {}
    for name, run in runs.items():
        rows = []
        for epoch, (step, model) in enumerate(checkpoints(run)):
            found = fit(model, parts, args.max_length, args.batch_size)
            rows.append((step, found))
            print(f"| {name} | {epoch} | {step:,} | {found['train']:.3f} | {found['heldout']:.3f} |", flush=True)
        curves[name] = rows
    for name, rows in curves.items():
        best = max(r[1]["train"] for r in rows)
        if best >= args.goal:
            step = next(s for s, f in rows if f["train"] >= args.goal)
            print(f"{name}: the training documents' cosine reaches {args.goal} at step {step:,}")
        else:
            at = projection([(s, f["train"]) for s, f in rows], args.goal)
            print(f"{name}: the training documents' cosine reaches {best:.3f} at most; "
                  + (f"extrapolated linearly in log(steps), {args.goal} at about {at:,.0f} steps (the run's "
                     "learning rate decays to 0 over its steps, so its last epochs flatten with the schedule: this "
                     "says little about a longer run)" if at else "the last epochs do not rise"))
    if args.figure:
        figure(curves, args.figure)


if __name__ == "__main__":
    cli.run(lambda: main(sys.argv[1:]))
