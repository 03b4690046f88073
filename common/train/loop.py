"""The one training loop, on Hugging Face Accelerate, that every objective uses.

Mixed precision and the number of processes come from ``accelerate config`` / ``accelerate launch``. Data order
is a permutation drawn from (seed, epoch) (optionally length-bucketed, from the same seed), dropout noise is
reseeded from (seed, micro-step, process) before each forward, and objectives draw any per-example randomness from
(seed, epoch, example), so a run resumed from a checkpoint computes exactly what the uninterrupted run would have.
The module trained is whatever the objective built: encoder, heads and loss buffers are optimised, checkpointed
and resumed together. Where a run keeps its checkpoints, log and models is its ``RunFolder``
(``common/train/run_folder.py``); the loop decides when.
"""

import contextlib
import math
import os
import signal
import time
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from common.io import InputError, Preempted
from common.train.samplers import BucketBatchSampler, EpochSampler


@dataclass
class TrainConfig:
    lr: float
    weight_decay: float
    warmup: float  # < 1: share of all optimizer steps; >= 1: a number of steps
    schedule: str  # transformers' scheduler name: "linear" or "cosine" (both after the warm-up)
    epochs: int
    max_steps: int  # > 0: stop after this many optimizer steps (the schedule spans them)
    batch_size: int
    grad_accum: int
    clip: float
    seed: int
    eval_every: int
    checkpoint_every: int
    keep: int
    log_every: int
    drop_last: bool = False  # in-batch-negative and batch-statistics losses need full batches
    length_buckets: int = 0  # > 0: batches of similar length, sorted within windows of this many batches
    save_epochs: bool = False  # also save the model at each epoch's end, as RUN/epoch_K


def precision_line(accelerator):
    """The precision a run trains under, as Accelerate resolved it (``accelerate launch --mixed_precision``,
    ``accelerate config`` or ACCELERATE_MIXED_PRECISION), and the device: one line for the log's start."""
    device = accelerator.device
    where = f"{device}" + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
    mode = accelerator.mixed_precision
    if mode == "no":
        return f"precision: fp32 on {where}"
    scaling = ", dynamic loss scaling" if mode == "fp16" else ""
    return (f"precision: {mode} mixed precision on {where} (autocast{scaling}; weights, optimizer state, pooled "
            "vectors and losses in float32)")


def backward(accelerator, model, objective, batch):
    """The micro-batch's mean loss, back-propagated; returns it detached. A batch that ``Objective.collate_train``
    cut into parts runs forward and backward one part at a time, each part's loss summed and divided by the whole
    batch's example count: the gradient of the batch mean, with the activations of one part alive at a time (a
    memory bound, not a speed-up: parts lose the batch's shared documents). Under DDP only the last part
    synchronises."""
    parts = batch.get("parts") if isinstance(batch, dict) else None
    if not parts:
        loss = objective.losses(model, batch).mean()
        accelerator.backward(loss)
        return loss.detach()
    total, examples = 0.0, sum(batch["sizes"])
    for n, part in enumerate(parts):
        with accelerator.no_sync(model) if n < len(parts) - 1 else contextlib.nullcontext():
            loss = objective.losses(model, part).sum() / examples
            accelerator.backward(loss)
        total = total + loss.detach()
    return total


def parameter_groups(model, weight_decay):
    """AdamW groups: no weight decay on biases and LayerNorm weights (BERT's recipe, as SPECTER used)."""
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
    return int(round(warmup * total)) if warmup < 1 else int(warmup)


class _Stop:
    """SIGTERM (what Slurm sends before preemption) asks the loop to checkpoint and exit at the next step."""

    def __init__(self):
        self.requested = False
        self._previous = signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        self.requested = True

    def restore(self):
        signal.signal(signal.SIGTERM, self._previous)


