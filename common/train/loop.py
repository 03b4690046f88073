"""The one training loop, on Hugging Face Accelerate, that every objective uses.

Mixed precision and the number of processes come from ``accelerate config`` / ``accelerate launch``. Data order
is a permutation drawn from (seed, epoch) (optionally length-bucketed, from the same seed), dropout noise is
reseeded from (seed, micro-step, process) before each forward, and objectives draw any per-example randomness from
(seed, epoch, example), so a run resumed from a checkpoint computes exactly what the uninterrupted run would have.
The module trained is whatever the objective built: encoder, heads and loss buffers are optimised, checkpointed
and resumed together.
"""

import contextlib
import json
import math
import os
import re
import shutil
import signal
import time
from dataclasses import dataclass

import torch
from safetensors import SafetensorError
from torch.utils.data import DataLoader
from tqdm import tqdm

from common import folders, io
from common.io import InputError, Preempted
from common.folders import LOCK, STAGING
from common.train.samplers import BucketBatchSampler, EpochSampler

STATE = "trainer_state.json"
RUN_FILE = "run.json"  # marks a run folder as this project's, with the identity of the run that owns it
# what a run writes besides RUN_FILE
WRITTEN = ("model", "checkpoints", "log.jsonl", "curves.png", "trackers", "manifest.json")
EPOCH_MODEL = re.compile(r"epoch_\d+")  # --save-epochs: the model at the end of epoch K
# what saving a model or checkpoint raises on a full disk: torch's RuntimeError, safetensors' own error (no OSError)
SAVE_ERRORS = (OSError, RuntimeError, SafetensorError)


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


def checkpoints(run_dir):
    """Complete checkpoints (their state file is written last), oldest first."""
    root = os.path.join(run_dir, "checkpoints")
    found = []
    if os.path.isdir(root):
        for name in os.listdir(root):
            m = re.fullmatch(r"step_(\d+)", name)
            if m and os.path.exists(os.path.join(root, name, STATE)):
                found.append((int(m.group(1)), os.path.join(root, name)))
    return [path for _, path in sorted(found)]


def _read_state(path):
    """A checkpoint's state file, its fields checked (a ValueError says what is wrong)."""
    with open(path, encoding="utf-8") as f:
        state = json.load(f)
    if not isinstance(state, dict) or not isinstance(state.get("identity"), dict) or not all(
            isinstance(state.get(k), int) and state[k] >= 0 for k in ("step", "epoch", "batch_in_epoch", "log_lines")):
        raise ValueError(f"{STATE} lacks a field or holds a wrong value")
    return state


