"""05's 95 % intervals and paired comparisons: the bootstrap against scipy's on the same resamples, the paired
permutation test against scipy's exact enumeration and random swaps and ranx's Fisher randomization test (slow), the
topic re-splits against scikit-learn's own pipeline, and --compare end to end."""

import json

import numpy as np
import pytest
from scipy import stats

from common.eval import report, uncertainty
from conftest import forget_hashes, run_main, script_error


def mean_difference(x, y, axis=-1):
    return x.mean(axis) - y.mean(axis)


def test_the_interval_is_scipys_percentile_bootstrap_on_the_same_resamples():
    """A model's interval, and the paired interval of a difference between two, equal
    ``scipy.stats.bootstrap(method="percentile")`` given the same generator: the resamples are the stream
    ``default_rng(seed).integers(0, n, (resamples, n))``, and both models meet the same ones."""
    rng = np.random.default_rng(0)
    a = rng.random(37)
    b = a + rng.normal(0.05, 0.1, 37)
    found = uncertainty.bootstrap(np.stack([a, b])[..., None], uncertainty.Means(("m",)), 1000, 7)["m"]
    assert found.shape == (2, 1000)
    for x, dist in ((a, found[0]), (b, found[1])):
        ref = stats.bootstrap((x,), np.mean, n_resamples=1000, method="percentile", rng=np.random.default_rng(7))
        assert uncertainty.interval(dist) == pytest.approx(list(ref.confidence_interval), abs=1e-14)
    ref = stats.bootstrap((a, b), mean_difference, paired=True, n_resamples=1000, method="percentile",
                          rng=np.random.default_rng(7))
    assert uncertainty.interval(found[0] - found[1]) == pytest.approx(list(ref.confidence_interval), abs=1e-14)


def test_the_resamples_are_one_stream_from_the_seed_whatever_the_chunk(monkeypatch):
    """Drawn a few rows at a time to bound memory, the index sets are still the one draw of the whole
    ``[resamples, n]``, and each resample's figure is the mean of the rows it drew."""
    values = np.array([[0.0, 1.0], [0.5, 0.0], [1.0, 1.0], [0.25, 0.0], [0.0, 0.0]])
    whole = np.random.default_rng(3).integers(0, 5, (6, 5))
    monkeypatch.setattr(uncertainty, "CHUNK", 20)  # 2 resamples of 5 rows × 2 columns at a time
    chunks = list(uncertainty.draws(5, 6, 3, width=2))
    assert [len(c) for c in chunks] == [2, 2, 2]
    np.testing.assert_array_equal(np.concatenate(chunks), whole)
    found = uncertainty.bootstrap(values, uncertainty.Means(("x", "y")), 6, 3)
    np.testing.assert_array_equal(found["x"], values[whole, 0].mean(1))
    np.testing.assert_array_equal(found["y"], values[whole, 1].mean(1))
    assert uncertainty.interval([0.0, 1.0, np.nan]) is None  # a resample on which the figure is undefined


def test_the_paired_permutation_p_is_scipys_exact_enumeration_on_few_units():
    """On up to 16 units every one of the 2^n swaps is tried, and the two-sided p is
    ``scipy.stats.permutation_test(permutation_type="samples")``'s exactly: means with ties (0/1 figures, as
    MRR@1 or a classifier's hits) and a figure that is no mean (Spearman's correlation over rated pairs)."""
    from common.eval.similarity import Spearman
    rng = np.random.default_rng(1)
    hits_a, hits_b = rng.integers(0, 2, 12).astype(float), rng.integers(0, 2, 12).astype(float)
    real_a = rng.random(12)
    real_b = real_a - 0.2 + 0.1 * rng.random(12)
    a, b = np.stack([hits_a, real_a], 1), np.stack([hits_b, real_b], 1)
    found = uncertainty.permutation_p(a, b, uncertainty.Means(("hits", "real")), 0, 5)
    for name, x, y in (("hits", hits_a, hits_b), ("real", real_a, real_b)):
        ref = stats.permutation_test((x, y), mean_difference, permutation_type="samples", n_resamples=1 << 12,
                                     vectorized=True)
        assert found[name] == ref.pvalue
    assert found["real"] == 2 / 2 ** 12  # every unit favours a: only "no swap" and "all swapped" are as extreme
    ratings, cos_a, cos_b = rng.random(9), rng.random(9), rng.random(9)
    found = uncertainty.permutation_p(np.stack([cos_a, ratings], 1), np.stack([cos_b, ratings], 1), Spearman(), 0, 5)

    def spearman_difference(x, y):
        return stats.spearmanr(x, ratings).statistic - stats.spearmanr(y, ratings).statistic
    ref = stats.permutation_test((cos_a, cos_b), spearman_difference, permutation_type="samples",
                                 n_resamples=1 << 9)
    assert found["spearman"] == pytest.approx(ref.pvalue, abs=1e-12)


