"""Metrics against trec_eval's reference implementation (pytrec_eval) and hand-computed values: the ranking and
key-sentence metrics (common/eval/metrics.py), whole and cut at a rank, and paper search's retrieval metrics, which
score with them (common/eval/retrieval.py), those also against sentence-transformers' InformationRetrievalEvaluator."""

import random

import numpy as np
import pytest

from common.eval.metrics import (average_precision, average_r_precision, ndcg, r_precision, ranking_metrics,
                                 trec_order)


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


@pytest.mark.parametrize("cutoff", [1, 5, 10])
def test_map_and_ndcg_at_a_cutoff_equal_pytrec_eval_on_graded_qrels(cutoff):
    import pytrec_eval
    qrels, run = random_qrels_and_run(3)
    qrels = {qid: {d: i % 3 for i, d in enumerate(judged)} for qid, judged in qrels.items()}
    reference = pytrec_eval.RelevanceEvaluator(qrels, {f"map_cut_{cutoff}", f"ndcg_cut_{cutoff}"}).evaluate(run)
    for qid, judged in qrels.items():
        docs = list(run[qid])
        gains = [judged.get(docs[i], 0) for i in trec_order([run[qid][d] for d in docs], docs)]
        n_rel = sum(1 for r in judged.values() if r > 0)
        assert average_precision(gains, n_rel, cutoff) == pytest.approx(reference[qid][f"map_cut_{cutoff}"], abs=1e-12)
        assert ndcg(gains, judged.values(), cutoff) == pytest.approx(reference[qid][f"ndcg_cut_{cutoff}"], abs=1e-12)


def test_average_r_precision_thesis_example():
    # R = 3 with 2 of the top 3 key, and R = 6 with 3 of the top 6 key: (2/3 + 3/6) / 2 = 7/12
    first = ([0.9, 0.8, 0.7, 0.1], [1, 0, 1, 1])
    second = ([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1], [1, 1, 0, 0, 1, 0, 1, 1, 1])
    assert r_precision(*first) == pytest.approx(2 / 3)
    assert r_precision(*second) == pytest.approx(3 / 6)
    assert average_r_precision([first, second]) == pytest.approx(7 / 12)
    assert r_precision([0.5, 0.4], [0, 0]) is None


def random_run(seed, n_queries=12, n_docs=30, ties=False):
    rng = np.random.default_rng(seed)
    doc_ids = [f"d{j:02d}" for j in range(n_docs)]
    qrels = {f"q:{i}": set(rng.choice(doc_ids, rng.integers(1, 4), replace=False).tolist())
             for i in range(n_queries)}
    scores = rng.integers(0, 5, (n_queries, n_docs)).astype(float) if ties else rng.random((n_queries, n_docs))
    return doc_ids, qrels, scores


@pytest.mark.parametrize("ties", [False, True])
def test_retrieval_metrics_equal_pytrec_eval(ties):
    import pytrec_eval

    from common.eval.retrieval import retrieval_metrics
    doc_ids, qrels, scores = random_run(0, ties=ties)
    run = {qid: [doc_ids[j] for j in trec_order(list(row), doc_ids)] for qid, row in zip(qrels, scores)}
    ours = retrieval_metrics(run, qrels)
    judged = {q: {d: 1 for d in rel} for q, rel in qrels.items()}
    full = {q: {d: float(s) for d, s in zip(doc_ids, row)} for q, row in zip(qrels, scores)}
    top10 = {q: {d: full[q][d] for d in run[q][:10]} for q in qrels}
    evaluate = pytrec_eval.RelevanceEvaluator(judged, {"ndcg_cut_10", "recall_1", "recall_5", "recall_10",
                                                       "recall_100", "map_cut_100"}).evaluate(full)
    mrr = pytrec_eval.RelevanceEvaluator(judged, {"recip_rank"}).evaluate(top10)
    mean = {m: np.mean([evaluate[q][m] for q in qrels]) for m in evaluate["q:0"]}
    assert ours["ndcg@10"] == pytest.approx(mean["ndcg_cut_10"], abs=1e-12)
    assert ours["map@100"] == pytest.approx(mean["map_cut_100"], abs=1e-12)
    for k in (1, 5, 10, 100):
        assert ours[f"recall@{k}"] == pytest.approx(mean[f"recall_{k}"], abs=1e-12)
    assert ours["mrr@10"] == pytest.approx(np.mean([mrr[q]["recip_rank"] for q in qrels]), abs=1e-12)


def test_retrieval_metrics_equal_sentence_transformers_evaluator_without_ties_and_with_few_relevant():
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    from common.eval.retrieval import retrieval_metrics
    doc_ids, qrels, scores = random_run(1)
    evaluator = InformationRetrievalEvaluator({q: "x" for q in qrels}, {d: "x" for d in doc_ids}, qrels,
                                              precision_recall_at_k=[1, 5, 10], accuracy_at_k=[1])
    results = [[{"corpus_id": d, "score": float(s)} for d, s in zip(doc_ids, row)] for row in scores]
    theirs = evaluator.compute_metrics(results)
    run = {qid: [doc_ids[j] for j in trec_order(list(row), doc_ids)] for qid, row in zip(qrels, scores)}
    ours = retrieval_metrics(run, qrels)
    assert ours["mrr@10"] == pytest.approx(theirs["mrr@k"][10])
    assert ours["ndcg@10"] == pytest.approx(theirs["ndcg@k"][10])
    assert ours["map@100"] == pytest.approx(theirs["map@k"][100])  # R ≤ 3 < 100: the denominators agree
    for k in (1, 5, 10):
        assert ours[f"recall@{k}"] == pytest.approx(theirs["recall@k"][k])
