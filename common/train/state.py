"""The training loop's state: what 03's loop carries from one step to the next, one value that the run folder starts,
checkpoints and resumes whole (``RunFolder.start``, ``save_checkpoint``), so that a resumed run continues exactly
where the uninterrupted one was."""

import time
from dataclasses import dataclass, field


@dataclass
class TrainState:
    """Where the loop is and what it has seen since its last log record.

    ``window`` holds ``(step, loss, logs)`` of each micro-batch since the last log record: the step it counts
    towards, its mean loss and the objective's log values, all detached and on the device, read only at log records
    and saves so that no step waits for them. A checkpoint keeps it, so that a resumed run's first record averages
    what the uninterrupted run's did."""

    step: int = 0  # optimizer steps taken
    epoch: int = 0
    batch_in_epoch: int = 0  # micro-batches of this epoch run
    micro: int = 0  # micro-batches run in all: each one's dropout is drawn from (seed, micro, process)
    best: float = None  # the best validation value of the objective's selection metric so far
    window: list = field(default_factory=list)
    clock: tuple = (0, 0.0)  # (step, time) of the last log record, for the steps per second between records

    def __post_init__(self):
        self.clock = (self.step, time.perf_counter())

    def record(self, loss, logs):
        """A micro-batch's loss and log values, for the log record of the step it counts towards."""
        self.window.append((self.step + 1, loss.detach(), logs))

    def logged(self):
        """A log record was written: the window starts again, the clock from now."""
        self.window, self.clock = [], (self.step, time.perf_counter())

    def steps_per_second(self):
        return (self.step - self.clock[0]) / (time.perf_counter() - self.clock[1])

    def checkpoint(self, window):
        """The state as a checkpoint's JSON holds it, ``window`` as ``[step, loss, logs]`` of numbers."""
        return {"step": self.step, "epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch, "micro": self.micro,
                "best": self.best, "window": window}

    @classmethod
    def resumed(cls, saved, device):
        """The state a checkpoint's JSON ``saved`` holds, its window's numbers as tensors on ``device``."""
        import torch
        window = [(at, torch.tensor(loss, device=device), {k: torch.tensor(v, device=device) for k, v in logs.items()})
                  for at, loss, logs in saved["window"]]
        return cls(saved["step"], saved["epoch"], saved["batch_in_epoch"], saved["micro"], saved["best"], window)