def two_rankings():
    """60 queries with 3 relevant documents of 40 each, and two runs of random scores, the second ranking the
    relevant documents a little higher: (qrels, the runs' scores, their nDCG@10 means, their per-query samples)."""
    from common.eval.retrieval import retrieval_scores
    rng = np.random.default_rng(2)
    qrels = {f"q{i}": {f"d{j}": 1 for j in rng.choice(40, 3, replace=False)} for i in range(60)}
    runs = []
    for boost in (0.0, 0.03):
        runs.append({q: {f"d{j}": float(rng.random() + boost * (f"d{j}" in qrels[q])) for j in range(40)}
                     for q in qrels})
    ranked = [{q: sorted(run[q], key=run[q].get, reverse=True) for q in run} for run in runs]
    means, samples = zip(*(retrieval_scores(r, {q: set(d) for q, d in qrels.items()}) for r in ranked))
    return qrels, runs, means, samples


def test_the_ranking_comparison_past_16_queries_agrees_with_scipys_random_swaps():
    """Over more than 16 queries the swaps are drawn at random; the p-value of nDCG@10 between two runs agrees with
    ``scipy.stats.permutation_test(permutation_type="samples")``'s within the noise of 20,000 swaps each."""
    _, _, means, samples = two_rankings()
    column = samples[0].names.index("ndcg@10")
    x, y = samples[0].values[:, column], samples[1].values[:, column]
    ours = uncertainty.permutation_p(samples[0].values, samples[1].values, samples[0].statistic, 20000, 42)
    ref = stats.permutation_test((x, y), mean_difference, permutation_type="samples", n_resamples=20000,
                                 vectorized=True, rng=np.random.default_rng(42))
    assert 0.01 < ref.pvalue < 0.5  # a difference neither obvious nor absent, where the two tests could part
    assert ours["ndcg@10"] == pytest.approx(ref.pvalue, abs=0.015)
    assert x.mean() == means[0]["ndcg@10"]


@pytest.mark.slow
def test_the_ranking_comparison_agrees_with_ranx_fisher_randomization_test():
    """The same two runs through ranx's ``compare(stat_test="fisher")``, the IR field's Fisher randomization test:
    its nDCG@10 of each run is ours, and its p-value ours within the noise of 20,000 permutations each (ranx
    compiles its functions with numba first: about 20 s)."""
    from ranx import Qrels, Run, compare
    qrels, runs, means, samples = two_rankings()
    ours = uncertainty.permutation_p(samples[0].values, samples[1].values, samples[0].statistic, 20000, 42)
    theirs = compare(Qrels(qrels), [Run(runs[0], name="a"), Run(runs[1], name="b")], ["ndcg@10"],
                     stat_test="fisher", n_permutations=20000, random_seed=42).to_dict()
    assert [m["ndcg@10"] for m in means] == pytest.approx([theirs[n]["scores"]["ndcg@10"] for n in "ab"],
                                                          abs=1e-12)
    p = theirs["a"]["comparisons"]["b"]["ndcg@10"]
    assert 0.01 < p < 0.5
    assert ours["ndcg@10"] == pytest.approx(p, abs=0.015)


def test_topic_resplits_are_scikit_learns_pipeline_on_stratified_shuffle_splits():
    """Each re-split's F1 and accuracy are those of GridSearchCV(LinearSVC) over the protocol's C grid on
    StratifiedShuffleSplit's split of the training and test documents together, at the protocol's test share."""
    from sklearn.metrics import accuracy_score, f1_score
    from sklearn.model_selection import GridSearchCV, StratifiedShuffleSplit
    from sklearn.svm import LinearSVC
    from common.eval import wikispecter
    rng = np.random.default_rng(4)
    labels = [f"l{i % 3}" for i in range(45)]
    centres = rng.normal(size=(3, 6))
    x = np.array([centres[i % 3] + 1.2 * rng.normal(size=6) for i in range(45)], dtype=np.float32)
    index = {f"d{i}": i for i in range(45)}
    rows = {"train": [(f"d{i}", labels[i]) for i in range(30)], "test": [(f"d{i}", labels[i]) for i in range(30, 45)]}
    found = wikispecter.resplits(x, index, rows, 3, seed=9)
    expected = []
    for train, test in StratifiedShuffleSplit(3, test_size=15, random_state=9).split(x, labels):
        search = GridSearchCV(LinearSVC(random_state=9), {"C": np.logspace(-4, 2, 7)}, cv=3)
        search.fit(x[train], [labels[i] for i in train])
        predicted = search.predict(x[test])
        truth = [labels[i] for i in test]
        expected.append([f1_score(truth, predicted, average="macro"), accuracy_score(truth, predicted)])
    np.testing.assert_allclose(found, expected, rtol=0, atol=1e-12)
    assert len({tuple(r) for r in found.tolist()}) > 1  # the splits do move the figures
    assert wikispecter.stratifiable(rows)
    lone = {"train": rows["train"], "test": rows["test"] + [("d0", "alone")]}  # a label with one document
    few = {"train": rows["train"], "test": rows["test"][:2]}  # fewer test documents than labels
    assert not wikispecter.stratifiable(lone) and not wikispecter.stratifiable(few)


