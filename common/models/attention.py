"""The attention function CPU training runs, and ``fast_dropout``, which puts it and ``dropout.Dropout`` into a
loaded model.

``fast_dropout(model)`` (which training calls on a CPU): the model's ``nn.Dropout`` modules become
``dropout.Dropout``, and a model with transformers' attention interface on ``"sdpa"`` moves to ``ATTENTION``:
SDPA itself wherever no mask is drawn (on a GPU, in evaluation), ``dropout.DroppedAttention`` where attention
probabilities are dropped on the CPU, and ``packing.packed_attention`` for a packed batch. On a GPU PyTorch's own
dropout and attention run unchanged.
"""

import torch
from torch import nn

from common.models.dropout import Dropout, DroppedAttention, keep_mask
from common.models.packing import packed_attention

ATTENTION = "sdpa_cpu_dropout"


def sdpa_cpu_dropout(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                     **kwargs):
    """transformers' SDPA attention, except where it would drop attention probabilities on the CPU: there
    softmax(q kᵀ · scale + mask) is dropped with ``keep_mask`` and multiplied by v (``DroppedAttention``). With a
    ``packing`` keyword (``packing.Packing``), the packed texts' attention (``packing.packed_attention``)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    packing = kwargs.pop("packing", None)
    if packing is not None:
        return packed_attention(query, key, value, packing, dropout,
                                scaling if scaling is not None else query.shape[-1] ** -0.5)
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
    keep = keep_mask((*query.shape[:-1], key.shape[-2]), dropout, query.dtype)
    out = DroppedAttention.apply(query * scale, key, value, bias, keep)
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
