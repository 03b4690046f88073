"""Document similarity as Burian 2023 evaluates retrieval (§4.2, after Ginzburg et al. 2021): every source document
ranks the whole corpus by cosine similarity, the source itself left out by id; MAP and MRR against the source's
targets (``similarity.qrels``, relevance > 0). Where a corpus has human similarity ratings
(``similarity.ratings.jsonl``: ``{"a", "b", "score"}``), the Spearman correlation of cosine with the ratings.

The thesis drops the first hit (assuming it is the query) and ranks the top 1,000; here the query is dropped by
its id and the whole corpus is ranked, so AP counts every target.
"""

import os

import numpy as np
from sklearn.metrics import average_precision_score

from common.eval import uncertainty
from common.eval.wikispecter import read_qrels
from common.io import InputError, number_field, read_jsonl

QRELS, RATINGS = "similarity.qrels", "similarity.ratings.jsonl"


def available(data_dir):
    return any(os.path.exists(os.path.join(data_dir, name)) for name in (QRELS, RATINGS))


def _unit(emb):
    return emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)


def ranking(emb, index, qrels):
    """{"map", "mrr"} over the sources with at least one target, and their per-source values as a
    ``uncertainty.Sample`` (None without such a source)."""
    unit = _unit(emb.astype(np.float64))
    aps, rrs = [], []
    for source, judged in qrels.items():
        targets = [index[d] for d, rel in judged.items() if rel > 0 and d != source]
        if not targets:
            continue
        q = index[source]
        scores = unit @ unit[q]
        relevant = np.zeros(len(scores), dtype=bool)
        relevant[targets] = True
        keep = np.arange(len(scores)) != q
        scores, relevant = scores[keep], relevant[keep]
        aps.append(average_precision_score(relevant, scores))
        order = np.argsort(-scores, kind="stable")
        rrs.append(1.0 / (1 + int(np.flatnonzero(relevant[order])[0])))
    if not aps:
        return {}, None
    return {"map": float(np.mean(aps)), "mrr": float(np.mean(rrs))}, uncertainty.means(
        np.stack([aps, rrs], 1), ("map", "mrr"), ("source document", "source documents"))


def read_ratings(path, index):
    """The rated pairs (positions in ``index``, [n, 2]) and their ratings [n]: ``a`` and ``b`` ids of docs.jsonl,
    ``score`` a finite JSON number (any scale: Spearman's correlation ranks it); anything else names the line."""
    pairs, scores = [], []
    for lineno, obj in read_jsonl(path, required=("a", "b", "score")):
        for key in ("a", "b"):
            if not isinstance(obj[key], str) or obj[key] not in index:
                raise InputError(f"{path}:{lineno}: id {obj[key]!r} (field {key!r}) is not in docs.jsonl")
        pairs.append((index[obj["a"]], index[obj["b"]]))
        scores.append(float(number_field(obj["score"], f"{path}:{lineno}", "score")))
    return np.array(pairs, dtype=np.int64).reshape(-1, 2), np.array(scores, dtype=np.float64)


class Spearman:
    """The statistic of rated pairs (rows of cosine and rating): their Spearman correlation (ties ranked by their
    mean rank, as ``scipy.stats.spearmanr``)."""
    names = ("spearman",)

    def __call__(self, rows):
        from scipy.stats import rankdata
        ranks = rankdata(rows, axis=-2)
        ranks -= ranks.mean(-2, keepdims=True)
        x, y = ranks[..., 0], ranks[..., 1]
        with np.errstate(invalid="ignore", divide="ignore"):  # a resample of equal ratings has none: NaN
            return {"spearman": (x * y).sum(-1) / np.sqrt((x * x).sum(-1) * (y * y).sum(-1))}


def spearman(emb, pairs, scores):
    """{"spearman"} of cosine with the ratings, and the rated pairs as a ``uncertainty.Sample`` (its interval is a
    bootstrap over the pairs)."""
    from scipy.stats import spearmanr
    unit = _unit(emb.astype(np.float64))
    cosine = (unit[pairs[:, 0]] * unit[pairs[:, 1]]).sum(1)
    return ({"spearman": float(spearmanr(cosine, scores).statistic)},
            uncertainty.Sample(np.stack([cosine, np.asarray(scores, dtype=np.float64)], 1), Spearman(),
                               unit=("rated pair", "rated pairs")))


def evaluate(emb, index, qrels=None, ratings=None):
    """Every similarity metric the data has (``read``'s qrels and ratings), and the ``uncertainty.Sample`` of
    each kind of unit (sources, rated pairs)."""
    parts = []
    if qrels:
        parts.append(ranking(emb, index, qrels))
    if ratings is not None:
        parts.append(spearman(emb, *ratings))
    out, samples = {}, []
    for found, sample in parts:
        out.update(found)
        if sample is not None:
            samples.append(sample)
    return out, samples


def read(data_dir, index):
    qrels_path, ratings_path = os.path.join(data_dir, QRELS), os.path.join(data_dir, RATINGS)
    qrels = read_qrels(qrels_path, index) if os.path.exists(qrels_path) else None
    ratings = read_ratings(ratings_path, index) if os.path.exists(ratings_path) else None
    return qrels, ratings