def test_topic_intervals_span_the_splits_and_comparisons_flip_signs_over_the_same_splits():
    """A topic figure's interval over 11 splits is their range (at least 95 % of them inside, the protocol's among
    them); a comparison's difference is the protocol split's, its interval the range of the per-split
    differences, and its p the exact sign-flip test over the splits (scipy's), whose smallest value is 2 / 2^11."""
    rng = np.random.default_rng(6)
    f1_a = 0.6 + 0.05 * rng.random(11)
    f1_b = f1_a - 0.02 + 0.03 * rng.random(11)
    acc = rng.random(11)
    samples = {"a": {"topics.top": [uncertainty.splits(np.stack([f1_a, acc], 1), ("f1", "accuracy"))]},
               "b": {"topics.top": [uncertainty.splits(np.stack([f1_b, acc], 1), ("f1", "accuracy"))]}}
    metrics = {m: {"topics.top": {"f1": f[0], "accuracy": acc[0], "C": 1.0}} for m, f in (("a", f1_a), ("b", f1_b))}
    found, notes = uncertainty.summarise(metrics, samples, [("a", "b")], 0, 42)  # no bootstrap needed
    assert notes == []
    assert found["a"]["topics.top"] == {**metrics["a"]["topics.top"], "f1_ci": [f1_a.min(), f1_a.max()],
                                        "accuracy_ci": [acc.min(), acc.max()]}
    row = found["a - b"]["topics.top"]
    assert row["f1"] == f1_a[0] - f1_b[0] and row["f1_ci"] == [(f1_a - f1_b).min(), (f1_a - f1_b).max()]
    ref = stats.permutation_test((f1_a, f1_b), mean_difference, permutation_type="samples", n_resamples=1 << 11,
                                 vectorized=True)
    assert row["f1_p"] == ref.pvalue
    assert row["accuracy"] == 0 and row["accuracy_p"] == 1.0  # the same accuracy on every split: nothing to test
    big = np.percentile(np.arange(41.0), [2.5, 97.5])  # 41 splits: the 2.5th and 97.5th percentiles are values
    assert uncertainty.interval(np.arange(41.0), splits=True) == list(big) == [1.0, 39.0]


def test_without_resamples_or_resplits_there_are_differences_and_nothing_else():
    """``--resamples 0 --resplits 0``: no interval anywhere, and a comparison keeps only its differences."""
    samples = {m: {"crossref": [uncertainty.means([[0.5, 1.0], [v, 0.0]], ("map", "ndcg"))],
                   "topics.top": [uncertainty.splits([[v, v]], ("f1", "accuracy"))]} for m, v in (("a", 1), ("b", 0))}
    metrics = {m: {"crossref": {"map": v, "ndcg": 0.5}, "topics.top": {"f1": v, "accuracy": v}}
               for m, v in (("a", 0.75), ("b", 0.25))}
    found, notes = uncertainty.summarise(metrics, samples, [("a", "b")], 0, 42)
    assert notes == [] and found == {**metrics, "a - b": {"crossref": {"map": 0.5, "ndcg": 0.0},
                                          "topics.top": {"f1": 0.5, "accuracy": 0.5}}}


def test_a_test_articles_bootstrap_resamples_articles_with_their_sentences():
    """Key sentences: ARP, MSE and Pearson's r computed from the articles' sums equal the task's own figures, and
    on each resample of articles they equal the figures of those articles, as scipy's bootstrap resamples them."""
    from common.eval.keysent import article_sums, keysent_metrics
    rng = np.random.default_rng(8)
    scored = []
    for size in (4, 6, 3, 5, 7):
        labels = np.zeros(size, dtype=int)
        labels[rng.choice(size, 2, replace=False)] = 1
        scored.append((rng.random(size), labels))
    scored.append((rng.random(3), np.zeros(3, dtype=int)))  # no key sentence: outside ARP, inside MSE and r
    sample = article_sums(scored)
    assert {k: float(v) for k, v in sample.statistic(sample.values).items()} == pytest.approx(keysent_metrics(scored))
    found = uncertainty.bootstrap(sample.values, sample.statistic, 50, 11)

    def figures(idx):
        return [keysent_metrics([scored[i] for i in idx])[name] for name in sample.names]
    ref = stats.bootstrap((np.arange(len(scored)),), figures, n_resamples=50, vectorized=False,
                          method="percentile", rng=np.random.default_rng(11)).bootstrap_distribution
    for j, name in enumerate(sample.names):
        np.testing.assert_allclose(found[name], ref[j], rtol=1e-12)


