"""The geometry of a model's document vectors, to tell why a topic classifier gains or loses after training:

| measure | what it is |
|---|---|
| ``norm`` | mean L2 norm of the vectors |
| ``anisotropy`` | mean cosine similarity over all distinct pairs (Ethayarajh 2019): near 1, every vector points one way |
| ``within_between`` | mean L2 distance between two documents of one label over that between two of different labels: |
| | below 1, labels form clusters; the nearer 1, the less a linear classifier has to go on |
| ``moved`` | mean cosine between each document's vector under this model and under another (the base) |

Every measure takes the rows given (the topic documents), so a corpus of any size costs one pass over them.
"""

import numpy as np


def norms(x):
    return np.linalg.norm(np.asarray(x, dtype=np.float64), axis=1)


def anisotropy(x):
    """Mean cosine over the n(n-1)/2 distinct pairs, from the sum of the unit vectors: |Σu|² = n + Σ_{i≠j} u_i·u_j.
    A zero vector counts as cosine 0 with everything."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    if n < 2:
        raise ValueError("anisotropy needs at least two vectors")
    length = norms(x)
    units = np.divide(x, length[:, None], out=np.zeros_like(x), where=length[:, None] > 0)
    total = units.sum(axis=0)
    return float((total @ total - (units * units).sum()) / (n * (n - 1)))


def within_between(x, labels, block=1024):
    """Mean L2 distance over same-label pairs / mean over different-label pairs, in blocks of rows (memory
    ``block × n``). NaN where either kind of pair is missing."""
    x = np.asarray(x, dtype=np.float64)
    codes = np.unique(np.asarray(labels), return_inverse=True)[1]
    sq = (x * x).sum(axis=1)
    sums, counts = np.zeros(2), np.zeros(2)
    for start in range(0, len(x), block):
        part = slice(start, start + block)
        dist = np.sqrt(np.maximum(sq[part, None] + sq[None, :] - 2 * x[part] @ x.T, 0))
        same = codes[part, None] == codes[None, :]
        upper = np.arange(start, start + len(dist))[:, None] < np.arange(len(x))[None, :]  # each pair once
        for k, mask in enumerate((same & upper, ~same & upper)):
            sums[k] += dist[mask].sum()
            counts[k] += mask.sum()
    if not counts.all():
        return float("nan")
    return float((sums[0] / counts[0]) / (sums[1] / counts[1]))


def moved(x, before):
    """Mean cosine between the rows of ``x`` and the same rows of ``before`` (same documents, same width)."""
    x, before = np.asarray(x, dtype=np.float64), np.asarray(before, dtype=np.float64)
    if x.shape != before.shape:
        raise ValueError(f"vectors of shape {x.shape} and {before.shape} cannot be compared row by row")
    denominator = norms(x) * norms(before)
    cosines = np.divide((x * before).sum(axis=1), denominator, out=np.zeros(len(x)), where=denominator > 0)
    return float(cosines.mean())


def geometry(x, labels, before=None):
    """Every measure of the table above for the rows ``x`` with their ``labels``; ``moved`` where ``before`` (the
    same rows under another model of the same width) is given."""
    found = {"norm": float(norms(x).mean()), "anisotropy": anisotropy(x), "within_between": within_between(x, labels)}
    if before is not None:
        found["moved"] = moved(x, before)
    return found