class Trainer:
    """Trains ``model`` (what ``objective.build()`` returned) on the objective's rows with ``accelerator``, into the
    run folder ``folder`` (a ``RunFolder``)."""

    def __init__(self, cfg, objective, model, accelerator, folder):
        self.cfg, self.objective, self.folder, self.accelerator = cfg, objective, folder, accelerator
        rows = objective.train_rows
        # On a GPU, batches are collated into pinned host memory and copied without blocking, so that the copy of a
        # batch overlaps the kernels still queued; a CPU run has nothing to copy and keeps the default
        pin = accelerator.device.type == "cuda"
        if pin:
            accelerator.dataloader_config.non_blocking = True
        if cfg.length_buckets > 0:
            lengths = objective.train_lengths()
            if lengths is None:
                raise InputError(f"--length-buckets: the {objective.name} objective has no lengths to bucket by")
            self.sampler = BucketBatchSampler(lengths, cfg.batch_size, cfg.length_buckets, cfg.seed, cfg.drop_last)
            train_dl = DataLoader(rows, batch_sampler=self.sampler, collate_fn=objective.collate_train,
                                  pin_memory=pin)
        else:
            self.sampler = EpochSampler(len(rows), cfg.seed)
            train_dl = DataLoader(rows, batch_size=cfg.batch_size, sampler=self.sampler, drop_last=cfg.drop_last,
                                  collate_fn=objective.collate_train, pin_memory=pin)
        if not len(train_dl):
            raise InputError(f"{len(rows)} training rows make no full batch of {cfg.batch_size}")
        val_dl = DataLoader(objective.val_rows, batch_size=cfg.batch_size, shuffle=False,
                            collate_fn=objective.collate, pin_memory=pin)
        # the fused kernel updates every parameter in one pass (CPU and GPU): a quarter of the foreach one's time
        optimizer = torch.optim.AdamW(parameter_groups(model, cfg.weight_decay), lr=cfg.lr, fused=True)
        acc = accelerator
        self.model, self.optimizer, self.train_dl, self.val_dl = acc.prepare(model, optimizer, train_dl, val_dl)
        # step counts after prepare: on several processes each dataloader yields fewer batches
        self.steps_per_epoch = math.ceil(len(self.train_dl) / cfg.grad_accum)
        self.total_steps = cfg.epochs * self.steps_per_epoch
        if cfg.max_steps > 0:
            self.total_steps = min(self.total_steps, cfg.max_steps)
        self.warmup = warmup_steps(cfg.warmup, self.total_steps)
        from transformers import get_scheduler
        # the prepared scheduler steps once per process per optimizer step
        scheduler = get_scheduler(cfg.schedule, self.optimizer, num_warmup_steps=self.warmup * acc.num_processes,
                                  num_training_steps=self.total_steps * acc.num_processes)
        self.scheduler = acc.prepare(scheduler)
        self.step, self.epoch, self.batch_in_epoch, self.best = 0, 0, 0, None
        self.validated_step = None

    def _save_checkpoint(self):
        self.folder.save_checkpoint({"step": self.step, "epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch,
                                     "best": self.best}, self.cfg.keep)

    def _save_model(self, name="model"):
        folder, model = self.folder, self.accelerator.unwrap_model(self.model)
        folder.save_model(name, lambda path: self.objective.save(model, path, folder.identity, folder.log))

    # -- loop -------------------------------------------------------------------------------------------------

    def _validate(self):
        if not len(self.objective.val_rows) or self.validated_step == self.step:
            return  # an epoch's end or --max-steps may fall on an --eval-every step: validate once
        self.validated_step = self.step
        self.model.eval()
        metrics = self.objective.validate(self.model, self.val_dl, self.accelerator)
        self.model.train()
        record = {"step": self.step, "epoch": round(self.step / self.steps_per_epoch, 4), **metrics}
        self.folder.write_log(record)
        self.accelerator.print(" ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                        for k, v in record.items()))
        key = self.objective.selection
        if key and key in metrics and (self.best is None or metrics[key] > self.best):
            self.best = metrics[key]
            self._save_model()

    def _check_finite(self, losses):
        """Stop before a non-finite loss reaches the weights: one NaN gradient makes every weight NaN, and the
        checkpoints already written hold the last good state. ``losses``: the micro-batch losses of the optimizer
        step about to be taken, checked once per step (one host sync, not one per micro-batch)."""
        losses = torch.stack(losses)
        bad = (~torch.isfinite(losses)).any().float()
        if self.accelerator.num_processes > 1:  # every process stops together
            bad = self.accelerator.reduce(bad, reduction="sum")
        if bad.item():
            found = self.folder.checkpoints()
            kept = f"the last good checkpoint is {found[-1]}" if found else "no checkpoint was written"
            local = losses[~torch.isfinite(losses)]
            what = f"training loss {local[0].item()}" if len(local) else "the training loss of another process"
            raise InputError(f"step {self.step + 1}: {what}, not finite; stopped, the model not saved ({kept})")

    def _stop_requested(self, stop):
        if self.accelerator.num_processes == 1:
            return stop.requested
        flag = torch.tensor(float(stop.requested), device=self.accelerator.device)  # every process stops together
        return self.accelerator.reduce(flag, reduction="sum").item() > 0

    def train(self):
        cfg, acc = self.cfg, self.accelerator
        folder = self.folder
        folder.claim()
        acc.wait_for_everyone()
        acc.print(precision_line(acc))
        acc.print(f"effective batch {cfg.batch_size * acc.num_processes * cfg.grad_accum} = {cfg.batch_size} per "
                  f"process × {acc.num_processes} processes × {cfg.grad_accum} accumulation; {self.total_steps} steps")
        state = folder.resume()
        if state is not None:
            self.step, self.epoch, self.batch_in_epoch = state["step"], state["epoch"], state["batch_in_epoch"]
            self.best = state.get("best")
            acc.print(f"resuming from {state['path']} (step {self.step} of {self.total_steps})")
        if folder.tracked:
            acc.init_trackers("docembed", config={k: v for k, v in folder.identity.items()
                                                  if isinstance(v, (int, float, str, bool))})
        stop = _Stop()
        bar = tqdm(total=self.total_steps, initial=self.step, desc="train", unit=" steps",
                   disable=not acc.is_main_process, mininterval=1.0)
        self.model.train()
        window, started = [], time.perf_counter()
        micro = self.step * cfg.grad_accum
        pending = []  # this optimizer step's micro-batch losses
        try:
            while self.epoch < cfg.epochs and self.step < self.total_steps:
                self.sampler.epoch = self.epoch
                self.objective.set_epoch(self.epoch)
                loader = acc.skip_first_batches(self.train_dl, self.batch_in_epoch) if self.batch_in_epoch \
                    else self.train_dl
                for batch in loader:
                    torch.manual_seed((cfg.seed * 1_000_003 + micro) * acc.num_processes + acc.process_index)
                    micro += 1
                    self.batch_in_epoch += 1
                    with acc.accumulate(self.model):
                        loss = backward(acc, self.model, self.objective, batch)
                        pending.append(loss)
                        if acc.sync_gradients:
                            self._check_finite(pending)
                            pending = []
                        if acc.sync_gradients and cfg.clip > 0:
                            acc.clip_grad_norm_(self.model.parameters(), cfg.clip)
                        self.optimizer.step()
                        self.scheduler.step()
                        self.optimizer.zero_grad()
                    window.append(loss.detach())
                    if not acc.sync_gradients:
                        continue
                    self.step += 1
                    bar.update(1)
                    if self.step % cfg.log_every == 0 or self.step == self.total_steps:
                        mean = acc.reduce(torch.stack(window).mean(), reduction="mean").item()
                        rate = len(window) / cfg.grad_accum / (time.perf_counter() - started)
                        folder.write_log({"step": self.step, "epoch": round(self.step / self.steps_per_epoch, 4),
                                   "loss": mean, **self.objective.log_metrics(acc),
                                   "lr": self.scheduler.get_last_lr()[0], "steps_per_s": rate})
                        bar.set_postfix(loss=f"{mean:.4f}")
                        window, started = [], time.perf_counter()
                    if cfg.eval_every and self.step % cfg.eval_every == 0:
                        self._validate()
                    if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0:
                        self._save_checkpoint()
                    if self.step >= self.total_steps:
                        break
                    if self._stop_requested(stop):
                        self._save_checkpoint()
                        bar.close()
                        acc.print(f"stopped by SIGTERM at step {self.step}; checkpoint saved in "
                                  f"{os.path.join(folder.path, 'checkpoints')}; run the same command to resume")
                        acc.end_training()
                        raise Preempted(self.step)
                if self.step >= self.total_steps and self.batch_in_epoch < len(self.train_dl):
                    self._validate()  # stopped by --max-steps inside an epoch
                    break
                self.epoch += 1
                self.batch_in_epoch = 0
                self._validate()
                if cfg.save_epochs:
                    self._save_model(f"epoch_{self.epoch}")
        finally:
            stop.restore()
            bar.close()
        if cfg.checkpoint_every and not folder.has_checkpoint(self.step):
            self._save_checkpoint()
        if not self.objective.selection or self.best is None:
            self._save_model()
        if acc.is_main_process:
            folder.draw_curves()
        acc.end_training()
        return self.best

