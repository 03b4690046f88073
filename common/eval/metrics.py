"""Ranking and extraction metrics, computed as their reference tools do (held against them in the tests): trec_eval's
ranking order, average precision and nDCG, which WikiSpecter's tasks and paper search (``retrieval.py``) both score
with, and the key-sentence R-precision."""

import math

import numpy as np


def trec_order(scores, docnos):
    """Indices in trec_eval's ranking order: score descending, ties by document number descending."""
    return sorted(range(len(scores)), key=lambda i: (scores[i], docnos[i]), reverse=True)


def average_precision(ranked_relevance, n_relevant, cutoff=None):
    """trec_eval ``map`` for one query (``map_cut_k`` with ``cutoff`` k): the precision at each relevant document of
    the first ``cutoff`` ranks, summed over all ``n_relevant`` relevant ones."""
    if n_relevant == 0:
        return 0.0
    hits, total = 0, 0.0
    for rank, rel in enumerate(ranked_relevance[:cutoff], 1):
        if rel > 0:
            hits += 1
            total += hits / rank
    return total / n_relevant


def ndcg(ranked_gains, ideal_gains, cutoff=None):
    """trec_eval ``ndcg`` for one query (``ndcg_cut_k`` with ``cutoff`` k): gains discounted by log2(rank + 1), over
    the ideal ordering's, both summed over the first ``cutoff`` ranks."""
    dcg = sum(g / math.log2(r + 1) for r, g in enumerate(ranked_gains[:cutoff], 1) if g > 0)
    ideal = sorted((g for g in ideal_gains if g > 0), reverse=True)[:cutoff]
    best = sum(g / math.log2(r + 1) for r, g in enumerate(ideal, 1))
    return dcg / best if best > 0 else 0.0


def ranking_metrics(qrels, run):
    """Mean ``map`` and ``ndcg`` over the queries of ``qrels`` ({qid: {docid: rel}}); ``run`` = {qid: {docid:
    score}}. Per-query values are returned too."""
    per_query = {}
    for qid, judged in qrels.items():
        scored = run.get(qid, {})
        docs = list(scored)
        order = trec_order([scored[d] for d in docs], docs)
        gains = [judged.get(docs[i], 0) for i in order]
        n_rel = sum(1 for r in judged.values() if r > 0)
        per_query[qid] = {"map": average_precision(gains, n_rel), "ndcg": ndcg(gains, list(judged.values()))}
    if not per_query:
        return {}, {}
    return {m: float(np.mean([v[m] for v in per_query.values()])) for m in ("map", "ndcg")}, per_query


def r_precision(scores, labels):
    """Of the top R sentences by score (R = number of key sentences), the share that are key (ties: input
    order)."""
    labels = np.asarray(labels)
    r = int(labels.sum())
    if r == 0:
        return None
    top = np.argsort(-np.asarray(scores), kind="stable")[:r]
    return float(labels[top].sum() / r)


def average_r_precision(articles):
    """Average R-precision over articles (``[(scores, labels), ...]``); articles without key sentences skip."""
    values = [v for v in (r_precision(s, y) for s, y in articles) if v is not None]
    return float(np.mean(values)) if values else float("nan")
