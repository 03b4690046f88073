"""The run folder of one training run (``--out``): claimed and locked for the run, resumed from its newest readable
checkpoint, checkpointed, its log appended to, the models saved into it, and released after its last file.

| entry                 | what                                                                                  |
|-----------------------|---------------------------------------------------------------------------------------|
| ``run.json``          | marks the folder as a run of this project, with the identity of the run that owns it   |
| ``checkpoints/step_N``| Accelerate's state of every process, and ``trainer_state.json`` (written last)          |
| ``log.jsonl``         | one record a line: training records (with ``lr``) and validations                     |
| ``model``, ``epoch_K``| the models the objective saves (``--save-epochs``: the model at each epoch's end)      |
| ``curves.png``        | the log drawn at the run's end                                                        |
| ``trackers``          | what ``--report-to``'s local trackers write                                           |
| ``manifest.json``     | written by ``RunFolder.commit`` after everything else: the run is finished; ``files``    |
|                       | lists what the run wrote, by name                                                     |
| ``cache``             | the masked LM's tokenised texts and learnt vocabulary (``--cache-dir``'s default), kept |
|                       | from run to run                                                                       |
| ``.next-run``         | a run that replaces a finished one (``--overwrite``): a run folder of its own until it  |
|                       | is committed, so that the finished run stays whole until then                         |

Whether an ``--out`` holds a finished run, a run to resume, or nothing of this project's is decided here, from the
run's identity (``run_identity.py``): every flag of the command that changes the result (``RESULT_ARGS`` and the
objective's ``result_args``), the data's path and content (``command_identity``, which a finished run's manifest
records), and,
for a checkpoint, the settings the model was loaded with and the number of processes (``RunFolder.identity``). A
run resumes only from a checkpoint of its own. Only the main process writes; every process loads.

What a run removes is what a run wrote, by name: a finished run's ``files`` (``recorded_files``: read as input, only
names under the entries above), or, for a run that did not finish, the entries above and the files under them
(``run_files``). A file anyone else put in the folder stays, and one in a folder a finished run wrote.
"""

import json
import os
import re
import shutil
import time

from safetensors import SafetensorError

from common import folders, io, provenance, write_errors
from common.folder_lock import LOCK, FolderLock
from common.folders import STAGING
from common.written import entries, remove_entry, remove_written, written_name
from common.io import InputError
from common.train.run_identity import command_identity
from common.train.run_log import LARGEST, log_line, read_log

def finished(args, script):
    """A finished run in ``args.out`` (its manifest.json, the run's last file, is there): its counts where it was
    trained with the settings of this command (``command_identity``), so that the command has nothing to do; else
    an InputError, unless ``--overwrite``. None where ``--out`` holds no finished run of this project. A run that
    replaced a finished one and was killed while moving into place is moved into place first
    (``complete_replacement``). An ``--out`` that is no run folder is refused first (``check_run_folder``), and so
    is one that another run holds (its lock, looked at by the first process), before any work writes into it or
    into ``--cache-dir`` (the masked LM's cache)."""
    check_run_folder(args.out)
    if os.environ.get("RANK", "0") == "0" and os.path.isdir(args.out):
        FolderLock(args.out).acquire().release()
    complete_replacement(args.out)
    if args.overwrite or not all(os.path.isfile(os.path.join(args.out, name)) for name in ("manifest.json",
                                                                                            RUN_FILE)):
        return None
    try:
        manifest = io.read_manifest(args.out)
    except io.InputError:
        raise folders.finished_error(args.out, f"{os.path.basename(script)} run whose manifest.json cannot be "
                                               "read") from None
    what = f"{manifest.get('script') or os.path.basename(script)} run"
    recorded, wanted = manifest.get("identity"), command_identity(args)
    if recorded == wanted:
        return manifest.get("counts") or {}
    if not isinstance(recorded, dict):  # a run of an earlier version, or a manifest edited by hand
        raise folders.finished_error(args.out, f"{what} whose settings its manifest.json does not record")
    changed = sorted(k for k in set(recorded) | set(wanted) if recorded.get(k) != wanted.get(k))
    raise InputError(f"{args.out}: holds a finished {what} with other settings ({', '.join(changed[:8])}"
                     f"{' and more' if len(changed) > 8 else ''}); give --overwrite to train it again (only what "
                     "the run wrote is removed), or another --out")