def test_the_report_puts_each_interval_beside_its_figure_and_the_differences_in_a_table_of_their_own():
    metrics = {"trained": {"crossref": {"map": 0.6223, "map_ci": [0.5811, 0.6601]},
                           "topics.top": {"f1": 0.4016, "f1_ci": [0.3897, 0.4267], "C": 10.0},
                           "keysent": {"pearson": 0.7573, "pearson_ci": [0.7012, 0.8]}},
               "base": {"crossref": {"map": 0.4965, "map_ci": [0.45, 0.54]}, "topics.top": {"f1": 0.3897}},
               "trained - base": {"crossref": {"map": 0.1258, "map_ci": [0.0801, 0.17], "map_p": 0.000999}}}
    assert report.markdown(metrics, resampling=(1000, 10)) == (
        "| model | crossref map | topics.top f1 | keysent pearson |\n"
        "|---|---:|---:|---:|\n"
        "| trained | 62.23 [58.11, 66.01] | 40.16 [38.97, 42.67] | 0.7573 [0.7012, 0.8000] |\n"
        "| base | 49.65 [45.00, 54.00] | 38.97 | – |\n"
        "\nIn brackets, the 95 % interval (percentile bootstrap over the task's queries, test documents, articles or "
        "rated pairs, 1,000 resamples; topics: the protocol's split and 10 stratified re-splits).\n"
        "\nPaired differences A − B (the same queries, documents, articles or splits for both; p two-sided, paired "
        "permutation test):\n\n"
        "| A − B | task | metric | difference | 95 % interval | p |\n"
        "|---|---|---|---:|---:|---:|\n"
        "| trained − base | crossref | map | +12.58 | [+8.01, +17.00] | 0.000999 |\n")
    keysent = {model: {"keysent": tasks["keysent"]} for model, tasks in metrics.items() if "keysent" in tasks}
    assert "(percentile bootstrap over the task's queries, test documents, articles or rated pairs, 1,000 " \
           "resamples).\n" in report.markdown(keysent, resampling=(1000, 10))  # no topics: no word of them
    assert "In brackets" not in report.markdown({"base": {"crossref": {"map": 0.5}}}, resampling=(0, 0))


def test_reproductions_tables_show_intervals_where_the_metrics_have_them(tmp_path, capsys):
    """reproduce/compare.py: ours with its interval, an old metrics file without one as before, and 05's
    difference rows left out of the default rows."""
    import importlib.util
    import os
    from conftest import ROOT
    spec = importlib.util.spec_from_file_location("compare", os.path.join(ROOT, "reproduce", "compare.py"))
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"trained": {"crossref": {"map": 0.6223, "map_ci": [0.5811, 0.6601]}},
                                "old": {"crossref": {"map": 0.5}},
                                "trained - old": {"crossref": {"map": 0.1223, "map_p": 0.01}}}), encoding="utf-8")
    compare.main(["wikispecter", str(path)])
    assert [line.split(" | ")[:5] for line in capsys.readouterr().out.splitlines()[2:4]] == [
        ["| trained", "–", "–", "62.23 [58.11, 66.01]", "–"], ["| old", "–", "–", "50.00", "–"]]


@pytest.fixture
def evaluated(tiny_model, tiny_data, tmp_path_factory):
    """05 on the tiny data directory: the model with [CLS] and with mean pooling, compared with each other and the
    lexical baseline, 300 resamples and 5 re-splits (kept small for the test: the fewest that give an interval)."""
    out = tmp_path_factory.mktemp("compare") / "eval"
    proc = run_main("05_evaluate.py", "--data", tiny_data, "--model", f"cls={tiny_model}", "--model",
                    f"mean={tiny_model}", "--pooling", "mean=mean", "--out", out, "--compare", "cls=mean",
                    "--compare", "mean=lexical", "--resamples", "300", "--resplits", "5", "--seed", "5")
    return out, proc.stdout


def test_compare_through_05_writes_each_difference_with_the_interval_and_p_of_the_same_queries_and_splits(
        evaluated, tiny_data):
    """The rows ``cls - mean`` and ``mean - lexical`` of metrics.json, recomputed from the vectors 05 wrote: the
    crossref intervals are scipy's bootstrap over the per-query figures with 05's seed, the p-value scipy's
    permutation test, the topic figures scikit-learn's over the same splits; report.md and the printed table hold
    the differences."""
    from common.eval import wikispecter
    out, stdout = evaluated
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {"cls", "mean", "lexical", "cls - mean", "mean - lexical"}
    assert set(metrics["mean - lexical"]) == {"crossref"}  # the only task the baseline scores
    assert set(metrics["cls"]["topics.top"]) >= {"f1", "f1_ci", "accuracy", "accuracy_ci", "C"}
    ids = (out / "cls.ids.txt").read_text().split()
    index = {doc: i for i, doc in enumerate(ids)}
    qrels = wikispecter.read_qrels(str(tiny_data / "crossref.qrels"), index)
    per_query = {name: wikispecter.crossref(np.load(out / f"{name}.npy"), index, qrels)[1].values
                 for name in ("cls", "mean")}
    row = metrics["cls - mean"]["crossref"]
    assert row["map"] == metrics["cls"]["crossref"]["map"] - metrics["mean"]["crossref"]["map"]
    cls_map, mean_map = per_query["cls"][:, 0], per_query["mean"][:, 0]
    ref = stats.bootstrap((cls_map,), np.mean, n_resamples=300, method="percentile", rng=np.random.default_rng(5))
    assert metrics["cls"]["crossref"]["map_ci"] == pytest.approx(list(ref.confidence_interval), abs=1e-12)
    ref = stats.bootstrap((cls_map, mean_map), mean_difference, paired=True, n_resamples=300, method="percentile",
                          rng=np.random.default_rng(5))
    assert row["map_ci"] == pytest.approx(list(ref.confidence_interval), abs=1e-12)
    assert row["map_p"] == pytest.approx(uncertainty.permutation_p(per_query["cls"], per_query["mean"],
                                                                   uncertainty.Means(("map", "ndcg")), 300, 5)["map"])
    rows = wikispecter.read_topics(str(tiny_data), "top", index)
    f1 = {}
    for name in ("cls", "mean"):
        emb = np.load(out / f"{name}.npy")
        f1[name] = [wikispecter.topics(emb, index, rows, 5)[0]["f1"],
                    *wikispecter.resplits(emb, index, rows, 5, 5)[:, 0]]
    assert metrics["cls"]["topics.top"]["f1_ci"] == [min(f1["cls"]), max(f1["cls"])]
    topics = metrics["cls - mean"]["topics.top"]
    assert topics["f1"] == f1["cls"][0] - f1["mean"][0]
    assert topics["f1_p"] == stats.permutation_test((np.array(f1["cls"]), np.array(f1["mean"])), mean_difference,
                                                    permutation_type="samples", n_resamples=64,
                                                    vectorized=True).pvalue
    lines = (out / "report.md").read_text().splitlines()
    assert any(line.startswith("| cls − mean | crossref | map | ") for line in lines)
    assert any(line.startswith("| mean − lexical | crossref | ndcg | ") for line in lines)
    assert "| cls − mean | topics.top | f1 | " in stdout


