"""The training losses, written out so that tests can hold them against torch's and sentence-transformers' own."""

import torch
import torch.nn.functional as F

from common.models.precision import in_fp32


@in_fp32
def triplet_margin(query, positive, negative, margin=1.0):
    """SPECTER: mean of max(0, ||q − p||₂ − ||q − n||₂ + margin), with torch's pairwise-distance epsilon."""
    return F.relu(F.pairwise_distance(query, positive) - F.pairwise_distance(query, negative) + margin)


@in_fp32
def contrastive_cosine(u, v, labels, margin=0.5):
    """Key-sentence thesis (sentence-transformers ContrastiveLoss, cosine distance): with D = 1 − cos(u, v),
    0.5·D² for key pairs and 0.5·max(0, margin − D)² for the others."""
    distance = 1 - F.cosine_similarity(u, v)
    labels = labels.to(distance.dtype)
    return 0.5 * (labels * distance.pow(2) + (1 - labels) * F.relu(margin - distance).pow(2))


@in_fp32
def cosine_mse(u, v, labels):
    """Key-sentence thesis (sentence-transformers CosineSimilarityLoss): (cos(u, v) − label)²."""
    return (torch.cosine_similarity(u, v) - labels.to(u.dtype)).pow(2)


@in_fp32
def multiple_negatives_ranking(queries, docs, all_queries=None, offset=0, scale=20.0, false_negatives=None,
                               symmetric=False):
    """In-batch softmax cross-entropy (sentence-transformers' MultipleNegativesRankingLoss; Henderson et al. 2017):
    per query i, −log softmax over ``scale · cos(q_i, d_j)`` at its positive j = ``offset + i``, every other
    document of the batch (all processes' when gathered) a negative.

    | argument          | shape            | what                                                              |
    |-------------------|------------------|-------------------------------------------------------------------|
    | ``queries``       | [B, d]           | this process's queries                                            |
    | ``docs``          | [M, d]           | every document they are scored against; query i's positive at     |
    |                   |                  | row ``offset + i`` (M = B × processes when gathered)              |
    | ``all_queries``   | [M, d]           | the queries of all processes (``symmetric`` only; default queries) |
    | ``false_negatives`` | [B, M] bool    | logits set to −inf (duplicates of the positive; never the label)   |

    ``symmetric`` adds the document → query direction (each local positive against all queries) and averages
    the two cross-entropies (sentence-transformers' ``directions=("query_to_doc", "doc_to_query")``,
    ``partition_mode="per_direction"``). Returns the loss per local query, [B]."""
    labels = torch.arange(len(queries), device=queries.device) + offset
    scores = scale * (F.normalize(queries, dim=-1) @ F.normalize(docs, dim=-1).T)
    if false_negatives is not None:
        scores = scores.masked_fill(false_negatives, float("-inf"))
    loss = F.cross_entropy(scores, labels, reduction="none")
    if symmetric:
        all_queries = queries if all_queries is None else all_queries
        positives = docs[offset:offset + len(queries)]
        back = scale * (F.normalize(positives, dim=-1) @ F.normalize(all_queries, dim=-1).T)
        if false_negatives is not None:
            back = back.masked_fill(false_negatives[:, :len(all_queries)], float("-inf"))
        loss = (loss + F.cross_entropy(back, labels, reduction="none")) / 2
    return loss


@in_fp32
def masked_lm(logits, labels):
    """BERT's masked-language-model loss per masked token: cross-entropy of ``logits`` [N, V] at ``labels`` [N]
    (the masked positions only, so their mean is Hugging Face's ``outputs.loss``)."""
    return F.cross_entropy(logits, labels, reduction="none")


@in_fp32
def next_sentence(logits, labels):
    """BERT's next-sentence-prediction loss per pair: cross-entropy of the two-way ``logits`` [B, 2] at ``labels``
    [B] (0: segment B follows A, 1: B is from another document; their mean is the second term of
    ``BertForPreTraining``'s loss)."""
    return F.cross_entropy(logits, labels, reduction="none")
