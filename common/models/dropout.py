"""Dropout on the CPU without PyTorch's slow mask: the same Bernoulli(p) drop mask and 1 / (1 - p) scaling of
what is kept, drawn several times faster.

PyTorch's CPU dropout fills a float tensor with ``bernoulli_`` (about 7 ns an element here) and multiplies by it;
with dropout on the attention probabilities, transformers' SDPA attention also leaves the fused attention kernel
for PyTorch's composite one. In a triplet training step of all-MiniLM-L6-v2 on two cores ``bernoulli_`` alone was
14 % of the time. Here the mask comes from NumPy's SFC64 generator, 32 random bits an element compared with
``round(p · 2³²)`` (18 ms → 4 ms for 2.75 M elements), and is kept as booleans for the backward pass.

Reproducibility: each mask's generator is seeded with one draw from PyTorch's global generator, so a run's masks
follow from ``torch.manual_seed`` and resume with the checkpointed RNG state like PyTorch's own. On a GPU, and in
evaluation, PyTorch's own dropout and attention run unchanged.

``fast_dropout(model)`` (which training calls on a CPU) puts both into a loaded model: its ``nn.Dropout`` modules become ``Dropout``, and a
model with transformers' attention interface on ``"sdpa"`` moves to ``ATTENTION`` (SDPA itself wherever no mask
is drawn).
"""

import numpy as np
import torch
from torch import nn

ATTENTION = "sdpa_cpu_dropout"


def drop_mask(shape, p):
    """A boolean tensor of ``shape``, each element True (dropped) with probability p (to 2⁻³²), independently."""
    n = int(np.prod(shape, dtype=np.int64))
    seed = int(torch.randint(0, 2 ** 62, (), dtype=torch.int64))
    bits = np.random.SFC64(seed).random_raw((n + 1) // 2).view(np.int32)[:n]
    # bits are uniform on [-2^31, 2^31): P(bits < cut) = round(p * 2^32) / 2^32
    cut = round(p * 2 ** 32) - 2 ** 31
    return torch.from_numpy(bits).view(shape) < cut


class _Dropped(torch.autograd.Function):
    """x with the ``drop`` elements zeroed, times ``scale``; only the boolean mask is kept for the backward pass."""

    @staticmethod
    def forward(ctx, x, drop, scale):
        ctx.save_for_backward(drop)
        ctx.scale = scale
        return torch.where(drop, 0.0, x).mul_(scale)

    @staticmethod
    def backward(ctx, grad):
        drop, = ctx.saved_tensors
        return torch.where(drop, 0.0, grad).mul_(ctx.scale), None, None


def dropout(x, p, training=True):
    """``torch.nn.functional.dropout`` with the mask drawn by ``drop_mask`` on a CPU tensor."""
    if not training or x.device.type != "cpu" or not 0 < p < 1:
        return nn.functional.dropout(x, p, training)
    return _Dropped.apply(x, drop_mask(x.shape, p), 1.0 / (1.0 - p))


class Dropout(nn.Dropout):
    """``nn.Dropout`` (same ``p``, same place in the model) whose CPU mask comes from ``drop_mask``."""

    def forward(self, x):
        if self.inplace:
            return super().forward(x)
        return dropout(x, self.p, self.training)


class _Attention(torch.autograd.Function):
    """softmax(q kᵀ + bias) with the ``drop`` elements zeroed, times v · scale, its backward written out: the
    probabilities are kept once, the dropped ones recomputed from them and the boolean mask, the scale applied to
    the ``[L, d]`` operands, and every ``[B, H, L, L]`` step after the first product done in place. q, k, v are
    ``[B, H, L, d]``, q already scaled by the attention's own scale; ``bias`` is an additive mask that broadcasts
    to ``[B, H, L, L]`` (or None); ``drop`` is ``[B, H, L, L]``."""

    @staticmethod
    def forward(ctx, q, k, v, bias, drop, scale):
        b, h, n, d = q.shape
        q, k, v = (t.reshape(b * h, t.shape[-2], d) for t in (q, k, v))
        probs = torch.bmm(q, k.transpose(1, 2))
        if bias is not None:
            probs.view(b, h, n, -1).add_(bias)
        probs = torch.softmax(probs, dim=-1)
        drop = drop.view(probs.shape)
        ctx.save_for_backward(q, k, v, probs, drop)
        ctx.scale, ctx.shape = scale, (b, h)
        return torch.bmm(torch.where(drop, 0.0, probs), v * scale).view(b, h, n, d)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, probs, drop = ctx.saved_tensors
        (b, h), scale = ctx.shape, ctx.scale
        grad = grad.reshape(b * h, grad.shape[-2], grad.shape[-1])
        # (dropped)ᵀ · grad as (gradᵀ · dropped)ᵀ: only the [L, d] operands are transposed
        grad_v = torch.bmm(grad.transpose(1, 2) * scale, torch.where(drop, 0.0, probs)).transpose(1, 2)
        grad_probs = torch.bmm(grad, v.transpose(1, 2) * scale).masked_fill_(drop, 0.0)
        grad_scores = torch._softmax_backward_data(grad_probs, probs, -1, probs.dtype)
        del grad_probs
        grad_q = torch.bmm(grad_scores, k)
        grad_k = torch.bmm(q.transpose(1, 2), grad_scores).transpose(1, 2)
        return (grad_q.view(b, h, *grad_q.shape[1:]), grad_k.view(b, h, *grad_k.shape[1:]),
                grad_v.view(b, h, *grad_v.shape[1:]), None, None, None)


def sdpa_cpu_dropout(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                     **kwargs):
    """transformers' SDPA attention, except where it would drop attention probabilities on the CPU: there
    softmax(q kᵀ · scale + mask) is dropped with ``drop_mask`` and multiplied by v (``_Attention``)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", False)
    if (not 0 < dropout < 1 or query.device.type != "cpu" or causal or kwargs.get("position_bias") is not None
            or key.shape[1] != query.shape[1] or torch.is_autocast_enabled("cpu")):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    bias = None
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            bias = torch.zeros(attention_mask.shape, dtype=query.dtype, device=query.device).masked_fill_(
                ~attention_mask, torch.finfo(query.dtype).min)
        else:
            bias = attention_mask[..., :key.shape[-2]].to(query.dtype)
    drop = drop_mask((*query.shape[:-1], key.shape[-2]), dropout)
    out = _Attention.apply(query * scale, key, value, bias, drop, 1.0 / (1.0 - dropout))
    return out.transpose(1, 2).contiguous(), None


def _register():
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    AttentionInterface.register(ATTENTION, sdpa_cpu_dropout)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, sdpa_mask)


def fast_dropout(model):
    """Swap the dropout of ``model`` (any module holding transformers models) for this module's, in place;
    returns it."""
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Dropout:
                setattr(module, name, Dropout(child.p, child.inplace).train(child.training))
    _register()
    for module in model.modules():  # outermost first: setting a model sets the models inside it
        if getattr(module, "_supports_attention_backend", False) and \
                getattr(getattr(module, "config", None), "_attn_implementation", None) == "sdpa":
            module.set_attn_implementation(ATTENTION)
    return model