@pytest.mark.parametrize("case", ["malformed", "empty-side", "unknown", "itself", "baseline-not-scored"])
def test_a_bad_compare_is_one_line_before_anything_is_embedded(tiny_model, tiny_data, tmp_path, case):
    args = ["--data", tiny_data, "--model", f"base={tiny_model}", "--model", f"trained={tiny_model}", "--out",
            tmp_path / "eval"]
    compare, expected = {
        "malformed": ("trained", "error: --compare 'trained': expected A=B, two of base, trained, lexical"),
        "empty-side": ("trained=", "error: --compare 'trained=': expected A=B, two of base, trained, lexical"),
        "unknown": ("trained=bert", "error: --compare trained=bert: no row 'bert' (rows: base, trained, lexical)"),
        "itself": ("base=base", "error: --compare base=base: compares base with itself"),
        "baseline-not-scored": ("trained=lexical", "error: --compare trained=lexical: no row 'lexical' (rows: base, "
                                                   "trained)")}[case]
    if case == "baseline-not-scored":
        args += ["--task", "crossref"]
    assert script_error("05_evaluate.py", *args, "--compare", compare) == expected
    assert not (tmp_path / "eval").exists()


def test_a_negative_count_of_resamples_or_resplits_is_one_line(tiny_model, tiny_data, tmp_path):
    for flag, most in (("--resamples", "100,000"), ("--resplits", "1,000")):
        assert script_error("05_evaluate.py", "--data", tiny_data, "--model", f"base={tiny_model}", "--out",
                            tmp_path / "e", flag, "-1") == f"error: argument {flag}: -1: must be between 0 and {most}"


def test_a_topic_level_that_cannot_be_re_split_keeps_its_figure_and_gets_no_interval(tiny_data, tmp_path):
    """A label with a single document cannot be stratified: 05 says so once, classifies the protocol's split
    alone, and the level's figures get no interval."""
    import shutil
    from common.data.docs_jsonl import Documents
    from common.eval import tasks as evaluation
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    forget_hashes(data)
    test = data / "topics.top.test.jsonl"
    lone = json.loads(test.read_text().splitlines()[0])["id"]
    test.write_text("".join(line if json.loads(line)["id"] != lone else json.dumps({"id": lone, "label": "yksin"})
                            + "\n" for line in test.read_text().splitlines(keepends=True)))
    index = Documents(str(data)).index
    notes = []
    tasks = evaluation.Tasks(str(data), {"topics"}, index, resplits=3, say=notes.append)
    assert notes == ["note: topics.top: a label with one document, or fewer documents on a side than labels: no "
                     "stratified re-splits, and no interval on its F1 and accuracy"]
    emb = np.random.default_rng(0).normal(size=(len(index), 8)).astype(np.float32)
    scores, _ = tasks.topics(emb, 42)
    found, (sample,) = scores["topics.top"]
    assert sample.splits and sample.values.tolist() == [[found["f1"], found["accuracy"]]]
    assert uncertainty.summarise({"m": {"topics.top": found}}, {"m": {"topics.top": [sample]}}, [], 1000, 42) == ({
        "m": {"topics.top": found}}, [])


# -- an interval only where it can mean what it says ---------------------------------------------------------------

def _two_models(n, names=("map", "ndcg"), unit=("query", "queries"), seed=3):
    """Two models' per-unit figures on the same ``n`` units (b a little below a), and their headline figures."""
    rng = np.random.default_rng(seed)
    a = rng.random((n, len(names)))
    b = a - 0.1 * rng.random((n, len(names)))
    samples = {m: {"crossref": [uncertainty.means(v, names, unit)]} for m, v in (("a", a), ("b", b))}
    metrics = {m: {"crossref": dict(zip(names, v.mean(0).tolist()))} for m, v in (("a", a), ("b", b))}
    return metrics, samples


