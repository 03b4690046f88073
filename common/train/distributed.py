"""Collectives that in-batch losses need across processes."""

import torch


def all_gather_with_grad(tensor):
    """``tensor`` from every process concatenated along dim 0, in rank order, with gradient flowing back to each
    process's own rows (``accelerator.gather`` has none, so other processes' rows would be constants). One process:
    the tensor itself. Every process must pass the same shape.

    With DDP averaging parameter gradients over W processes, a per-process loss averaged over its own rows gives
    the gradient of one process averaging over all rows."""
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return tensor
    from torch.distributed.nn.functional import all_gather
    return torch.cat(all_gather(tensor.contiguous()))