STATE = "trainer_state.json"
RUN_FILE = "run.json"
# what a run writes besides RUN_FILE
WRITTEN = ("model", "checkpoints", "log.jsonl", "curves.png", "trackers", "manifest.json")
EPOCH_MODEL = re.compile(r"epoch_\d+")  # --save-epochs: the model at the end of epoch K
STEP = re.compile(r"step_\d+")  # a checkpoint in RUN/checkpoints
NEXT = folders.REPLACING  # where a run that replaces a finished one (--overwrite) trains until it is committed
CACHE = "cache"  # the masked LM's cache (--cache-dir's default), kept from run to run: no run's result
# what saving a model or checkpoint raises on a full disk: torch's RuntimeError, safetensors' own error (no OSError)
SAVE_ERRORS = (OSError, RuntimeError, SafetensorError)


def run_entry(name):
    """Whether ``name`` is an entry a run writes in its folder (``WRITTEN``, ``RUN_FILE``, ``epoch_K``)."""
    return name in WRITTEN or name == RUN_FILE or EPOCH_MODEL.fullmatch(name) is not None


def run_files(run_dir):
    """What a run wrote in ``run_dir``, by name, as paths relative to it: ``run.json``, ``log.jsonl`` and
    ``curves.png``, and the files under its model folders, its checkpoints (``checkpoints/step_N``) and
    ``trackers``; a file of another name at the top, or in ``checkpoints`` beside the steps, is not the run's.
    What a finished run records in its manifest (``files``), and what is removed of a run that did not finish."""
    found = []
    for name in sorted(os.listdir(run_dir)) if os.path.isdir(run_dir) else []:
        path = os.path.join(run_dir, name)
        if not run_entry(name) or name == "manifest.json" or os.path.islink(path):
            continue
        if not os.path.isdir(path):
            found.append(name)
        elif name == "checkpoints":
            found += [f"checkpoints/{step}/{rel}" for step in sorted(os.listdir(path)) if STEP.fullmatch(step)
                      and not os.path.islink(os.path.join(path, step))
                      for rel in entries(os.path.join(path, step))]
        else:
            found += [f"{name}/{rel}" for rel in entries(path)]
    return sorted(found)


def recorded_files(run_dir):
    """What the finished run in ``run_dir`` wrote: its manifest's ``files`` where it is a list, read as input (a
    ``written_name`` under a run's entry), else ``run_files``."""
    try:
        listed = io.read_json_or_empty(os.path.join(run_dir, "manifest.json"))
    except InputError:
        listed = {}
    listed = listed.get("files") if isinstance(listed, dict) else None
    if not isinstance(listed, list):
        return run_files(run_dir)
    return [n for n in listed if written_name(n) and run_entry(n.split("/")[0]) and n != "manifest.json"]


def check_run_folder(out):
    """Refuse an ``--out`` that is a file, or a folder that holds something and is not a run folder of this project
    (no ``run.json``); its lock, private folders and cache are no reason (a run may be claiming it meanwhile)."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise InputError(f"{out}: --out is a file, not a run folder")
    if os.path.isdir(out) and not os.path.exists(os.path.join(out, RUN_FILE)) and \
            [n for n in os.listdir(out) if n not in (LOCK, CACHE, NEXT) and not n.startswith(STAGING)]:
        raise InputError(f"{out}: not empty and not a run folder of this project (no {RUN_FILE}); "
                         "use another --out")


def work_folder(args):
    """Where the run of ``args`` trains: ``--out``, or where ``--overwrite`` replaces a finished run there,
    ``--out/.next-run`` (``NEXT``), so that the finished run stays whole until this one is committed
    (``RunFolder.commit``); killed before, the finished run is still there for a command without ``--overwrite``,
    and a rerun with it resumes from the new run's checkpoints."""
    if args.overwrite and _finished_in(args.out):
        return os.path.join(args.out, NEXT)
    return args.out


def _finished_in(out):
    return all(os.path.isfile(os.path.join(out, name)) for name in ("manifest.json", RUN_FILE))


