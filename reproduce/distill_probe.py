"""Where distillation's retrieval comes from on documents never distilled on (reproduce/distill.sh): the structural
teacher's own vectors at each step between the published model and the target the student imitates, and how near
each student comes to that target on the evaluation documents.

    python reproduce/distill_probe.py --data work/foldoc-data --teach work/teach \\
        --eval work/distill-foldoc-eval --raw work/distill-foldoc-raw --student longformer only-mse mse-contextual

Rows, each scored by 05's cross-reference MAP (common/eval/wikispecter.crossref: L2 distance, as the thesis's
students are compared):
- ``sbert``: the teacher as sentence-transformers publishes it (mean pooling, normalised): EVAL/sbert.
- ``teacher, not normalised``: mean pooling without the Normalize module, at the teacher's length: RAW/sbert-raw,
  what 04 teachers embeds the training documents with.
- ``teacher → D axes``: those vectors projected onto the principal axes 04 teachers fitted on the distillation
  corpus (refitted here from TEACH/sbert_full.npy with the same seed and width): the student's MSE target.
- the same, L2-normalised: what the projection alone costs once the norm is taken out again.
- the target cut to its top ``TOP`` axes: how much of the ranking the axes of most variance carry (MSE weighs each
  axis by its variance, so a student learns those first).
- each student: its MAP, its MAP on L2-normalised vectors, its mean cosine to the projected teacher on the
  evaluation documents (how much of the target it learned to reproduce off its training corpus) and to the target
  less its mean over the distillation corpus (the max-margin losses with γ = 1 reward only that difference: with
  MSE the quadratic terms cancel, common/distill/structural.py), and R² against the target on the top ``TOP`` axes and
  on the rest (1: reproduced; 0: no better than the target's mean).
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import cli, io  # noqa: E402
from common.data.docs_jsonl import Documents  # noqa: E402
from common.distill import teachers  # noqa: E402
from common.eval.wikispecter import crossref, read_qrels  # noqa: E402
from common.io import InputError, field  # noqa: E402
from common.vectors import load_npy, read_rows  # noqa: E402


TOP = 16


def unit(x):
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def mean_cosine(a, b):
    return float((unit(a) * unit(b)).sum(axis=1).mean())


def r2(x, target):
    """1 - residual / total sum of squares of ``target``'s rows about their mean, over all its dimensions."""
    from sklearn.metrics import r2_score
    return float(r2_score(target, x, multioutput="variance_weighted"))


def teacher_axes(teach):
    """The axes 04 teachers projected the structural teacher onto, refitted from its full-width vectors with the
    seed and width its manifest records (the same PCA call, so the same axes), the share of variance they keep, and
    the projected vectors' mean over the distillation corpus."""
    path = os.path.join(teach, "manifest.json")
    manifest = io.read_manifest(teach)
    if not manifest:
        raise InputError(f"{path}: no such file; give 04_distill.py teachers' folder as --teach")
    dim = field(manifest, path, "counts", kind=dict).get("teacher_dim")
    if dim is None:
        return None, None, None
    full_path = os.path.join(teach, f"{teachers.STRUCTURAL}_full.npy")
    full = load_npy(full_path)
    if (not isinstance(dim, int) or isinstance(dim, bool) or full.ndim != 2 or not 1 <= dim <= min(full.shape)
            or not np.issubdtype(full.dtype, np.floating)):
        raise InputError(f"{full_path}: {full.dtype} {list(full.shape)} cannot be projected to the manifest's "
                         f"teacher_dim {dim!r}")
    axes, kept = teachers.principal_axes(full, dim, field(manifest, path, "seed", kind=int))
    return axes, kept, np.asarray(full, dtype=np.float64).mean(axis=0) @ axes.T.astype(np.float64)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="the evaluation data directory (crossref.qrels, docs.jsonl)")
    parser.add_argument("--teach", required=True, help="04 teachers' folder of the distillation")
    parser.add_argument("--eval", required=True, help="05's EVAL folder with the models sbert and the students")
    parser.add_argument("--raw", required=True, help="05's EVAL folder with sbert-raw: the teacher not normalised")
    parser.add_argument("--student", nargs="+", action="extend", default=[], help="student model names in EVAL")
    args = parser.parse_args(argv)
    docs = Documents(args.data)
    qrels = read_qrels(os.path.join(args.data, "crossref.qrels"), docs.index)

    def score(x):
        return 100 * crossref(np.asarray(x, dtype=np.float64), docs.index, qrels)[0]["map"]

    sbert = read_rows(args.eval, "sbert", docs.ids)
    raw = read_rows(args.raw, "sbert-raw", docs.ids)
    axes, kept, centre = teacher_axes(args.teach)
    target = np.asarray(raw, dtype=np.float64) @ axes.T if axes is not None else np.asarray(raw, dtype=np.float64)
    rows = [("sbert (as published: mean, normalised)", score(sbert), None, "", "", "", ""),
            ("teacher, not normalised (04 teachers' vectors)", score(raw), None, "", "", "", "")]
    if axes is not None:
        rows += [(f"teacher → {axes.shape[0]} axes ({kept:.1%} of the variance on the distillation corpus): the "
                  "student's target", score(target), score(unit(target)), "", "", "", ""),
                 (f"the target's top {TOP} axes alone", score(target[:, :TOP]), score(unit(target[:, :TOP])), "", "",
                  "", "")]
    for name in args.student:
        x = read_rows(args.eval, name, docs.ids)
        same = x.shape[1] == target.shape[1]
        rows.append((name, score(x), score(unit(x)), f"{mean_cosine(x, target):.3f}" if same else "–",
                     f"{mean_cosine(x, target - centre):.3f}" if same and centre is not None else "–",
                     f"{r2(x[:, :TOP], target[:, :TOP]):.3f}" if same else "–",
                     f"{r2(x[:, TOP:], target[:, TOP:]):.3f}" if same else "–"))
    print(f"| vectors | crossref MAP | MAP, L2-normalised | cosine to the student's target | to the centred target | "
          f"R², top {TOP} axes | R², the rest |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, m, m_unit, cos, centred, top, rest in rows:
        m_unit = "" if m_unit is None else f"{m_unit:.2f}"
        print(f"| {label} | {m:.2f} | {m_unit} | {cos} | {centred} | {top} | {rest} |")


if __name__ == "__main__":
    cli.run(lambda: main(sys.argv[1:]))
