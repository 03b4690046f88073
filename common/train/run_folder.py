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
| ``manifest.json``     | written by 03_train.py's `train` after everything else: the run is finished           |

Whether an ``--out`` holds a finished run, a run to resume, or nothing of this project's is decided here, from the
run's identity: every flag of the command that changes the result (``RESULT_ARGS`` and the objective's
``result_args``), the data's path and content (``command_identity``, which a finished run's manifest records), and,
for a checkpoint, the settings the model was loaded with and the number of processes (``RunFolder.identity``). A
run resumes only from a checkpoint of its own. Only the main process writes; every process loads.
"""

import hashlib
import json
import os
import re
import shutil

from safetensors import SafetensorError

from common import folders, io
from common.folders import LOCK, STAGING
from common.io import InputError
from common.train import objectives

# flags that change the trained weights or which checkpoint becomes RUN/model: a resume must match them all
RESULT_ARGS = ("model", "max_length", "pooling", "normalize", "lr", "weight_decay", "warmup", "schedule", "epochs",
               "max_steps", "batch_size", "grad_accum", "clip", "seed", "eval_every", "drop_last", "length_buckets",
               "chunk_tokens")
# flags that change only speed, memory or logging: tests/test_run_folder.py trains with them changed and checks that
# the weights stay the same (--chunk-tokens does not: its parts draw other dropout masks)
SPEED_ARGS = ("checkpoint_every", "keep", "log_every", "length_groups", "gradient_checkpointing", "report_to",
              "save_epochs")


def data_fingerprint(name, data_dir):
    """What the data directory holds, for the resume identity: its manifest's inputs (with their sha256) and
    settings when 02 wrote one, else the sha256 of the files the objective reads. A directory rebuilt from other
    inputs or with another seed has another fingerprint."""
    manifest = io.read_manifest(data_dir)
    if manifest:
        found = {"inputs": manifest.get("inputs"),
                 "args": {k: v for k, v in (manifest.get("args") or {}).items() if k != "out"}}
    else:
        found = {file: io.sha256(os.path.join(data_dir, file)) for file in objectives.REGISTRY[name].data_files}
    return hashlib.sha256(json.dumps(found, sort_keys=True).encode()).hexdigest()


def command_identity(args):
    """Every flag of the command that changes the result, the data's path and content included, as JSON values:
    what a finished run records in its manifest and a later command must match to find it done."""
    found = {"objective": args.objective, "data": os.path.abspath(args.data),
             "data_content": data_fingerprint(args.objective, args.data)}
    found.update({key: getattr(args, key) for key in RESULT_ARGS + objectives.get(args.objective).result_args})
    return json.loads(json.dumps(found))


def finished(args, script):
    """A finished run in ``args.out`` (its manifest.json, the run's last file, is there): its counts where it was
    trained with the settings of this command (``command_identity``), so that the command has nothing to do; else
    an InputError, unless ``--overwrite``. None where ``--out`` holds no finished run of this project."""
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


def trackers(report_to):
    """``--report-to`` as Accelerate's ``log_with``: known tracker names that are installed."""
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS, get_available_trackers
    names = [n.strip() for n in report_to.split(",") if n.strip() and n.strip() != "none"]
    if names == ["all"]:
        return names
    installed = {t.value for t in get_available_trackers()}
    for name in names:
        if name not in LOGGER_TYPE_TO_CLASS:
            raise InputError(f"--report-to {name}: not a tracker Accelerate knows (one of "
                             f"{', '.join(sorted(LOGGER_TYPE_TO_CLASS))}, all, none)")
        if name not in installed:
            raise InputError(f"--report-to {name}: not installed (pip install {name.replace('_', '-')})")
    return names

STATE = "trainer_state.json"
RUN_FILE = "run.json"
# what a run writes besides RUN_FILE
WRITTEN = ("model", "checkpoints", "log.jsonl", "curves.png", "trackers", "manifest.json")
EPOCH_MODEL = re.compile(r"epoch_\d+")  # --save-epochs: the model at the end of epoch K
# what saving a model or checkpoint raises on a full disk: torch's RuntimeError, safetensors' own error (no OSError)
SAVE_ERRORS = (OSError, RuntimeError, SafetensorError)


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


class RunFolder:
    """The folder ``args.out`` of the run of ``args`` (with ``objective``, its model built), seen from one process
    of ``accelerator``.

    ``log`` holds the records of ``log.jsonl`` in the main process, those a resumed run kept included: the model
    card of each saved model quotes them."""

    def __init__(self, args, objective, accelerator, tracked=False):
        self.path, self.accelerator, overwrite = args.out, accelerator, args.overwrite
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
        has told the same settings' rerun that it is done). Without checkpoints to resume from, or with
        ``overwrite``, what an earlier run wrote there is removed (a run killed before its first checkpoint leaves a
        log that would otherwise get its steps twice), and nothing else; with checkpoints, ``resume`` checks their
        settings. Private folders a killed run left are removed. The folder is made and locked as every output
        folder is (``folders.own_folder``); nothing is written through a symbolic link in it."""
        own = os.path.join(self.path, RUN_FILE)
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise InputError(f"{self.path}: --out is a file, not a run folder")
        # the main process may be claiming the folder meanwhile: its lock and private folders are no reason
        if os.path.isdir(self.path) and not os.path.exists(own) and \
                [n for n in os.listdir(self.path) if n != LOCK and not n.startswith(STAGING)]:
            raise InputError(f"{self.path}: not empty and not a run folder of this project (no {RUN_FILE}); "
                             "use another --out")
        if not self.accelerator.is_main_process:
            return
        self.lock = folders.own_folder(self.path)
        if not self.overwrite and os.path.exists(os.path.join(self.path, "manifest.json")):
            self.release()  # finished while this run loaded its model
            raise folders.finished_error(self.path, "training run")
        root = os.path.join(self.path, "checkpoints")
        inside = [os.path.join(self.path, name) for name in WRITTEN + (RUN_FILE,)]
        inside += [os.path.join(root, name) for name in os.listdir(root) if re.fullmatch(r"step_\d+", name)] \
            if os.path.isdir(root) and not os.path.islink(root) else []
        for path in inside:
            if os.path.islink(path):
                raise InputError(f"{path}: a symbolic link in the run folder; remove it (a run never writes "
                                 "through one)")
        leftovers = [n for n in os.listdir(self.path) if n.startswith(STAGING)]  # of a killed run
        leftovers += [os.path.join("checkpoints", n) for n in os.listdir(root) if n.startswith(STAGING)] \
            if os.path.isdir(root) else []
        if self.overwrite or not checkpoints(self.path):
            leftovers += list(WRITTEN) + [n for n in os.listdir(self.path) if EPOCH_MODEL.fullmatch(n)]
        for name in leftovers:
            folders.remove_entry(os.path.join(self.path, name))
        folders.write_json(own, {"identity": self.identity})

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
            error = folders.saving_error(self.path, e, tmp, f"checkpoint step_{step} was not saved, the earlier "
                                         "ones are kept")
            shutil.rmtree(tmp, ignore_errors=True)
            if error is None:
                raise
            raise error from None
        acc.wait_for_everyone()

    def check_finite(self, losses, step):
        """Stop before a non-finite loss reaches the weights: one NaN gradient makes every weight NaN, and the
        checkpoints already written hold the last good state. ``losses``: the micro-batch losses of optimizer step
        ``step``, about to be taken, checked once per step (one host sync, not one per micro-batch)."""
        import torch
        losses = torch.stack(losses)
        bad = (~torch.isfinite(losses)).any().float()
        if self.accelerator.num_processes > 1:  # every process stops together
            bad = self.accelerator.reduce(bad, reduction="sum")
        if bad.item():
            found = self.checkpoints()
            kept = f"the last good checkpoint is {found[-1]}" if found else "no checkpoint was written"
            local = losses[~torch.isfinite(losses)]
            what = f"training loss {local[0].item()}" if len(local) else "the training loss of another process"
            raise InputError(f"step {step}: {what}, not finite; stopped, the model not saved ({kept})")

    def has_checkpoint(self, step):
        return os.path.isdir(os.path.join(self.path, "checkpoints", f"step_{step}"))

    def write_log(self, record):
        """Append ``record`` to log.jsonl (and to the trackers)."""
        self.log_lines += 1
        if self.accelerator.is_main_process:
            self.log.append(record)
            try:
                folders.append_line(os.path.join(self.path, "log.jsonl"), json.dumps(record) + "\n")
            except OSError as e:
                raise folders.write_error(self.path, e) from None
        if self.tracked:
            self.accelerator.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])

    def _trim_log(self):
        """Drop log lines written after the checkpoint a run resumes from (they will be written again)."""
        path = os.path.join(self.path, "log.jsonl")
        if not self.accelerator.is_main_process or not os.path.exists(path):
            return
        self.log = read_log(path, self.log_lines)
        with folders.writing(self.path, "log.jsonl") as staged, folders.create(staged) as f:
            f.writelines(json.dumps(record) + "\n" for record in self.log)

    def save_model(self, name, save):
        """``save(path)`` writes a model as RUN/``name`` in the main process; a full disk is one line."""
        acc = self.accelerator
        acc.wait_for_everyone()
        if acc.is_main_process:
            try:
                save(os.path.join(self.path, name))
            except SAVE_ERRORS as e:
                error = folders.saving_error(self.path, e, left=f"RUN/{name} was not saved")
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
