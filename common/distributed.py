"""A launch's processes, joined into one run, the collectives that in-batch losses need across them, and their
agreement to stop on a SIGTERM."""

import os
import re

import torch

from common.io import InputError


# the variables that tell a launch's number of processes, in the order Accelerate reads them: ``accelerate launch``'s
# and ``torchrun``'s, then MPI's under ``mpirun`` (MPICH and Intel MPI, Open MPI, MVAPICH)
LAUNCH_SIZES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def launched_processes():
    """The number of processes this launch starts, as the first of ``LAUNCH_SIZES`` that is set says, read before
    Accelerate starts; one without a launcher. A value that is not a whole number from 1 is one line naming its
    variable."""
    for name in LAUNCH_SIZES:
        value = os.environ.get(name)
        if value is None:
            continue
        if not re.fullmatch(r"[1-9][0-9]{0,8}", value):
            shown = repr(value) if len(value) <= 40 else repr(value[:37]) + "..."
            raise InputError(f"{name}={shown}: the number of processes a launcher starts must be a whole number "
                             "from 1")
        return int(value)
    return 1


def joins_on_cpu():
    """Whether this launch's processes are joined on the CPU (``Accelerator(cpu=True)``): several were started where
    there is no accelerator Accelerate joins processes on (none, or Apple's MPS, which has no collective backend).
    Accelerate joins processes on a GPU it finds, and on the CPU only when told so: otherwise each would train
    alone (``accelerate launch --multi_gpu`` or ``torchrun`` on a machine without a GPU)."""
    if launched_processes() <= 1:
        return False
    device = torch.accelerator.current_accelerator()
    return device is None or device.type == "mps"


def check_joined(accelerator):
    """Refuse, in one line before any work, processes of a launch that ``accelerator`` did not join into one run
    (each would train alone, and all but one be refused by the run folder's lock)."""
    launched = launched_processes()
    if accelerator.num_processes != launched:
        raise InputError(f"{launched} processes were launched and Accelerate joined {accelerator.num_processes} of "
                         "them into one run: each would train alone; run one process, or launch them where Accelerate "
                         "joins them (a GPU each, or the CPU)")


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
