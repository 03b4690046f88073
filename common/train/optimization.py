"""What the optimizer and its schedule take from the flags: AdamW's parameter groups (BERT's rule, which SPECTER
kept: no weight decay on biases and LayerNorm weights) and the number of warm-up steps."""

import torch


def parameter_groups(model, weight_decay):
    """AdamW groups: ``weight_decay`` on every trainable weight but biases and LayerNorm weights."""
    no_decay = set()
    for module in model.modules():
        if isinstance(module, torch.nn.LayerNorm) or "LayerNorm" in type(module).__name__:
            no_decay.update(id(p) for p in module.parameters(recurse=False))
    decay, rest = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (rest if name.endswith("bias") or id(param) in no_decay else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def warmup_steps(warmup, total):
    """``--warmup``: below 1 a share of the ``total`` optimizer steps, else a number of steps."""
    return int(round(warmup * total)) if warmup < 1 else int(warmup)
