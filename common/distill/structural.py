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

import torch
import torch.nn.functional as F

from common.models.precision import in_fp32

STRUCTURAL_LOSSES = ("cos", "mse", "mm-cos", "mm-mse")


def _pairwise(y, t, distance):
    """[b, b] distances of every student vector to every teacher vector."""
    if distance == "cos":
        return 1 - F.normalize(y, dim=1) @ F.normalize(t, dim=1).T
    return (y.unsqueeze(1) - t.unsqueeze(0)).pow(2).mean(-1)


@in_fp32
def structural_loss(y, t, mask, kind, gamma=1.0):
    """The loss of every document, 0 where ``mask`` is off, computed for all of them and kept where the mask is on:
    the batch's shapes do not depend on its mask, so that nothing asks the device how many documents it keeps."""
    if kind not in STRUCTURAL_LOSSES:
        raise ValueError(f"structural loss must be one of {STRUCTURAL_LOSSES}")
    if kind == "cos":
        kept = 1 - F.cosine_similarity(y, t, dim=1)
    elif kind == "mse":
        kept = (y - t).pow(2).mean(1)
    else:
        pairs = _pairwise(y, t, kind.removeprefix("mm-"))
        keep = mask.to(pairs.dtype)
        others = (pairs * keep[None, :]).sum(1) - pairs.diagonal() * keep  # the kept documents but itself
        k = keep.sum()
        kept = torch.where(k > 1, pairs.diagonal() - gamma * others / (k - 1).clamp(min=1), pairs.diagonal())
    return torch.where(mask, kept, kept.new_zeros(()))