@pytest.mark.parametrize("resamples", [1, 2, 10, 39])
def test_fewer_than_40_resamples_give_no_interval_and_no_p_but_a_note(resamples):
    """--resamples 1 gave a "95 % interval" that left out its own figure: below 40 resamples (each 2.5 % tail then
    holds a resample) every bootstrap interval and random-swap p is None, and one note says why."""
    metrics, samples = _two_models(30)
    found, notes = uncertainty.summarise(metrics, samples, [("a", "b")], resamples, 42)
    assert found["a"]["crossref"] == {**metrics["a"]["crossref"], "map_ci": None, "ndcg_ci": None}
    assert found["a - b"]["crossref"] == {"map": pytest.approx(metrics["a"]["crossref"]["map"] -
                                                               metrics["b"]["crossref"]["map"]),
                                          "ndcg": pytest.approx(metrics["a"]["crossref"]["ndcg"] -
                                                                metrics["b"]["crossref"]["ndcg"]),
                                          "map_ci": None, "ndcg_ci": None, "map_p": None, "ndcg_p": None}
    assert notes == [f"--resamples {resamples}: fewer than 40, too few for the 2.5 % and 97.5 % ends"]


@pytest.mark.parametrize("resamples", [40, 41, 1000])
def test_from_40_resamples_every_interval_holds_its_figure(resamples):
    metrics, samples = _two_models(30)
    found, notes = uncertainty.summarise(metrics, samples, [("a", "b")], resamples, 42)
    assert notes == []
    for row in ("a", "b", "a - b"):
        for name in ("map", "ndcg"):
            low, high = found[row]["crossref"][f"{name}_ci"]
            assert low <= found[row]["crossref"][name] <= high
    assert 0 < found["a - b"]["crossref"]["map_p"] <= 1


@pytest.mark.parametrize("n, words", [(1, "1 query"), (2, "2 queries"), (5, "5 queries")])
def test_fewer_than_six_units_give_no_interval_and_no_p(n, words):
    """One query gave a zero-width interval and p 1: under 6 units no paired test can reach p < 0.05 (5 units:
    2 / 2^5 = 0.0625), so the figures keep no interval and the differences no p, whatever --resamples."""
    metrics, samples = _two_models(n)
    found, notes = uncertainty.summarise(metrics, samples, [("a", "b")], 1000, 42)
    assert found["a"]["crossref"]["map_ci"] is None and found["b"]["crossref"]["ndcg_ci"] is None
    assert {k: v for k, v in found["a - b"]["crossref"].items() if k.endswith(("_ci", "_p"))} == {
        "map_ci": None, "ndcg_ci": None, "map_p": None, "ndcg_p": None}
    assert notes == [f"crossref: {words}, fewer than 6: no paired test over so few reaches p < 0.05 (the smallest "
                     f"is 2 / 2^{n})"]


def test_six_units_are_enough_and_their_smallest_p_is_below_005():
    """6 units where a beats b on every one: the exact sign-flip p is 2 / 2^6, the interval lies above zero."""
    metrics, samples = _two_models(6)
    found, notes = uncertainty.summarise(metrics, samples, [("a", "b")], 1000, 42)
    assert notes == []
    assert found["a - b"]["crossref"]["map_p"] == 2 / 64
    assert found["a - b"]["crossref"]["map_ci"][0] > 0


@pytest.mark.parametrize("splits, shown", [(2, False), (5, False), (6, True), (11, True)])
def test_a_topic_interval_needs_six_splits(splits, shown):
    """The topic figures' units are the splits (the protocol's and --resplits): 4 splits agreeing on a sign give
    p 2 / 2^4, so their range is no interval to judge a claim by; from 6 (--resplits 5) there is one."""
    rng = np.random.default_rng(5)
    f1 = {"a": 0.6 + 0.1 * rng.random(splits)}
    f1["b"] = f1["a"] - 0.01 - 0.02 * rng.random(splits)  # a above b on every split
    samples = {m: {"topics.top": [uncertainty.splits(np.stack([f1[m], f1[m]], 1), ("f1", "accuracy"))]} for m in f1}
    metrics = {m: {"topics.top": {"f1": f1[m][0], "accuracy": f1[m][0]}} for m in f1}
    found, notes = uncertainty.summarise(metrics, samples, [("a", "b")], 1000, 42)
    if shown:
        assert notes == [] and found["a"]["topics.top"]["f1_ci"] == [f1["a"].min(), f1["a"].max()]
        assert found["a - b"]["topics.top"]["f1_p"] == 2 / 2 ** splits
    else:
        assert found["a"]["topics.top"]["f1_ci"] is None and found["a - b"]["topics.top"]["f1_p"] is None
        assert notes == [f"topics.top: {splits} splits, fewer than 6: no paired test over so few reaches p < 0.05 "
                         f"(the smallest is 2 / 2^{splits})"]


