"""The CPU layer's attention (``cpu.install``): where SDPA would leave its fused kernel for the composite one to drop
attention probabilities, ``DroppedAttention`` (softmax, mask and backward written out) with masks from
``cpu_dropout.keep_mask``, through the attention function ``ATTENTION`` that a model is switched to; a Longformer's
too (``dropped_attention``); and the attention of texts packed end to end in one row (``packed_attention``, planned by
``cpu_packing.Packing``)."""

import importlib
import inspect

import torch
import torch.nn.functional as F

from common.models.cpu_dropout import keep_mask


class DroppedAttention(torch.autograd.Function):
    """softmax(q kᵀ + bias) ⊙ keep, times v, with its backward written out. q, k, v are ``[B, H, L, d]``, q already
    scaled by the attention's own scale; ``bias`` is an additive mask that broadcasts to ``[B, H, L, L]`` (or None);
    ``keep`` is ``[B, H, L, L]`` from ``keep_mask`` (0 or 1 / (1 - p)).

    The probabilities P and the dropped ones D = P ⊙ keep are kept; the backward needs no mask: with G = grad · vᵀ
    and T = G ⊙ D, the scores' gradient P ⊙ (G ⊙ keep − rowsum(G ⊙ keep ⊙ P)) is T − P ⊙ rowsum(T), done in place
    on T."""

    @staticmethod
    def forward(ctx, q, k, v, bias, keep):
        b, h, n, d = q.shape
        q, k, v = (t.reshape(b * h, t.shape[-2], d) for t in (q, k, v))
        probs = torch.bmm(q, k.transpose(1, 2))
        if bias is not None:
            probs.view(b, h, n, -1).add_(bias)
        probs = torch.softmax(probs, dim=-1)
        dropped = probs * keep.reshape(probs.shape)
        ctx.save_for_backward(q, k, v, probs, dropped)
        ctx.shape = (b, h)
        return torch.bmm(dropped, v).view(b, h, n, d)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, probs, dropped = ctx.saved_tensors
        b, h = ctx.shape
        grad = grad.reshape(b * h, grad.shape[-2], grad.shape[-1])
        # Dᵀ · grad as (gradᵀ · D)ᵀ: only the [L, d] operands are transposed
        grad_v = torch.bmm(grad.transpose(1, 2), dropped).transpose(1, 2)
        scores = torch.bmm(grad, v.transpose(1, 2)).mul_(dropped)
        scores.addcmul_(probs, scores.sum(-1, keepdim=True), value=-1.0)
        grad_q = torch.bmm(scores, k)
        grad_k = torch.bmm(q.transpose(1, 2), scores).transpose(1, 2)
        return (grad_q.view(b, h, *grad_q.shape[1:]), grad_k.view(b, h, *grad_k.shape[1:]),
                grad_v.view(b, h, *grad_v.shape[1:]), None, None)


def dropped_attention(q, k, v, mask, p):
    """softmax(q kᵀ / √d + mask) v with attention-probability dropout p, for a Longformer's attention
    (``sliding_window``); q, k, v ``[N, heads, rows, d]``. Under bf16 autocast SDPA runs, as transformers'."""
    if not 0 < p < 1 or torch.is_autocast_enabled("cpu"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
    keep = keep_mask((*q.shape[:-1], k.shape[-2]), p, q.dtype)
    return DroppedAttention.apply(q * q.shape[-1] ** -0.5, k, v, mask, keep)


ATTENTION = "sdpa_cpu_dropout"  # transformers' attention-interface name of ``sdpa_cpu_dropout``


def sdpa_cpu_dropout(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                     **kwargs):
    """transformers' SDPA attention, except where it would drop attention probabilities: there softmax(q kᵀ ·
    scale + mask) is dropped with ``keep_mask`` and multiplied by v (``DroppedAttention``). With a ``packing``
    keyword (a ``Packing``), the packed texts' attention (``packed_attention``)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    packing = kwargs.pop("packing", None)
    if packing is not None:
        return packed_attention(query, key, value, packing, dropout,
                                scaling if scaling is not None else query.shape[-1] ** -0.5)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", False)
    if (not 0 < dropout < 1 or causal or kwargs.get("position_bias") is not None
            or key.shape[1] != query.shape[1] or torch.is_autocast_enabled("cpu")):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    bias = None
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            bias = torch.zeros(attention_mask.shape, dtype=query.dtype).masked_fill_(
                ~attention_mask, torch.finfo(query.dtype).min)
        else:
            bias = attention_mask[..., :key.shape[-2]].to(query.dtype)
    keep = keep_mask((*query.shape[:-1], key.shape[-2]), dropout, query.dtype)
    out = DroppedAttention.apply(query * scale, key, value, bias, keep)
    return out.transpose(1, 2).contiguous(), None


# what of transformers this module calls, by module: the registries ``register_attention`` enters ``ATTENTION`` in,
# the mask function it registers with it, and SDPA's attention function ``sdpa_cpu_dropout`` hands every other case
# to, with the arguments it passes
INTERFACE = {"transformers": ("AttentionInterface",),
             "transformers.masking_utils": ("ALL_MASK_ATTENTION_FUNCTIONS", "sdpa_mask"),
             "transformers.integrations.sdpa_attention": ("sdpa_attention_forward",)}
SDPA_ARGUMENTS = ("module", "query", "key", "value", "attention_mask", "dropout", "scaling", "is_causal")


def differences():
    """What of ``INTERFACE`` this release of transformers lacks or has changed, one phrase each (none: an empty
    list)."""
    found = []
    for module, names in INTERFACE.items():
        try:
            imported = importlib.import_module(module)
        except ImportError:
            found.append(module)
            continue
        found += [f"{module}.{name}" for name in names if not hasattr(imported, name)]
    if found:
        return found
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    registries = {"AttentionInterface": AttentionInterface,
                  "ALL_MASK_ATTENTION_FUNCTIONS": ALL_MASK_ATTENTION_FUNCTIONS}
    found = [f"{name}.register" for name, registry in registries.items()
             if not callable(getattr(registry, "register", None))]
    parameters = inspect.signature(sdpa_attention_forward).parameters
    if any(name not in parameters for name in SDPA_ARGUMENTS) or \
            not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        found.append(f"sdpa_attention_forward({', '.join(SDPA_ARGUMENTS)}, **kwargs)")
    return found


def register_attention():
    """Make ``ATTENTION`` a name transformers' attention and mask interfaces know."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    AttentionInterface.register(ATTENTION, sdpa_cpu_dropout)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, sdpa_mask)


def packed_attention(query, key, value, packing, dropout, scale):
    """Attention of each text over its own tokens, for packed ``[1, heads, T, d]`` q, k, v; returns ``[1, T, heads,
    d]`` as transformers' attention functions do. With 0 < dropout < 1 the probabilities are dropped with
    ``keep_mask`` (``DroppedAttention``); otherwise PyTorch's scaled-dot-product attention runs."""
    qs, ks, vs = (packing.take(t[0].transpose(0, 1)) for t in (query, key, value))  # from [T, heads, d]
    outs = []
    for qb, kb, vb, bias in zip(qs, ks, vs, packing.masks(query.dtype)):
        if 0 < dropout < 1:
            keep = keep_mask((*qb.shape[:-1], kb.shape[-2]), dropout, qb.dtype)
            outs.append(DroppedAttention.apply(qb * scale, kb, vb, bias, keep))
        else:
            outs.append(F.scaled_dot_product_attention(qb, kb, vb, attn_mask=bias, scale=scale))
    return packing.put(outs)[None], None
