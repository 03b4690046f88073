"""The vector geometry behind the topic-F1 analysis: exact values on small inputs, and each measure against a
brute-force computation over every pair (scipy's pdist)."""

import numpy as np
import pytest
from scipy.spatial.distance import pdist

from common.eval import geometry


def test_two_orthogonal_labels_have_known_norm_anisotropy_and_distance_ratio():
    x = np.array([[1, 0], [0, 1], [1, 0], [0, 1]], dtype=np.float32)
    found = geometry.geometry(x, ["a", "b", "a", "b"], before=np.array([[1, 0], [1, 0], [1, 0], [1, 0]]))
    # pairs: two at cosine 1 (same label), four at 0; same-label distance 0, different-label distance √2
    assert found == pytest.approx({"norm": 1.0, "anisotropy": 1 / 3, "within_between": 0.0, "moved": 0.5})


def test_each_measure_equals_a_brute_force_over_every_pair():
    rng = np.random.default_rng(3)
    x = rng.normal(0.5, 1, (37, 6))
    x[4] = 0  # a zero vector: cosine 0 with everything
    labels = rng.choice(["a", "b", "c"], len(x))
    cos = 1 - pdist(x, "cosine")
    cos[np.isnan(cos)] = 0
    assert geometry.anisotropy(x) == pytest.approx(cos.mean())
    dist = pdist(x)
    same = pdist(np.unique(labels, return_inverse=True)[1][:, None], lambda u, v: u[0] == v[0]).astype(bool)
    expected = dist[same].mean() / dist[~same].mean()
    assert geometry.within_between(x, labels, block=5) == pytest.approx(expected)
    assert geometry.within_between(x, labels) == pytest.approx(expected)
    before = rng.normal(size=x.shape)
    rows = [np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)) if np.linalg.norm(a) else 0.0
            for a, b in zip(x, before)]
    assert geometry.moved(x, before) == pytest.approx(np.mean(rows))


def test_vectors_of_another_width_cannot_be_compared():
    with pytest.raises(ValueError, match=r"shape \(2, 3\) and \(2, 4\)"):
        geometry.moved(np.ones((2, 3)), np.ones((2, 4)))


def _ablation():
    """reproduce/ablation.py as a module."""
    import importlib.util
    import os
    from conftest import ROOT
    spec = importlib.util.spec_from_file_location("ablation", os.path.join(ROOT, "reproduce", "ablation.py"))
    ablation = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ablation)
    return ablation


def _eval_folder(folder, models, ids, differences=None):
    """A 05 EVAL folder as reproduce/ablation.py reads it: metrics.json, the manifest's embedding settings, vectors;
    ``differences``: --compare rows, {"a - b": (map, map_ci, f1, f1_ci)}."""
    import json
    folder.mkdir(parents=True)
    metrics, embedding = {}, {}
    for name, (map_, map_ci, f1, f1_ci) in (differences or {}).items():
        metrics[name] = {"crossref": {"map": map_, "map_ci": map_ci, "map_p": 0.5},
                         "topics.top": {"f1": f1, "f1_ci": f1_ci, "accuracy": f1, "accuracy_ci": f1_ci}}
    for name, (vectors, pooling, map_, f1, c, converged) in models.items():
        np.save(folder / f"{name}.npy", np.asarray(vectors, dtype=np.float32))
        (folder / f"{name}.ids.txt").write_text("".join(f"{i}\n" for i in ids))
        metrics[name] = {"crossref": {"map": map_}, "topics.top": {
            "f1": f1, "accuracy": f1, "C": c, "C_at_edge": c in (1e-4, 100.0), "converged": converged,
            "C_tied": not converged}}
        embedding[name] = {"pooling": pooling, "normalize": False, "max_length": 128}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "manifest.json").write_text(json.dumps({"embedding": embedding}))


def test_the_ablation_table_gives_each_row_and_epoch_its_mean_and_spread_over_seeds(tmp_path, capsys):
    ablation = _ablation()
    data = tmp_path / "data"
    data.mkdir()
    (data / "topics.top.train.jsonl").write_text('{"id": "a", "label": "x"}\n{"id": "b", "label": "y"}\n')
    (data / "topics.top.test.jsonl").write_text('{"id": "c", "label": "x"}\n{"id": "d", "label": "y"}\n')
    ids = ["d", "c", "b", "a", "z"]  # 05's order, with a document outside the topic task
    base = [[0, 1], [1, 0], [0, 1], [1, 0], [5, 5]]  # a = c = (1, 0) label x, b = d = (0, 1) label y
    _eval_folder(tmp_path / "base", {"base-cls": (base, "cls", 0.5, 0.5, 1.0, True),
                                     "base-mean": (base, "mean", 0.5, 0.5, 1.0, True)}, ids)
    _eval_folder(tmp_path / "default" / "seed_1" / "eval", {
        "epoch_1": ([[0, 2], [2, 0], [0, 2], [2, 0], [1, 1]], "cls", 0.6, 0.7, 0.01, True)}, ids)
    _eval_folder(tmp_path / "default" / "seed_2" / "eval", {
        "epoch_1": ([[2, 0], [2, 0], [0, 2], [2, 0], [1, 1]], "cls", 0.8, 0.5, 100.0, False)}, ids)
    ablation.sys.argv = ["ablation.py", "--data", str(data), "--base", str(tmp_path / "base"), "--out",
                         str(tmp_path), "--rows", "default"]
    ablation.main()
    lines = capsys.readouterr().out.splitlines()
    # the base and seed 1: the labels' two directions (anisotropy 2 of 6 pairs, within-label distance 0), seed 1 at
    # twice the length; seed 2 moves d onto label x's direction: anisotropy 3/6, within = between, d's cosine 0
    assert lines[0].startswith("| row | seeds | MAP | topic F1 |")
    assert lines[2] == "| base-cls | 1 | 50.00 | 50.00 | 50.00 | 1 | 0/1 | 0/1 | 0/1 | 1.00 | 0.333 | 0.000 | – |"
    assert lines[4] == ("| default, epoch 1 | 2 | 70.00 ± 14.14 | 60.00 ± 14.14 | 60.00 ± 14.14 | 0.01, 100 | 1/2 | "
                        "1/2 | 1/2 | 2.00 ± 0.00 | 0.417 ± 0.118 | 0.500 ± 0.707 | 0.875 ± 0.177 |")


