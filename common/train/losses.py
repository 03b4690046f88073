"""The training losses, written out so that tests can hold them against torch's and sentence-transformers' own."""

import functools

import torch
import torch.nn.functional as F


def in_fp32(loss):
    """Compute ``loss`` in float32 under bf16/fp16 autocast: autocast off, floating-point tensor arguments cast up.
    For heads whose sums or exponentials lose too much in half precision (softmax over a batch, covariances)."""

    @functools.wraps(loss)
    def wrapper(*args, **kwargs):
        device = next((a.device.type for a in args if torch.is_tensor(a)), "cpu")
        with torch.autocast(device_type=device, enabled=False):
            return loss(*[a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args], **kwargs)
    return wrapper


def triplet_margin(query, positive, negative, margin=1.0):
    """SPECTER: mean of max(0, ||q − p||₂ − ||q − n||₂ + margin), with torch's pairwise-distance epsilon."""
    return F.relu(F.pairwise_distance(query, positive) - F.pairwise_distance(query, negative) + margin)


def contrastive_cosine(u, v, labels, margin=0.5):
    """Key-sentence thesis (sentence-transformers ContrastiveLoss, cosine distance): with D = 1 − cos(u, v),
    0.5·D² for key pairs and 0.5·max(0, margin − D)² for the others."""
    distance = 1 - F.cosine_similarity(u, v)
    labels = labels.to(distance.dtype)
    return 0.5 * (labels * distance.pow(2) + (1 - labels) * F.relu(margin - distance).pow(2))


def cosine_mse(u, v, labels):
    """Key-sentence thesis (sentence-transformers CosineSimilarityLoss): (cos(u, v) − label)²."""
    return (torch.cosine_similarity(u, v) - labels.to(u.dtype)).pow(2)