def read_log(path, keep=None):
    """The records of a run's log.jsonl (the first ``keep``: the lines after them, which a killed run may have
    left half-written, are not read); a line that is not a JSON object with a step is one line naming it."""
    records = []
    with io.open_input(path) as f:
        try:
            for lineno, line in enumerate(f, 1):
                if keep is not None and len(records) >= keep:
                    break
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    record = None
                if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                    raise InputError(f"{path}:{lineno}: not a record of this run's log (damaged?); remove the "
                                     "line, or train again into another --out")
                records.append(record)
        except UnicodeDecodeError:
            raise InputError(f"{path}:{len(records) + 1}: not UTF-8 text (damaged?); train again into another "
                             "--out") from None
    return records


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
    """Trains ``model`` (what ``objective.build()`` returned) on the objective's rows with ``accelerator``."""

    def __init__(self, cfg, objective, model, accelerator, run_dir, identity, tracked=False, overwrite=False):
        self.cfg, self.objective, self.run_dir, self.accelerator = cfg, objective, run_dir, accelerator
        self.overwrite = overwrite  # start afresh: what an earlier run wrote in run_dir is removed first
        self.tracked = tracked  # the accelerator has trackers: each log record goes to them too
        # the data each process sees depends on their number: a checkpoint resumes only with the same count
        self.identity = {**identity, "processes": accelerator.num_processes}
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
        self.step, self.epoch, self.batch_in_epoch, self.best, self.log_lines = 0, 0, 0, None, 0
        self.validated_step = None
        self.lock = None

    # -- state ------------------------------------------------------------------------------------------------

    def _claim(self):
        """The run folder is this run's: a new or empty folder, or one with RUN_FILE, locked for the run (a second
        run on it is refused). A finished run (its manifest.json) is refused unless ``overwrite`` (``run.finished``
        has told the same settings' rerun that it is done). Without checkpoints to resume from, or with
        ``overwrite``, what an earlier run wrote there is removed (a run killed before its first checkpoint leaves a
        log that would otherwise get its steps twice), and nothing else; with checkpoints, ``_resume`` checks their
        settings. Private folders a killed run left are removed. The folder is made and locked as every output
        folder is (``folders.own_folder``); nothing is written through a symbolic link in it."""
        own = os.path.join(self.run_dir, RUN_FILE)
        if os.path.exists(self.run_dir) and not os.path.isdir(self.run_dir):
            raise InputError(f"{self.run_dir}: --out is a file, not a run folder")
        # the main process may be claiming the folder meanwhile: its lock and private folders are no reason
        if os.path.isdir(self.run_dir) and not os.path.exists(own) and \
                [n for n in os.listdir(self.run_dir) if n != LOCK and not n.startswith(STAGING)]:
            raise InputError(f"{self.run_dir}: not empty and not a run folder of this project (no {RUN_FILE}); "
                             "use another --out")
        if not self.accelerator.is_main_process:
            return
        self.lock = folders.own_folder(self.run_dir)
        if not self.overwrite and os.path.exists(os.path.join(self.run_dir, "manifest.json")):
            self.release()  # finished while this run loaded its model
            raise folders.finished_error(self.run_dir, "training run")
        root = os.path.join(self.run_dir, "checkpoints")
        inside = [os.path.join(self.run_dir, name) for name in WRITTEN + (RUN_FILE,)]
        inside += [os.path.join(root, name) for name in os.listdir(root) if re.fullmatch(r"step_\d+", name)] \
            if os.path.isdir(root) and not os.path.islink(root) else []
        for path in inside:
            if os.path.islink(path):
                raise InputError(f"{path}: a symbolic link in the run folder; remove it (a run never writes "
                                 "through one)")
        leftovers = [n for n in os.listdir(self.run_dir) if n.startswith(STAGING)]  # of a killed run
        leftovers += [os.path.join("checkpoints", n) for n in os.listdir(root) if n.startswith(STAGING)] \
            if os.path.isdir(root) else []
        if self.overwrite or not checkpoints(self.run_dir):
            leftovers += list(WRITTEN) + [n for n in os.listdir(self.run_dir) if EPOCH_MODEL.fullmatch(n)]
        for name in leftovers:
            folders.remove_entry(os.path.join(self.run_dir, name))
        folders.write_json(own, {"identity": self.identity})

    def _resume(self):
        found = checkpoints(self.run_dir)
        if not found:
            return
        for path in reversed(found):  # a checkpoint damaged after it was written falls back to the one before
            try:
                state = _read_state(os.path.join(path, STATE))
            except (OSError, ValueError) as e:
                self.accelerator.print(f"note: checkpoint {path} cannot be read ({e}); trying the one before")
                continue
            if state["identity"] != self.identity:
                changed = sorted(k for k in set(state["identity"]) | set(self.identity)
                                 if state["identity"].get(k) != self.identity.get(k))
                raise InputError(f"{self.run_dir}: its checkpoints come from a run with other settings "
                                 f"({', '.join(changed)}); use another --out or remove {path}")
            try:
                self.accelerator.load_state(path)
                break
            except Exception as e:  # noqa: BLE001 (any unreadable file: the previous checkpoint is tried next)
                self.accelerator.print(f"note: checkpoint {path} cannot be read ({type(e).__name__}: "
                                       f"{str(e)[:200]}); trying the one before")
        else:
            raise InputError(f"{self.run_dir}: no checkpoint can be read; remove "
                             f"{os.path.join(self.run_dir, 'checkpoints')} to start again")
        self.step, self.epoch, self.batch_in_epoch = state["step"], state["epoch"], state["batch_in_epoch"]
        self.best = state.get("best")
        self.log_lines = state["log_lines"]
        self._trim_log()  # a damaged log is refused here, before any step
        self.accelerator.print(f"resuming from {path} (step {self.step} of {self.total_steps})")

    def _save_checkpoint(self):
        acc = self.accelerator
        root = os.path.join(self.run_dir, "checkpoints")
        final = os.path.join(root, f"step_{self.step}")
        # every process writes its part into one private folder, made fresh by the main process, then moved into
        # place whole: a checkpoint is complete or absent
        tmp = os.path.join(root, f"{STAGING}step_{self.step}")
        try:
            if acc.is_main_process:
                os.makedirs(root, exist_ok=True)
                folders.fresh_dir(tmp)
            acc.wait_for_everyone()
            acc.save_state(tmp)
            acc.wait_for_everyone()
            if acc.is_main_process:
                with folders.create(os.path.join(tmp, STATE)) as f:
                    json.dump({"step": self.step, "epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch,
                               "best": self.best, "log_lines": self.log_lines, "identity": self.identity}, f,
                              indent=1)
                folders.put(tmp, final)
                for old in checkpoints(self.run_dir)[:-self.cfg.keep] if self.cfg.keep > 0 else []:
                    shutil.rmtree(old, ignore_errors=True)
        except SAVE_ERRORS as e:
            error = folders.saving_error(self.run_dir, e, tmp, f"checkpoint step_{self.step} was not saved, the earlier "
                                    "ones are kept")
            shutil.rmtree(tmp, ignore_errors=True)
            if error is None:
                raise
            raise error from None
        acc.wait_for_everyone()

    def _log(self, record):
        self.log_lines += 1
        if self.accelerator.is_main_process:
            try:
                folders.append_line(os.path.join(self.run_dir, "log.jsonl"), json.dumps(record) + "\n")
            except OSError as e:
                raise folders.write_error(self.run_dir, e) from None
        if self.tracked:
            self.accelerator.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])

    def _draw_curves(self):
        """RUN/curves.png: training loss, learning rate and validation metrics against the step, from log.jsonl."""
        from common.eval.figures import training_curves
        records = read_log(os.path.join(self.run_dir, "log.jsonl"))
        with folders.writing(self.run_dir, "curves.png") as staged:
            training_curves(staged, records)

    def _trim_log(self):
        """Drop log lines written after the checkpoint a run resumes from (they will be written again)."""
        path = os.path.join(self.run_dir, "log.jsonl")
        if not self.accelerator.is_main_process or not os.path.exists(path):
            return
        kept = read_log(path, self.log_lines)
        with folders.writing(self.run_dir, "log.jsonl") as staged, folders.create(staged) as f:
            f.writelines(json.dumps(record) + "\n" for record in kept)

    def _save_model(self, name="model"):
        acc = self.accelerator
        acc.wait_for_everyone()
        if acc.is_main_process:
            try:
                self.objective.save(acc.unwrap_model(self.model), os.path.join(self.run_dir, name))
            except SAVE_ERRORS as e:
                error = folders.saving_error(self.run_dir, e, left=f"RUN/{name} was not saved")
                if error is None:
                    raise
                raise error from None
        acc.wait_for_everyone()

    # -- loop -------------------------------------------------------------------------------------------------

    def _validate(self):
        if not len(self.objective.val_rows) or self.validated_step == self.step:
            return  # an epoch's end or --max-steps may fall on an --eval-every step: validate once
        self.validated_step = self.step
        self.model.eval()
        metrics = self.objective.validate(self.model, self.val_dl, self.accelerator)
        self.model.train()
        record = {"step": self.step, "epoch": round(self.step / self.steps_per_epoch, 4), **metrics}
        self._log(record)
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
            found = checkpoints(self.run_dir)
            kept = f"the last good checkpoint is {found[-1]}" if found else "no checkpoint was written"
            local = losses[~torch.isfinite(losses)]
            what = f"training loss {local[0].item()}" if len(local) else "the training loss of another process"
            raise InputError(f"step {self.step + 1}: {what}, not finite; stopped, the model not saved ({kept})")

    def release(self):
        """Unlock the run folder (after the run's last file)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def _stop_requested(self, stop):
        if self.accelerator.num_processes == 1:
            return stop.requested
        flag = torch.tensor(float(stop.requested), device=self.accelerator.device)  # every process stops together
        return self.accelerator.reduce(flag, reduction="sum").item() > 0

    def train(self):
        cfg, acc = self.cfg, self.accelerator
        self._claim()
        acc.wait_for_everyone()
        acc.print(precision_line(acc))
        acc.print(f"effective batch {cfg.batch_size * acc.num_processes * cfg.grad_accum} = {cfg.batch_size} per "
                  f"process × {acc.num_processes} processes × {cfg.grad_accum} accumulation; {self.total_steps} steps")
        self._resume()
        if self.tracked:
            acc.init_trackers("docembed", config={k: v for k, v in self.identity.items()
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
                        self._log({"step": self.step, "epoch": round(self.step / self.steps_per_epoch, 4),
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
                                  f"{os.path.join(self.run_dir, 'checkpoints')}; run the same command to resume")
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
        if cfg.checkpoint_every and not os.path.isdir(os.path.join(self.run_dir, "checkpoints",
                                                                   f"step_{self.step}")):
            self._save_checkpoint()
        if not self.objective.selection or self.best is None:
            self._save_model()
        if acc.is_main_process:
            self._draw_curves()
        acc.end_training()
        return self.best