def test_the_ablation_gives_each_rows_change_from_its_base_with_each_seeds_interval(tmp_path, capsys):
    """05's --compare rows of every seed, one line per row and epoch: the mean change, each seed's interval, and
    "rises" only where every seed's interval lies above zero."""
    ablation = _ablation()
    data = tmp_path / "data"
    data.mkdir()
    (data / "topics.top.train.jsonl").write_text('{"id": "a", "label": "x"}\n{"id": "b", "label": "y"}\n')
    (data / "topics.top.test.jsonl").write_text('{"id": "c", "label": "x"}\n{"id": "d", "label": "y"}\n')
    ids = ["a", "b", "c", "d"]
    x = [[1, 0], [0, 1], [1, 0], [0, 1]]
    _eval_folder(tmp_path / "base", {"base-cls": (x, "cls", 0.5, 0.5, 1.0, True),
                                     "base-mean": (x, "mean", 0.5, 0.5, 1.0, True)}, ids)
    for seed, change in ((1, (0.1, [0.02, 0.18], 0.2, [-0.05, 0.4])), (2, (0.3, [0.1, 0.5], 0.0, [-0.1, 0.1]))):
        _eval_folder(tmp_path / "mean" / f"seed_{seed}" / "eval",
                     {"base-mean": (x, "mean", 0.5, 0.5, 1.0, True), "epoch_1": (x, "mean", 0.6, 0.7, 1.0, True)},
                     ids, differences={"epoch_1 - base-mean": change})
    _eval_folder(tmp_path / "margin2" / "seed_1" / "eval", {"epoch_1": (x, "cls", 0.4, 0.4, 1.0, True)}, ids,
                 differences={"epoch_1 - base-cls": (-0.1, [-0.2, -0.01], -0.1, [-0.3, 0.1])})
    ablation.main(["--data", str(data), "--base", str(tmp_path / "base"), "--out", str(tmp_path),
                   "--rows", "mean", "margin2"])
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("| row | seeds | MAP change | MAP intervals | MAP | topic F1 change | F1 intervals | topic F1 |")
    assert lines[at + 2:] == [
        "| mean, epoch 1 | 2 | +20.00 | [+2.00, +18.00] [+10.00, +50.00] | rises (2/2 above 0) | +10.00 | "
        "[-5.00, +40.00] [-10.00, +10.00] | not shown (0/2 above, 0/2 below 0) |",
        "| margin2, epoch 1 | 1 | -10.00 | [-20.00, -1.00] | falls (1/1 below 0) | -10.00 | [-30.00, +10.00] | "
        "not shown (0/1 above, 0/1 below 0) |"]


def test_the_sensitivity_table_scores_the_same_vectors_as_sklearn_does_under_each_change(tmp_path):
    """reproduce/ablation.py --sensitivity: each F1 equals scikit-learn's own pipeline for that change."""
    from sklearn.metrics import f1_score
    from sklearn.model_selection import GridSearchCV, StratifiedShuffleSplit
    from sklearn.preprocessing import StandardScaler, normalize
    from sklearn.svm import LinearSVC
    ablation = _ablation()
    rng = np.random.default_rng(3)
    labels = [f"l{i % 3}" for i in range(60)]
    centres = rng.normal(size=(3, 8))
    x = np.array([centres[i % 3] + 1.5 * rng.normal(size=8) for i in range(60)]) * [1, 1, 1, 1, 1, 1, 40, 0.01]
    n_train = 42

    def f1(features, train, test):
        search = GridSearchCV(LinearSVC(random_state=42), {"C": np.logspace(-4, 2, 7)}, cv=3)
        search.fit(features[train], [labels[i] for i in train])
        return f1_score([labels[i] for i in test], search.predict(features[test]), average="macro")

    train, test = np.arange(n_train), np.arange(n_train, 60)
    scaled = StandardScaler().fit(x[train]).transform(x)
    resplit = [f1(x, a, b) for a, b in StratifiedShuffleSplit(3, test_size=18, random_state=42).split(x, labels)]
    expected = {"f1": f1(x, train, test), "f1_l2": f1(normalize(x), train, test), "f1_std": f1(scaled, train, test),
                "f1_resplit": np.mean(resplit), "f1_resplit_sd": np.std(resplit, ddof=1)}
    found = ablation.sensitivity(x, labels, n_train)
    assert found.keys() == expected.keys()
    for key, value in expected.items():
        assert found[key] == pytest.approx(value, abs=1e-12), key
    assert ablation.sensitivity(x, labels, n_train, protocol=0.5)["f1"] == 0.5  # 05's own F1, not computed again
    assert len(set(round(v, 6) for v in expected.values())) > 2  # the changes do change the score here