@pytest.mark.filterwarnings("ignore::scipy.stats.ConstantInputWarning")
@pytest.mark.parametrize("case", ["equal ratings", "one model's cosines all equal"])
def test_a_difference_that_is_not_a_number_has_no_interval_and_no_p(case):
    """Spearman's correlation with ratings that are all equal (or with cosines that are) is undefined: the
    difference used to get p 0.002 (every swap "as extreme" counted as none); now neither interval nor p."""
    from common.eval.similarity import Spearman
    rng = np.random.default_rng(9)
    ratings = np.full(40, 0.5) if case == "equal ratings" else rng.random(40)
    cos_a = rng.random(40)
    cos_b = np.full(40, 0.3) if case != "equal ratings" else rng.random(40)
    samples = {m: {"similarity": [uncertainty.Sample(np.stack([c, ratings], 1), Spearman(),
                                                     unit=("rated pair", "rated pairs"))]}
               for m, c in (("a", cos_a), ("b", cos_b))}
    metrics = {m: {"similarity": {"spearman": float(stats.spearmanr(c, ratings).statistic)}}
               for m, c in (("a", cos_a), ("b", cos_b))}
    found, notes = uncertainty.summarise(metrics, samples, [("a", "b")], 1000, 42)
    row = found["a - b"]["similarity"]
    assert np.isnan(row["spearman"]) and row["spearman_ci"] is None and row["spearman_p"] is None
    assert "a − b: similarity spearman: the difference is not a number (a figure is undefined), so it has no " \
           "interval and no p" in notes
    assert found["b"]["similarity"]["spearman_ci"] is None


def test_an_undefined_figure_on_some_swaps_has_no_p():
    """The permutation test itself: where the difference is a number but not on every swap, p is undefined. Key
    sentences: a's only key sentence is in the first article, b's in the second; swapping the first article alone
    leaves a without a key sentence, and so without ARP."""
    from common.eval.keysent import ArticleSums, article_sums
    rng = np.random.default_rng(4)
    keys = [np.zeros(4, dtype=int) for _ in range(8)]
    first, second = [k.copy() for k in keys], [k.copy() for k in keys]
    first[0][0] = second[1][0] = 1
    texts = [rng.random(4) for _ in range(8)]
    a = article_sums(list(zip(texts, first))).values
    b = article_sums(list(zip(texts, second))).values
    p = uncertainty.permutation_p(a, b, ArticleSums(), 0, 42)
    assert p["arp"] is None and p["mse"] is not None
    both = article_sums(list(zip(texts, [np.array([1, 0, 0, 0])] * 8))).values
    assert uncertainty.permutation_p(both, both[::-1], ArticleSums(), 0, 42)["arp"] is not None


class _DistinctShare:
    """A figure no resample reaches: the share of distinct units (1 on the data, below 1 on almost every
    resample, which repeats units)."""
    names = ("distinct",)

    def __call__(self, rows):
        x = rows[..., 0]
        ordered = np.sort(x, axis=-1)
        return {"distinct": (1 + (np.diff(ordered, axis=-1) != 0).sum(-1)) / x.shape[-1]}


def test_an_interval_that_leaves_its_figure_out_is_not_shown():
    sample = uncertainty.Sample(np.arange(20.0)[:, None], _DistinctShare())
    metrics = {"m": {"task": {"distinct": 1.0}}}
    found, notes = uncertainty.summarise(metrics, {"m": {"task": [sample]}}, [], 1000, 42)
    assert found["m"]["task"] == {"distinct": 1.0, "distinct_ci": None}
    assert notes == ["m: task distinct: the 2.5th and 97.5th percentiles of its resamples leave the figure out (a "
                     "statistic skewed on these units), so no interval"]
    assert uncertainty.holds([0.2, 0.4], 0.4 + 1e-12) and not uncertainty.holds([0.2, 0.4], 0.41)


def test_a_figure_undefined_on_some_resamples_has_no_interval():
    """Key sentences: a resample of articles none of which has a key sentence has no ARP."""
    from common.eval.keysent import article_sums
    rng = np.random.default_rng(2)
    scored = [(rng.random(4), np.array([1, 0, 0, 0]))] + [(rng.random(4), np.zeros(4, dtype=int)) for _ in range(7)]
    sample = article_sums(scored)
    figures = {k: float(v) for k, v in sample.statistic(sample.values).items()}
    found, notes = uncertainty.summarise({"m": {"keysent": figures}}, {"m": {"keysent": [sample]}}, [], 1000, 42)
    assert found["m"]["keysent"]["arp_ci"] is None and found["m"]["keysent"]["mse_ci"] is not None
    assert notes == ["m: keysent arp: undefined on some resamples, so no percentile interval",
                     "m: keysent pearson: undefined on some resamples, so no percentile interval"]


def test_the_report_marks_a_withheld_interval_and_says_why_under_the_table():
    metrics = {"a": {"crossref": {"map": 0.5, "map_ci": None}, "topics.top": {"f1": 0.25}},
               "a - b": {"crossref": {"map": float("nan"), "map_ci": None, "map_p": None}}}
    notes = ["crossref: 1 query, fewer than 6: no paired test over so few reaches p < 0.05 (the smallest is 2 / 2^1)"]
    assert report.markdown(metrics, resampling=(1000, 10), notes=notes) == (
        "| model | crossref map | topics.top f1 |\n"
        "|---|---:|---:|\n"
        "| a | 50.00 [–] | 25.00 |\n"
        "\nIn brackets, the 95 % interval (percentile bootstrap over the task's queries, test documents, articles or "
        "rated pairs, 1,000 resamples).\n"
        "\nNo interval or p (–) where it could not mean what it says:\n\n"
        "- crossref: 1 query, fewer than 6: no paired test over so few reaches p < 0.05 (the smallest is 2 / 2^1)\n"
        "\nPaired differences A − B (the same queries, documents, articles or splits for both; p two-sided, paired "
        "permutation test):\n\n"
        "| A − B | task | metric | difference | 95 % interval | p |\n"
        "|---|---|---|---:|---:|---:|\n"
        "| a − b | crossref | map | – | – | – |\n")