def complete_replacement(out, wait=600):
    """Finish moving into place a run that replaced a finished one (``--out/.next-run/manifest.json`` is there:
    it finished, and was killed while it was being committed): the previous run's files removed by name, the new
    run's moved into place entry by entry, its manifest last. The first process of a launch does it, holding the
    folder's lock; the others wait for it (at most ``wait`` seconds)."""
    pending = os.path.join(out, NEXT, "manifest.json")
    if not os.path.isfile(pending):
        return
    if os.environ.get("RANK", "0") != "0":
        deadline = time.monotonic() + wait
        while os.path.isfile(pending) and time.monotonic() < deadline:
            time.sleep(0.5)
        return
    lock = folders.own_folder(out)
    try:
        _move_into_place(out)
    finally:
        lock.release()


def _move_into_place(out):
    """``complete_replacement``'s work, under the folder's lock; every step can be taken again after a kill."""
    new_dir = os.path.join(out, NEXT)
    pending = os.path.join(new_dir, "manifest.json")
    if not os.path.isfile(pending):
        return
    old = recorded_files(out)
    new = recorded_files(new_dir)
    for name in sorted(os.listdir(new_dir)):
        if not run_entry(name) or name == "manifest.json" or os.path.islink(os.path.join(new_dir, name)):
            continue
        under = name + "/"
        folders.put_written(os.path.join(new_dir, name), os.path.join(out, name),
                            [n[len(under):] for n in old if n.startswith(under)],
                            [n[len(under):] for n in new if n.startswith(under)])
    written = {n.split("/")[0] for n in new}
    remove_written(out, [n for n in old if n.split("/")[0] not in written])
    os.replace(pending, os.path.join(out, "manifest.json"))
    remove_entry(new_dir)


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
    """A checkpoint's state file, its fields checked (a ValueError says what is wrong): the identity an object, the
    counts whole numbers (``true`` is none) from 0 to 2^53, ``best`` a finite number or null."""
    with open(path, encoding="utf-8") as f:
        state = io.loads(f.read())
    if not isinstance(state, dict) or not isinstance(state.get("identity"), dict):
        raise ValueError(f"{STATE} lacks a field or holds a wrong value")
    try:
        for key in ("step", "epoch", "batch_in_epoch", "log_lines"):
            io.number(state.get(key), f"{STATE}: {key}", int, 0, LARGEST)
        if state.get("best") is not None:
            io.number(state["best"], f"{STATE}: best", float)
        # the losses since the last log record (a checkpoint of an earlier version has none)
        window, log_window = state.setdefault("window", []), state.setdefault("log_window", [])
        if not isinstance(window, list) or not all(isinstance(pair, list) and len(pair) == 2 for pair in window):
            raise InputError(f"{STATE}: window is not a list of [step, loss] pairs")
        for at, loss in window:
            io.number(at, f"{STATE}: window's step", int, 0, LARGEST)
            io.number(loss, f"{STATE}: window's loss", float)
        if not isinstance(log_window, list) or not all(isinstance(row, list) for row in log_window):
            raise InputError(f"{STATE}: log_window is not a list of lists of numbers")
        for row in log_window:
            for value in row:
                io.number(value, f"{STATE}: log_window's value", float)
    except InputError as e:
        raise ValueError(str(e)) from None
    return state


