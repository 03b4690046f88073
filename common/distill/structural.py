"""Structural losses of teacher–student distillation (Burian 2023, §4.4): the student's document vector ``y``
against the structural teacher's (Sentence-BERT) vector ``t`` of the same document, both raw mean-pooled.

| input  | shape    | what                                                                          |
|--------|----------|-------------------------------------------------------------------------------|
| y      | [b, d]   | student embeddings                                                            |
| t      | [b, d]   | structural-teacher embeddings of the same documents (unnormalised)            |
| mask   | [b] bool | documents the structural loss sees (short enough for the teacher, §3.1.2)     |
| output | [b]      | loss per document; 0 where ``mask`` is off                                    |

``cos`` (1 − cos) and ``mse`` (mean over dimensions) compare each document with its own teacher vector. The
max-margin variants (Eq. 4.1) subtract γ times the mean distance to the *other* kept documents' teacher vectors:
``d(y_i, t_i) − γ·mean_{j≠i, mask_j} d(y_i, t_j)``, with no hinge. With γ = 1 and MSE the quadratic terms cancel
and the loss is unbounded below (norms grow; the thesis's Fig. 4.4). A batch with one kept document has no
negatives: its term is ``d(y_i, t_i)`` alone.
"""

import torch.nn.functional as F

from common.train.losses import in_fp32

STRUCTURAL_LOSSES = ("cos", "mse", "mm-cos", "mm-mse")


def _pairwise(y, t, distance):
    """[k, k] distances of every student vector to every teacher vector."""
    if distance == "cos":
        return 1 - F.normalize(y, dim=1) @ F.normalize(t, dim=1).T
    return (y.unsqueeze(1) - t.unsqueeze(0)).pow(2).mean(-1)


@in_fp32
def structural_loss(y, t, mask, kind, gamma=1.0):
    if kind not in STRUCTURAL_LOSSES:
        raise ValueError(f"structural loss must be one of {STRUCTURAL_LOSSES}")
    out = y.new_zeros(len(y))
    if not mask.any():
        return out
    yk, tk = y[mask], t[mask]
    if kind == "cos":
        kept = 1 - F.cosine_similarity(yk, tk, dim=1)
    elif kind == "mse":
        kept = (yk - tk).pow(2).mean(1)
    else:
        pairs = _pairwise(yk, tk, kind.removeprefix("mm-"))
        kept = pairs.diagonal()
        k = len(yk)
        if k > 1:
            kept = kept - gamma * (pairs.sum(1) - pairs.diagonal()) / (k - 1)
    return out.masked_scatter(mask, kept)
