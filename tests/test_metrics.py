"""Metrics against trec_eval's reference implementation (pytrec_eval) and hand-computed values."""

import random

import pytest

from common.eval.metrics import average_precision, average_r_precision, ndcg, r_precision, ranking_metrics


def test_average_precision_and_ndcg_by_hand():
    # relevant at ranks 1, 3 of 4; 3 relevant in total (one never retrieved)
    assert average_precision([1, 0, 1, 0], 3) == pytest.approx((1 / 1 + 2 / 3) / 3)
    assert ndcg([1, 0, 1, 0], [1, 1, 0, 0]) == pytest.approx((1 + 1 / 2) / (1 + 1 / 1.584962500721156))


def random_qrels_and_run(seed, queries=30, ties=True):
    rng = random.Random(seed)
    qrels, run = {}, {}
    for q in range(queries):
        qid = f"q{q}"
        docs = [f"d{rng.randrange(1000)}" for _ in range(30)]
        docs = list(dict.fromkeys(docs))
        qrels[qid] = {d: (1 if i < 5 else 0) for i, d in enumerate(docs)}
        # coarse scores make many ties, which trec_eval breaks by document number
        run[qid] = {d: float(rng.randrange(6)) if ties else rng.random() for d in docs}
    return qrels, run


@pytest.mark.parametrize("seed,ties", [(0, True), (1, True), (2, False)])
def test_map_and_ndcg_equal_pytrec_eval(seed, ties):
    import pytrec_eval
    qrels, run = random_qrels_and_run(seed, ties=ties)
    means, per_query = ranking_metrics(qrels, run)
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"map", "ndcg"}).evaluate(run)
    for qid in qrels:
        assert per_query[qid]["map"] == pytest.approx(reference[qid]["map"], abs=1e-12)
        assert per_query[qid]["ndcg"] == pytest.approx(reference[qid]["ndcg"], abs=1e-12)
    assert means["map"] == pytest.approx(sum(r["map"] for r in reference.values()) / len(reference), abs=1e-12)


def test_average_r_precision_thesis_example():
    # R = 3 with 2 of the top 3 key, and R = 6 with 3 of the top 6 key: (2/3 + 3/6) / 2 = 7/12
    first = ([0.9, 0.8, 0.7, 0.1], [1, 0, 1, 1])
    second = ([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1], [1, 1, 0, 0, 1, 0, 1, 1, 1])
    assert r_precision(*first) == pytest.approx(2 / 3)
    assert r_precision(*second) == pytest.approx(3 / 6)
    assert average_r_precision([first, second]) == pytest.approx(7 / 12)
    assert r_precision([0.5, 0.4], [0, 0]) is None