class RunFolder:
    """The folder ``args.out`` of the run of ``args`` (with ``objective``, its model built), seen from one process
    of ``accelerator``.

    ``log`` holds the records of ``log.jsonl`` in the main process, those a resumed run kept included: the model
    card of each saved model quotes them."""

    def __init__(self, args, objective, accelerator, tracked=False):
        self.args, self.out, self.accelerator, overwrite = args, args.out, accelerator, args.overwrite
        self.path = work_folder(args)  # --out, or --out/.next-run for a run that replaces a finished one
        # the settings the model was actually loaded with; the data each process sees depends on their number: a
        # checkpoint resumes only with the same count
        self.identity = {**command_identity(args), "max_length": objective.max_length,
                         "pooling": objective.encoder.pooling, "normalize": objective.encoder.normalize,
                         "processes": accelerator.num_processes}
        self.overwrite = overwrite  # start afresh: what an earlier run wrote here is removed first
        self.tracked = tracked  # the accelerator has trackers: each log record goes to them too
        self.log = []
        self.log_lines = 0  # records written, in every process (a checkpoint records the count)
        self.lock = None

    def claim(self):
        """The folder is this run's: a new or empty folder, or one with RUN_FILE, locked for the run (a second run
        on it is refused). A finished run (its manifest.json) is refused unless ``overwrite`` (``finished``
        has told the same settings' rerun that it is done); with ``overwrite`` this run trains in ``.next-run``
        inside it and replaces the finished run only when it is committed (``commit``). Without checkpoints to
        resume from, or with ``overwrite`` and checkpoints of other settings, what an earlier run wrote there is
        removed by name (``run_files``: a run killed before its first checkpoint leaves a log that would otherwise
        get its steps twice), and nothing else; with checkpoints, ``resume`` checks their settings (``overwrite``
        resumes from this run's own: they train to the same weights). Private folders a killed run left are
        removed. The folder is made and locked as every output folder is (``folders.own_folder``); nothing is
        written through a symbolic link in it."""
        out = self.out
        check_run_folder(out)
        if not self.accelerator.is_main_process:
            return
        self.lock = folders.own_folder(out)
        _move_into_place(out)
        if not self.overwrite and os.path.exists(os.path.join(out, "manifest.json")):
            self.release()  # finished while this run loaded its model
            raise folders.finished_error(out, "training run")
        if (self.path != out) != _finished_in(out):
            self.release()
            raise InputError(f"{out}: changed by another run while this one loaded its model; run the command "
                             "again")
        for folder in dict.fromkeys((out, self.path)):
            if folder != out:
                if os.path.islink(folder):
                    raise InputError(f"{folder}: a symbolic link in the run folder; remove it (a run never writes "
                                     "through one)")
                folders.make_folder(folder)
            self._check_links(folder)
            root = os.path.join(folder, "checkpoints")
            leftovers = [n for n in os.listdir(folder) if n.startswith(STAGING)]  # of a killed run
            leftovers += [os.path.join("checkpoints", n) for n in os.listdir(root) if n.startswith(STAGING)] \
                if os.path.isdir(root) else []
            for name in leftovers:
                remove_entry(os.path.join(folder, name))
        if self.path == out:
            remove_entry(os.path.join(out, NEXT))  # a replacement with nothing left to replace
        if not checkpoints(self.path) or (self.overwrite and not self._own_checkpoints()):
            remove_written(self.path, run_files(self.path))
        folders.write_json(os.path.join(self.path, RUN_FILE), {"identity": self.identity})

    @staticmethod
    def _check_links(folder):
        """Refuse a symbolic link at a name a run writes: a run never writes through one."""
        root = os.path.join(folder, "checkpoints")
        inside = [os.path.join(folder, name) for name in WRITTEN + (RUN_FILE,)]
        inside += [os.path.join(root, name) for name in os.listdir(root) if STEP.fullmatch(name)] \
            if os.path.isdir(root) and not os.path.islink(root) else []
        for path in inside:
            if os.path.islink(path):
                raise InputError(f"{path}: a symbolic link in the run folder; remove it (a run never writes "
                                 "through one)")

    def _own_checkpoints(self):
        """Whether the newest checkpoint is one of this run's settings (``overwrite`` resumes from it: a run
        resumed trains to the weights of one that was not stopped)."""
        found = self.checkpoints()
        try:
            return bool(found) and _read_state(os.path.join(found[-1], STATE))["identity"] == self.identity
        except (OSError, ValueError):
            return False

    def commit(self, script, started, counts):
        """The run's last file, in the main process: its manifest (``provenance.manifest``: the command, its
        identity, the data's files, ``counts``, the precision and device that ran) with ``files``, what the run
        wrote by name (``run_files``), as manifest.json; the run is finished. A run that replaces a finished one
        writes it in ``.next-run`` and is then moved into place, the previous run's files removed by name
        (``complete_replacement``); killed meanwhile, the next command on ``--out`` finishes the move."""
        args, acc = self.args, self.accelerator
        inputs = [os.path.join(args.data, name) for name in sorted(os.listdir(args.data)) if name.endswith(".jsonl")]
        manifest = provenance.manifest(script, args, started, inputs=inputs, counts=counts, seed=args.seed,
                                       identity=command_identity(args), precision=acc.mixed_precision,
                                       device=acc.device.type)
        folders.write_json(os.path.join(self.path, "manifest.json"), {**manifest, "files": run_files(self.path)})
        if self.path != self.out:
            _move_into_place(self.out)

    def checkpoints(self):
        return checkpoints(self.path)

    def resume(self):
        """Load the newest readable checkpoint into every process's Accelerate state and keep the log records
        written up to it; returns its trainer state (``step``, ``epoch``, ``batch_in_epoch``, ``best``), or None
        where there is no checkpoint. One of a run with other settings is refused."""
        found = self.checkpoints()
        if not found:
            return None
        for path in reversed(found):  # a checkpoint damaged after it was written falls back to the one before
            try:
                state = _read_state(os.path.join(path, STATE))
            except (OSError, ValueError) as e:
                self.accelerator.print(f"note: checkpoint {path} cannot be read ({e}); trying the one before")
                continue
            if state["identity"] != self.identity:
                changed = sorted(k for k in set(state["identity"]) | set(self.identity)
                                 if state["identity"].get(k) != self.identity.get(k))
                raise InputError(f"{self.path}: its checkpoints come from a run with other settings "
                                 f"({', '.join(changed)}); use another --out or remove {path}")
            epochs, steps = self.identity.get("epochs"), self.identity.get("max_steps")
            if (isinstance(epochs, int) and state["epoch"] > epochs) or (steps and state["step"] > steps):
                self.accelerator.print(f"note: checkpoint {path} cannot be read ({STATE}: step {state['step']}, "
                                       f"epoch {state['epoch']}, beyond this run's); trying the one before")
                continue
            try:
                self.accelerator.load_state(path)
                break
            except Exception as e:  # noqa: BLE001 (any unreadable file: the previous checkpoint is tried next)
                self.accelerator.print(f"note: checkpoint {path} cannot be read ({type(e).__name__}: "
                                       f"{str(e)[:200]}); trying the one before")
        else:
            raise InputError(f"{self.path}: no checkpoint can be read; remove "
                             f"{os.path.join(self.path, 'checkpoints')} to start again")
        self.log_lines = state["log_lines"]
        self._trim_log()  # a damaged log is refused here, before any step
        state["path"] = path
        return state

    def save_checkpoint(self, state, keep):
        """A checkpoint of every process's Accelerate state and the trainer's ``state`` (``step``, ``epoch``,
        ``batch_in_epoch``, ``best``) as ``checkpoints/step_N``; the newest ``keep`` are kept (0: all)."""
        acc = self.accelerator
        step = state["step"]
        root = os.path.join(self.path, "checkpoints")
        final = os.path.join(root, f"step_{step}")
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
                    json.dump({**state, "log_lines": self.log_lines, "identity": self.identity}, f, indent=1)
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

    def check_finite(self, window, step, model=None):
        """Stop at the first non-finite loss of ``window`` (``(step, loss)`` of each micro-batch since the last log
        record, on the device), or where ``model`` is given at its non-finite weights after ``step``, in one line
        naming the step and the last good checkpoint; one read of the device for it all. Every process stops
        together."""
        import torch
        losses = torch.stack([loss for _, loss in window]) if window else torch.zeros(0)
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
        local = [(at, value) for (at, _), value, wrong in zip(window, losses.tolist(), bad.tolist()) if wrong]
        if local:
            what = f"step {local[0][0]}: training loss {local[0][1]}, not finite"
        elif found[0]:
            what = f"step {window[0][0] if window else step}: the training loss of another process, not finite"
        else:
            what = f"step {step}: the weights are not finite (a learning rate or weight decay too large?)"
        raise InputError(f"{what}; stopped, the model not saved ({kept})")

    def window_state(self, window):
        """``window`` as a checkpoint keeps it: ``[step, loss]`` of each micro-batch, each loss the mean over the
        processes (read from the device: a checkpoint is a wait anyway)."""
        if not window:
            return []
        import torch
        losses = self.accelerator.reduce(torch.stack([loss for _, loss in window]), reduction="mean")
        return [[at, value] for (at, _), value in zip(window, losses.tolist())]

    def has_checkpoint(self, step):
        return os.path.isdir(os.path.join(self.path, "checkpoints", f"step_{step}"))

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

    def save_model(self, name, save):
        """``save(path)`` writes a model as RUN/``name`` in the main process; a full disk is one line."""
        acc = self.accelerator
        acc.wait_for_everyone()
        if acc.is_main_process:
            try:
                save(os.path.join(self.path, name))
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
        """Unlock the folder (after the run's last file)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None
