"""Collectives across processes: those in-batch losses need, and the agreement to stop on a SIGTERM."""

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


def process_rank():
    """This process's rank in the process group (0 without one)."""
    import torch.distributed as dist
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def all_gather(tensor):
    """``tensor`` from every process concatenated in rank order, without gradient (ids, keys); one process: the
    tensor itself. Every process must pass the same shape."""
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts)


def stop_agreed(accelerator, flag, boundary):
    """Whether the run stops now: ``flag`` (a SIGTERM reached this process) holds in any process. One process decides
    at every step; several agree only at a ``boundary`` (a step that writes a log record or a checkpoint, where they
    wait for one another anyway), so that no step waits on a collective for it: on GPUs each one is a host–device
    synchronisation. A SIGTERM then stops the run at the next log record or checkpoint, the same step everywhere."""
    if accelerator.num_processes == 1:
        return flag
    if not boundary:
        return False
    found = torch.tensor(float(flag), device=accelerator.device)
    return accelerator.reduce(found, reduction="sum").item() > 0