def test_every_task_of_05_withholds_its_intervals_by_the_same_rule(tiny_model, tiny_data, tmp_path):
    """Through 05, in one run: crossref, topics and the lexical row with --resamples 10 and --resplits 3: every
    interval and p null in metrics.json, "[–]" in the table, and a note per reason under it."""
    from conftest import script_main
    out = tmp_path / "eval"
    script_main("05_evaluate.py")(["--data", str(tiny_data), "--model", f"base={tiny_model}", "--out", str(out),
                                   "--task", "crossref", "topics", "lexical", "--resamples", "10", "--resplits", "3",
                                   "--compare", "base=lexical"])
    metrics = json.loads((out / "metrics.json").read_text())
    withheld = [(row, task, key) for row, tasks in metrics.items() for task, values in tasks.items()
                for key, value in values.items() if key.endswith(("_ci", "_p"))]
    assert {(row, task) for row, task, _ in withheld} == {("base", "crossref"), ("base", "topics.top"),
                                                         ("lexical", "crossref"), ("base - lexical", "crossref")}
    assert all(metrics[row][task][key] is None for row, task, key in withheld)
    text = (out / "report.md").read_text()
    assert "| base | " in text and "[–]" in text
    assert "- --resamples 10: fewer than 40, too few for the 2.5 % and 97.5 % ends\n" in text
    assert "- topics.top: 4 splits, fewer than 6: no paired test over so few reaches p < 0.05 (the smallest is " \
           "2 / 2^4)\n" in text


# -- the same figures, sooner -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("processes", [1, 2, 3])
def test_splits_classified_in_parallel_processes_give_what_each_gives_alone(processes):
    """05 classifies the protocol's split and the re-splits in forked processes, a share each: every split's
    metrics, C and predictions are those of ``topics`` on it alone, in the splits' order."""
    from common.eval import wikispecter
    rng = np.random.default_rng(4)
    labels = [f"l{i % 3}" for i in range(45)]
    centres = rng.normal(size=(3, 6))
    x = np.array([centres[i % 3] + 1.5 * rng.normal(size=6) for i in range(45)], dtype=np.float32)
    index = {f"d{i}": i for i in range(45)}
    rows = {"train": [(f"d{i}", labels[i]) for i in range(30)], "test": [(f"d{i}", labels[i]) for i in range(30, 45)]}
    splits = wikispecter.splits_of(rows, 4, seed=9)
    assert len(splits) == 5 and splits[0] is rows
    alone = [wikispecter.topics(x, index, split, 9) for split in splits]
    assert wikispecter.start_topics(x, index, splits, 9, processes=processes)() == alone
    assert wikispecter.resplits(x, index, rows, 4, 9).tolist() == [[m["f1"], m["accuracy"]] for m, _ in alone[1:]]


@pytest.mark.parametrize("counts", [{"a": 300, "b": 200, "c": 100}, {"a": 590, "b": 7, "c": 3}, {"a": 20, "b": 5}])
def test_a_tsne_draws_at_most_500_points_each_labels_share_kept(counts):
    from common.eval.figures import tsne_sample
    labels = [label for label, n in counts.items() for _ in range(n)]
    np.random.default_rng(0).shuffle(labels)
    chosen = tsne_sample(labels, seed=3)
    if len(labels) <= 500:
        assert chosen.tolist() == list(range(len(labels)))
        return
    assert len(chosen) == 500 and chosen.tolist() == sorted(set(chosen.tolist()))
    drawn = {label: sum(labels[i] == label for i in chosen) for label in counts}
    for label, n in counts.items():  # its share's floor, or one more (the rarest labels topped up)
        assert n * 500 // len(labels) <= drawn[label] <= n * 500 // len(labels) + 1
    assert tsne_sample(labels, seed=3).tolist() == chosen.tolist() != tsne_sample(labels, seed=4).tolist()


def test_the_token_lengths_figure_tokenises_again_only_the_documents_the_embedding_cut(tiny_model):
    """Fig. 4.1's counts from the embedding's own token counts (cut at the length) where they fall below the cut,
    and a new tokenisation of the rest: the counts of tokenising every document whole."""
    from transformers import AutoTokenizer
    from common.eval.wikispecter import token_lengths
    from common.models.tokens import TokenStore
    from conftest import corpus_text
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    texts = corpus_text(3, 40) + [" ".join(corpus_text(4, 12))]
    whole = token_lengths(tokenizer, texts)
    cut = int(np.median(whole))
    known = TokenStore(tokenizer, texts, cut).lengths()
    assert known.max() == cut < whole.max()
    calls = []
    original = tokenizer.__call__

    class Counting(type(tokenizer)):
        def __call__(self, batch, **kwargs):
            calls.append(len(batch))
            return original(batch, **kwargs)

    tokenizer.__class__ = Counting
    assert token_lengths(tokenizer, texts, cut=cut, known=known).tolist() == whole.tolist()
    assert calls == [int((known >= cut).sum())]
