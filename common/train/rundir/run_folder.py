"""The run folder of one training run (``--out``), seen from one process: claimed and locked for the run, resumed
from its newest readable checkpoint, checkpointed, its log appended to, the models saved into it, its curves drawn,
its manifest written, and released after its last file. Only the main process writes; every process loads.

What it holds, by name: ``run_entries.py``; whether it holds a finished run or one to resume: ``run_status.py``; a
run that replaces a finished one: ``replacement.py``.
"""

import contextlib
import json
import os
import shutil

from safetensors import SafetensorError

from common.outdir import folders, provenance, write_errors
from common.outdir.folders import STAGING
from common.io import InputError
from common.train.rundir import run_status
from common.train.rundir.replacement import move_into_place, work_folder
from common.train.rundir.run_entries import NEXT, RUN_FILE, STATE, checkpoints, finished_in, run_files
from common.train.rundir.run_identity import input_paths, run_identity
from common.train.rundir.run_log import log_line, read_log
from common.train.state import TrainState
from common.outdir.written import remove_entry, remove_written

# what saving a model or checkpoint raises on a full disk: torch's RuntimeError, safetensors' own error (no OSError)
SAVE_ERRORS = (OSError, RuntimeError, SafetensorError)


class RunFolder:
    """The folder ``args.out`` of the run of ``args``, seen from one process of ``accelerator``.

    ``log`` holds the records of ``log.jsonl`` in the main process, those a resumed run kept included: the model
    card of each saved model quotes them."""

    def __init__(self, args, accelerator, tracked=False):
        self.args, self.out, self.accelerator, overwrite = args, args.out, accelerator, args.overwrite
        self.path = work_folder(args)  # --out, or --out/.next-run for a run that replaces a finished one
        self.identity = None  # known once the model is loaded (``start``)
        self.paths = None  # where the inputs the identity holds by content are (``run_identity.input_paths``)
        self.overwrite = overwrite  # start afresh: what an earlier run wrote here is removed first
        self.tracked = tracked  # the accelerator has trackers: each log record goes to them too
        self.log = []
        self.log_lines = 0  # records written, in every process (a checkpoint records the count)
        self.lock = None
        self.made = False  # claim made --out: one this run leaves empty is removed on release

    def claim(self):
        """The folder is this run's: a new or empty folder, or one with RUN_FILE, locked for the run (a second run
        on it is refused) before any work writes into it (the masked LM's token cache). A finished run (its
        manifest.json) is refused unless ``overwrite`` (``finished`` has told the same settings' rerun that it is
        done); with ``overwrite`` this run trains in ``.next-run`` inside it and replaces the finished run only when
        it is committed (``commit``). Private folders a killed run left are removed. The folder is made and locked as
        every output folder is (``folders.own_folder``); a symbolic link where a run moves, writes or deletes is
        refused before anything is (``run_status.check_run_folder``). What an earlier run wrote is removed once this
        run's settings are known (``start``)."""
        out = self.out
        run_status.check_run_folder(out)
        if not self.accelerator.is_main_process:
            return
        self.made = not os.path.lexists(out)
        self.lock = folders.own_folder(out)
        move_into_place(out)
        if not self.overwrite and os.path.exists(os.path.join(out, "manifest.json")):
            self.release()  # finished while this run started
            raise folders.finished_error(out, "training run")
        if (self.path != out) != finished_in(out):
            self.release()
            raise InputError(f"{out}: changed by another run while this one started; run the command again")
        for folder in dict.fromkeys((out, self.path)):
            if folder != out:
                folders.make_folder(folder)
            root = os.path.join(folder, "checkpoints")
            leftovers = [n for n in os.listdir(folder) if n.startswith(STAGING)]  # of a killed run
            leftovers += [os.path.join("checkpoints", n) for n in os.listdir(root) if n.startswith(STAGING)] \
                if os.path.isdir(root) else []
            for name in leftovers:
                remove_entry(os.path.join(folder, name))
        if self.path == out:
            remove_entry(os.path.join(out, NEXT))  # a replacement with nothing left to replace

    def start(self, objective):
        """This run in its claimed folder once ``objective`` has loaded its model: its identity (``run_identity``
        and the settings the model was loaded with; the data each process sees depends on their number, so a
        checkpoint resumes only with the same count) written as RUN_FILE; without checkpoints to resume from, or
        with ``overwrite`` and checkpoints of other settings, what an earlier run wrote there removed by name
        (``run_files``: a run killed before its first checkpoint leaves a log that would otherwise get its steps
        twice), and nothing else; with checkpoints, ``resume`` checks their settings (``overwrite`` resumes from
        this run's own: they train to the same weights). Returns the loop's state: ``resume``'s, or a fresh one."""
        self.identity = {**run_identity(self.args, self.accelerator.num_processes),
                         "max_length": objective.max_length, "pooling": objective.encoder.pooling,
                         "normalize": objective.encoder.normalize}
        self.paths = input_paths(self.args)
        if self.accelerator.is_main_process:
            if not checkpoints(self.path) or (self.overwrite and not run_status.own_checkpoints(self.path,
                                                                                               self.identity)):
                remove_written(self.path, run_files(self.path))
            folders.write_json(os.path.join(self.path, RUN_FILE), {"identity": self.identity, "paths": self.paths})
        self.accelerator.wait_for_everyone()
        return self.resume() or TrainState()

    def commit(self, script, started, counts):
        """The run's last file, in the main process: its manifest (``provenance.manifest``: the command, its
        identity, the data's files, ``counts``, the precision and device that ran) with ``files``, what the run
        wrote by name (``run_files``), as manifest.json; the run is finished. A run that replaces a finished one
        writes it in ``.next-run`` and is then moved into place, the previous run's files removed by name
        (``complete_replacement``); killed meanwhile, the next command on ``--out`` finishes the move."""
        args, acc = self.args, self.accelerator
        inputs = [os.path.join(args.data, name) for name in sorted(os.listdir(args.data)) if name.endswith(".jsonl")]
        manifest = provenance.manifest(script, args, started, inputs=inputs, counts=counts, seed=args.seed,
                                       identity=run_identity(args, acc.num_processes), paths=input_paths(args),
                                       precision=acc.mixed_precision, device=acc.device.type)
        folders.write_json(os.path.join(self.path, "manifest.json"), {**manifest, "files": run_files(self.path)})
        if self.path != self.out:
            move_into_place(self.out)

    def checkpoints(self):
        return checkpoints(self.path)

    def resume(self):
        """Load the newest readable checkpoint into every process's Accelerate state and keep the log records
        written up to it; returns the loop's state it holds (``TrainState``), or None where there is no checkpoint.
        One of a run with other settings is refused."""
        found = self.checkpoints()
        if not found:
            return None
        say = self.accelerator.on_main_process(print)
        for path in reversed(found):  # a checkpoint damaged after it was written falls back to the one before
            try:
                state = run_status.resumable_state(self.path, path, self.identity, self.paths)
            except ValueError as e:
                say(f"note: checkpoint {path} cannot be read ({e}); trying the one before")
                continue
            try:
                self.accelerator.load_state(path)
                break
            except Exception as e:  # noqa: BLE001 (any unreadable file: the previous checkpoint is tried next)
                say(f"note: checkpoint {path} cannot be read ({type(e).__name__}: {str(e)[:200]}); trying the one "
                    "before")
        else:
            raise InputError(f"{self.path}: no checkpoint can be read; remove "
                             f"{os.path.join(self.path, 'checkpoints')} to start again")
        self.log_lines = state["log_lines"]
        self._trim_log()  # a damaged log is refused here, before any step
        return TrainState.resumed(state, self.accelerator.device)

    def checkpoint_path(self, step):
        return os.path.join(self.path, "checkpoints", f"step_{step}")

    def save_checkpoint(self, model, state):
        """A checkpoint of the loop's ``state`` as ``checkpoints/step_N`` once its window's losses and ``model``'s
        weights are finite: every process's Accelerate state and the loop's ``TrainState`` whole, its window read
        from the device (``window_state``); the newest ``--keep`` are kept (0: all)."""
        self.check_finite(state, model)
        saved = state.checkpoint(self.window_state(state.window))
        acc, keep, step = self.accelerator, self.args.keep, state.step
        root = os.path.join(self.path, "checkpoints")
        final = self.checkpoint_path(step)
        # every process writes its part into one private folder, made fresh by the main process, then moved into
        # place whole: a checkpoint is complete or absent
        tmp = os.path.join(root, f"{STAGING}step_{step}")
        try:
            if acc.is_main_process:
                os.makedirs(root, exist_ok=True)
                folders.fresh_dir(tmp)
            acc.wait_for_everyone()
            acc.save_state(tmp)
            acc.wait_for_everyone()
            if acc.is_main_process:
                with folders.create(os.path.join(tmp, STATE)) as f:
                    json.dump({**saved, "log_lines": self.log_lines, "identity": self.identity, "paths": self.paths},
                              f, indent=1)
                folders.put(tmp, final)
                for old in self.checkpoints()[:-keep] if keep > 0 else []:
                    shutil.rmtree(old, ignore_errors=True)
        except SAVE_ERRORS as e:
            error = write_errors.saving_error(self.path, e, tmp, f"checkpoint step_{step} was not saved, the earlier "
                                         "ones are kept")
            shutil.rmtree(tmp, ignore_errors=True)
            if error is None:
                raise
            raise error from None
        acc.wait_for_everyone()

    def check_finite(self, state, model=None):
        """Stop at the first non-finite loss of ``state``'s window, or where ``model`` is given at its non-finite
        weights after ``state.step``, in one line naming the step and the last good checkpoint; one read of the
        device for it all. Every process stops together."""
        import torch
        window, step = state.window, state.step
        losses = torch.stack([loss for _, loss, _ in window]) if window else torch.zeros(0)
        losses = losses.to(self.accelerator.device)
        bad = (~torch.isfinite(losses)).to(torch.float32)
        weights = torch.zeros((), device=losses.device)
        if model is not None:
            weights = torch.stack([(~torch.isfinite(p.detach())).any() for p in model.parameters()]).any().float()
        flags = torch.cat([bad.max(0, keepdim=True).values if len(bad) else bad.new_zeros(1), weights[None]])
        if self.accelerator.num_processes > 1:
            flags = self.accelerator.reduce(flags, reduction="sum")
        found = flags.tolist()
        if not any(found):
            return
        kept = self.checkpoints()
        kept = f"the last good checkpoint is {kept[-1]}" if kept else "no checkpoint was written"
        local = [(at, value) for (at, _, _), value, wrong in zip(window, losses.tolist(), bad.tolist()) if wrong]
        if local:
            what = f"step {local[0][0]}: training loss {local[0][1]}, not finite"
        elif found[0]:
            what = f"step {window[0][0] if window else step}: the training loss of another process, not finite"
        else:
            what = f"step {step}: the weights are not finite (a learning rate or weight decay too large?)"
        raise InputError(f"{what}; stopped, the model not saved ({kept})")

    def window_means(self, state):
        """What a log record says of ``state``'s window once its losses are checked finite: the mean loss and the
        mean of each of the objective's log values, over its micro-batches and every process."""
        import torch
        self.check_finite(state)
        window = state.window
        means = {"loss": self.accelerator.reduce(torch.stack([loss for _, loss, _ in window]).mean(),
                                                 reduction="mean").item()}
        names = list(window[0][2])
        if names:
            logs = torch.stack([torch.stack([logs[name] for name in names]) for _, _, logs in window]).mean(0)
            means.update(zip(names, self.accelerator.reduce(logs, reduction="mean").tolist()))
        return means

    def window_state(self, window):
        """``window`` as a checkpoint keeps it: ``[step, loss, logs]`` of each micro-batch, each value the mean over
        the processes (read from the device: a checkpoint is a wait anyway)."""
        if not window:
            return []
        import torch
        names = list(window[0][2])
        values = torch.stack([torch.stack([loss, *(logs[name] for name in names)]) for _, loss, logs in window])
        values = self.accelerator.reduce(values, reduction="mean").tolist()
        return [[at, row[0], dict(zip(names, row[1:]))] for (at, _, _), row in zip(window, values)]

    def has_checkpoint(self, step):
        return os.path.isdir(self.checkpoint_path(step))

    def write_log(self, record):
        """Append ``record`` to log.jsonl (and to the trackers)."""
        self.log_lines += 1
        if self.accelerator.is_main_process:
            self.log.append(record)
            try:
                folders.append_line(os.path.join(self.path, "log.jsonl"), log_line(record))
            except OSError as e:
                raise write_errors.write_error(self.path, e) from None
        if self.tracked:
            self.accelerator.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])

    def _trim_log(self):
        """Drop log lines written after the checkpoint a run resumes from (they will be written again)."""
        path = os.path.join(self.path, "log.jsonl")
        if not self.accelerator.is_main_process or not os.path.exists(path):
            return
        self.log = read_log(path, self.log_lines)
        with folders.writing(self.path, "log.jsonl") as staged, folders.create(staged) as f:
            f.writelines(log_line(record) for record in self.log)

    def save_model(self, name, model, objective, state):
        """RUN/``name``, ``model`` as ``objective`` saves it with its card, written by the main process once the
        losses of ``state``'s window and the weights are finite (a model a NaN reached is never saved); a full disk
        is one line."""
        acc = self.accelerator
        self.check_finite(state, model)
        unwrapped = acc.unwrap_model(model)
        acc.wait_for_everyone()
        if acc.is_main_process:
            try:
                objective.save(unwrapped, os.path.join(self.path, name), self.identity, self.log)
            except SAVE_ERRORS as e:
                error = write_errors.saving_error(self.path, e, left=f"RUN/{name} was not saved")
                if error is None:
                    raise
                raise error from None
        acc.wait_for_everyone()

    def draw_curves(self):
        """RUN/curves.png: training loss, learning rate and validation metrics against the step, from the log."""
        from common.eval.figures import training_curves
        with folders.writing(self.path, "curves.png") as staged:
            training_curves(staged, self.log)

    def release(self):
        """Unlock the folder (after the run's last file). One that this run made and left empty (it stopped before
        writing anything: bad data, a cache that cannot be made) is removed, as though the run had not started."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None
            if self.made:
                with contextlib.suppress(OSError):  # anything in it, another run's lock included: kept
                    os.rmdir(self.out)
