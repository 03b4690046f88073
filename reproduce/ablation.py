"""The topic-F1 ablation's table (reproduce/wikispecter_ablation.sh): per row and epoch, the mean ± sample standard
deviation over seeds of cross-reference MAP, topic macro-F1 and accuracy, how often the LinearSVC's C sat at the
grid's end, liblinear did not converge or the next best C scored within one training document, and the geometry
of the topic documents' vectors (common/eval/geometry.py; ``moved`` against the base embedded with the same
pooling).

    python reproduce/ablation.py --data work/ablation/data-hard2 --base work/ablation/base --out work/ablation \\
        --rows default hard0

Reads OUT/<row>/seed_<S>/eval (05's metrics.json and vectors: models ``epoch_<E>``, and ``epoch_<E>-l2`` for the
default row) and BASE (models ``base-cls``, ``base-mean``).

Where the seeds' evaluations compared each epoch with the row's base (05 ``--compare epoch_<E>=base-<pooling>``, as
reproduce/wikispecter_ablation.sh runs it), a table of those paired differences: per row and epoch, the mean change
over seeds and each seed's 95 % interval, and how many seeds' intervals lie wholly above or below zero.

With ``--sensitivity``, a further table, for the bases and each row's last epoch: the same vectors' topic F1 under
the protocol and under one change of the classifier each (L2-normalised or standardised features) and over
``RESPLITS`` seeded stratified re-splits of the same topic documents (mean, and the spread over splits), so that an
F1 change can be told from the protocol's own noise.
"""

import argparse
import glob
import os
import re
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import cli, io  # noqa: E402
from common.eval.geometry import geometry  # noqa: E402
from common.eval.wikispecter import read_topics, resplits, topics  # noqa: E402
from common.io import InputError, field  # noqa: E402
from common.vectors import load_npy  # noqa: E402

SCORES = (("crossref", "map", "MAP"), ("topics.top", "f1", "topic F1"), ("topics.top", "accuracy", "accuracy"))
RESPLITS = 3
SENSITIVITY = (("f1", "protocol"), ("f1_l2", "L2-normalised"), ("f1_std", "standardised"),
               ("f1_resplit", f"{RESPLITS} re-splits, mean"), ("f1_resplit_sd", "spread over re-splits"))
SHAPES = (("norm", "norm", 2), ("anisotropy", "anisotropy", 3), ("within_between", "within/between", 3),
          ("moved", "cos to base", 3))


def read_ids(eval_dir, name):
    """{id: row} of 05's EVAL/<name>.ids.txt."""
    with io.open_input(os.path.join(eval_dir, f"{name}.ids.txt")) as f:
        return {line.rstrip("\n"): i for i, line in enumerate(f)}


def topic_documents(data_dir, eval_dir, name):
    """(ids, labels) of the top-level topic documents, training and test, as 05 read them (every id one of the
    documents EVAL/<name>.ids.txt holds)."""
    rows = read_topics(data_dir, "top", read_ids(eval_dir, name))
    pairs = rows["train"] + rows["test"]
    return [i for i, _ in pairs], [label for _, label in pairs], len(rows["train"])


def sensitivity(x, labels, n_train, seed=42, protocol=None):
    """Topic macro-F1 of the vectors ``x`` (training documents first, ``n_train`` of them) under the protocol
    (common/eval/wikispecter.topics; ``protocol``: its F1 already computed, as 05 does) and under one change each;
    the re-splits keep the protocol's test share (05's re-splits: common/eval/wikispecter.resplits)."""
    from sklearn.preprocessing import StandardScaler
    x = np.asarray(x, dtype=np.float64)
    index = {str(i): i for i in range(len(x))}
    split = {"train": [(str(i), labels[i]) for i in range(n_train)],
             "test": [(str(i), labels[i]) for i in range(n_train, len(x))]}
    unit = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    scaled = StandardScaler().fit(x[:n_train]).transform(x)
    found = {"f1": topics(x, index, split, seed)[0]["f1"] if protocol is None else protocol,
             "f1_l2": topics(unit, index, split, seed)[0]["f1"], "f1_std": topics(scaled, index, split, seed)[0]["f1"]}
    resplit = resplits(x, index, split, RESPLITS, seed)[:, 0].tolist()
    found.update(f1_resplit=statistics.mean(resplit), f1_resplit_sd=statistics.stdev(resplit))
    return found


