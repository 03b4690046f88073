"""The cross-reference task's queries and candidates (SciDocs's protocol): documents with a link split into training,
validation and held-out queries, and per held-out query its linked positives and random unlinked negatives, written
as TREC qrels."""

import numpy as np

from common.data.neighbours import easy_negatives


def split_queries(corpus, holdout, val, rng):
    """Queries are documents with at least one link; held out for evaluation first, the rest train/val."""
    degree = np.diff(corpus.links.indptr)
    queries = np.flatnonzero(degree > 0)
    perm = rng.permutation(queries)
    n_hold = int(round(holdout * len(perm)))
    rest = perm[n_hold:]
    n_val = int(round(val * len(rest)))
    return {"train": np.sort(rest[n_val:]), "val": np.sort(rest[:n_val]), "holdout": np.sort(perm[:n_hold])}


def candidates(corpus, holdout, max_queries, min_links, positives, negatives, rng, counts):
    """Cross-reference ranking candidates: per query, linked positives (rel 1) and random unlinked negatives.
    Returns ``[(query, positives, negatives)]`` as document numbers."""
    degree = np.diff(corpus.links.indptr)
    eligible = holdout[degree[holdout] >= min_links]
    if len(eligible) > max_queries:
        eligible = np.sort(rng.choice(eligible, max_queries, replace=False))
    counts["crossref_queries"] = int(len(eligible))
    pos = [rng.choice(corpus.neighbours(q), min(positives, degree[q]), replace=False) for q in eligible.tolist()]
    flat, n_neg = easy_negatives(eligible, np.full(len(eligible), negatives), corpus.links, corpus.n, rng,
                                  counts)
    neg = np.split(flat, np.cumsum(n_neg)[:-1]) if len(eligible) else []
    return list(zip(eligible.tolist(), pos, neg))


def write_qrels(corpus, candidates, outputs):
    """crossref.qrels: TREC qrels lines ``qid 0 docid rel`` of :func:`candidates`."""
    with outputs.open("crossref.qrels") as f:
        for q, p, ng in candidates:
            qid = corpus.ids[q]
            f.writelines(f"{qid} 0 {corpus.ids[d]} 1\n" for d in p.tolist())
            f.writelines(f"{qid} 0 {corpus.ids[d]} 0\n" for d in ng.tolist())