def vectors(eval_dir, name, ids):
    """The rows of ``ids`` in 05's EVAL/<name>.npy: float vectors, one row per line of EVAL/<name>.ids.txt."""
    index, path = read_ids(eval_dir, name), os.path.join(eval_dir, f"{name}.npy")
    missing = [i for i in ids if i not in index]
    if missing:
        raise InputError(f"{os.path.join(eval_dir, name + '.ids.txt')}: lacks the topic document {missing[0]!r} "
                         f"({len(missing)} missing); evaluate the model on the same data directory")
    array = load_npy(path)
    if array.ndim != 2 or len(array) != len(index) or not np.issubdtype(array.dtype, np.floating):
        raise InputError(f"{path}: expected {len(index)} float rows, got {array.dtype} {list(array.shape)}")
    return np.asarray(array[[index[i] for i in ids]])


def read_eval(eval_dir):
    """05's metrics.json and its manifest's embedding settings, {model: ...} each."""
    manifest = io.read_manifest(eval_dir)
    return (io.read_json(os.path.join(eval_dir, "metrics.json")),
            field(manifest, os.path.join(eval_dir, "manifest.json"), "embedding", kind=dict))


def spread(values, digits=2, percent=True):
    values = [100 * v if percent else v for v in values]
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def measure(eval_dir, evaluation, name, ids, labels, base, n_train=None):
    """The scores and geometry of one model in one EVAL folder (``evaluation``: its ``read_eval``), and its
    vectors; ``base``: {pooling: base vectors}; ``n_train``: also the classifier's sensitivity (``sensitivity``)."""
    metrics_path = os.path.join(eval_dir, "metrics.json")
    metrics = field(evaluation[0], metrics_path, name, kind=dict)
    pooling = field(evaluation[1], os.path.join(eval_dir, "manifest.json"), name, "pooling", kind=str)
    x = vectors(eval_dir, name, ids)
    before = base.get(pooling)
    found = {f"{task} {metric}": field(metrics, metrics_path, task, metric, kind=(int, float))
             for task, metric, _ in SCORES}
    topic = field(metrics, metrics_path, "topics.top", kind=dict)
    found.update(C=field(topic, metrics_path, "C", kind=(int, float)),
                 edge=field(topic, metrics_path, "C_at_edge", kind=bool),
                 converged=field(topic, metrics_path, "converged", kind=bool),
                 tied=field(topic, metrics_path, "C_tied", kind=bool),
                 **geometry(x, labels, before if before is not None and before.shape == x.shape else None))
    if n_train is not None:
        found.update(sensitivity(x, labels, n_train, protocol=found["topics.top f1"]))
    return found, x


def epoch(name):
    return int(re.fullmatch(r"epoch_(\d+)(-l2)?", name).group(1))


def row_line(label, runs):
    cells = [label, str(len(runs))]
    cells += [spread([r[f"{task} {metric}"] for r in runs]) for task, metric, _ in SCORES]
    cells.append(", ".join(f"{c:g}" for c in sorted({r["C"] for r in runs})))
    cells.append(f"{sum(r['edge'] for r in runs)}/{len(runs)}")
    cells.append(f"{sum(not r['converged'] for r in runs)}/{len(runs)}")
    cells.append(f"{sum(r['tied'] for r in runs)}/{len(runs)}")
    for key, _, digits in SHAPES:
        have = [r[key] for r in runs if key in r]
        cells.append(spread(have, digits, percent=False) if have else "–")
    return "| " + " | ".join(cells) + " |"


def differences(eval_dir, evaluation):
    """{epoch model: {figure: (change, [low, high])}} of 05's ``epoch_<E> - base-<pooling>`` rows in one EVAL."""
    found = {}
    for name, tasks in evaluation[0].items():
        model = re.fullmatch(r"(epoch_\d+) - base-(cls|mean)", name)
        if not model:
            continue
        path = os.path.join(eval_dir, "metrics.json")
        found[model.group(1)] = {f"{task} {metric}": (field(tasks, path, task, metric, kind=(int, float)),
                                                      field(tasks, path, task, f"{metric}_ci", kind=list))
                                 for task, metric, _ in SCORES}
    return found


def verdict(intervals):
    """How many of the seeds' intervals lie wholly above and below zero."""
    above, below = sum(low > 0 for low, _ in intervals), sum(high < 0 for _, high in intervals)
    n = len(intervals)
    if above == n:
        return f"rises ({above}/{n} above 0)"
    if below == n:
        return f"falls ({below}/{n} below 0)"
    return f"not shown ({above}/{n} above, {below}/{n} below 0)"


def difference_line(label, runs):
    cells = [label, str(len(runs))]
    for task, metric, _ in SCORES[:2]:
        changes = [100 * r[f"{task} {metric}"][0] for r in runs]
        intervals = [[100 * v for v in r[f"{task} {metric}"][1]] for r in runs]
        cells += [f"{statistics.mean(changes):+.2f}", " ".join(f"[{lo:+.2f}, {hi:+.2f}]" for lo, hi in intervals),
                  verdict(intervals)]
    return "| " + " | ".join(cells) + " |"


def sensitivity_line(label, runs):
    return "| " + " | ".join([label, str(len(runs))] + [spread([r[key] for r in runs]) for key, _ in SENSITIVITY]) \
        + " |"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="the default row's data directory (its topic documents)")
    parser.add_argument("--base", required=True, help="05's EVAL folder of the base (models base-cls, base-mean)")
    parser.add_argument("--out", required=True, help="the ablation's folder: OUT/<row>/seed_<S>/eval")
    parser.add_argument("--rows", nargs="+", action="extend", required=True, help="rows, in the table's order")
    parser.add_argument("--sensitivity", action="store_true",
                        help="also the table of topic F1 under other classifier settings and re-splits")
    args = parser.parse_args(argv)
    ids, labels, n_train = topic_documents(args.data, args.base, "base-cls")
    n_train = n_train if args.sensitivity else None
    lines, changes = [], []
    base, evaluation = {}, read_eval(args.base)
    header = ["row", "seeds", *(name for _, _, name in SCORES), "C chosen", "C at grid end", "not converged",
              "C within a document", *(name for _, name, _ in SHAPES)]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] * 2 + ["---:"] * 3 + ["---"] * 4 + ["---:"] * len(SHAPES)) + "|")
    for name in ("base-cls", "base-mean"):
        found, base[name.split("-")[1]] = measure(args.base, evaluation, name, ids, labels, {}, n_train)
        print(row_line(name, [found]))
        lines.append((name, [found]))
    for row in args.rows:
        by_model = {}
        found = sorted(glob.glob(os.path.join(glob.escape(args.out), glob.escape(row), "seed_*", "eval")))
        if not found:
            raise InputError(f"--rows {row}: no {os.path.join(args.out, row, 'seed_*', 'eval')} folder")
        for eval_dir in found:
            evaluation = read_eval(eval_dir)
            names = [n for n in evaluation[0] if re.fullmatch(r"epoch_\d+(-l2)?", n)]
            last = f"epoch_{max(map(epoch, names))}" if names else None
            for name, found_change in differences(eval_dir, evaluation).items():
                changes.append((row, name, found_change))
            for name in names:
                by_model.setdefault(name, []).append(
                    measure(eval_dir, evaluation, name, ids, labels, base, n_train if name == last else None)[0])
        for name in sorted(by_model, key=lambda n: (n.endswith("-l2"), epoch(n))):
            label = f"{row}{'-l2' if name.endswith('-l2') else ''}, epoch {epoch(name)}"
            print(row_line(label, by_model[name]))
            if "f1_l2" in by_model[name][0]:
                lines.append((label, by_model[name]))
    if changes:
        print("\nEach epoch against its base, paired over the same queries and topic splits (05 --compare; points; "
              "each seed's 95 % interval):")
        print("| row | seeds | MAP change | MAP intervals | MAP | topic F1 change | F1 intervals | topic F1 |")
        print("|---|---|---:|---|---|---:|---|---|")
        grouped = {}
        for row, name, found_change in changes:
            grouped.setdefault((row, name), []).append(found_change)
        for (row, name), runs in grouped.items():
            print(difference_line(f"{row}, epoch {epoch(name)}", runs))
    if args.sensitivity:
        print("\nTopic macro-F1 (%) of the same vectors under the protocol and one change of the classifier each:")
        print("| " + " | ".join(["row", "seeds", *(name for _, name in SENSITIVITY)]) + " |")
        print("|" + "|".join(["---"] * 2 + ["---:"] * len(SENSITIVITY)) + "|")
        for label, runs in lines:
            print(sensitivity_line(label, runs))


if __name__ == "__main__":
    cli.run(lambda: main(sys.argv[1:]))
