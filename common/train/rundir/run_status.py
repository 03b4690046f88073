"""Whether an ``--out`` holds a finished run, a run to resume, or nothing of this project's, decided from the run's
identity (``run_identity.py``): every flag of the command that changes the result (``RESULT_ARGS`` and the
objective's ``result_args``), what the data and a local model hold, wherever they are (``command_identity``, which a
finished run's manifest records), and the number of processes (``run_identity``), and, for a checkpoint, the settings
the model was loaded with (``RunFolder.identity``). A run resumes only from a checkpoint of its own."""

import os

from common import io
from common.outdir import folders
from common.outdir.folder_lock import LOCK
from common.outdir.folders import STAGING
from common.io import InputError
from common.train.rundir.replacement import complete_replacement
from common.train.rundir.run_entries import CACHE, NEXT, RUN_FILE, STATE, checkpoints, finished_in, links
from common.distributed import launched_processes
from common.train.rundir.run_identity import changed_settings, input_paths, recorded_identity, run_identity
from common.train.rundir.run_log import LARGEST


def finished(args, script):
    """A finished run in ``args.out`` (its manifest.json, the run's last file, is there): its counts where it was
    trained with the settings of this command on as many processes as this launch starts (``run_identity``), so
    that the command has nothing to do; else an InputError, unless ``--overwrite``. None where ``--out`` holds no
    finished run of this project. A run that replaced a finished one and was killed while moving into place is moved
    into place first (``complete_replacement``). An ``--out`` that is no run folder is refused first
    (``check_run_folder``); one that another run holds is refused when this run claims it (``RunFolder.claim``),
    before any work writes into it."""
    check_run_folder(args.out)
    complete_replacement(args.out)
    if args.overwrite or not finished_in(args.out):
        return None
    try:
        manifest = io.read_manifest(args.out)
    except io.InputError:
        raise folders.finished_error(args.out, f"{os.path.basename(script)} run whose manifest.json cannot be "
                                               "read") from None
    what = f"{manifest.get('script') or os.path.basename(script)} run"
    recorded, wanted = recorded_identity(manifest.get("identity")), run_identity(args, launched_processes())
    counts = manifest.get("counts") if isinstance(manifest.get("counts"), dict) else {}
    if isinstance(recorded, dict) and "processes" not in recorded:  # a manifest of an earlier version: in its counts
        recorded = {**recorded, "processes": counts.get("processes")}
    if recorded == wanted:
        return counts
    if not isinstance(recorded, dict):  # a run of an earlier version, or a manifest edited by hand
        raise folders.finished_error(args.out, f"{what} whose settings its manifest.json does not record")
    if other_processes(recorded, wanted):
        raise InputError(f"{args.out}: holds a {what} finished on {recorded['processes']} processes, and this launch "
                         f"starts {wanted['processes']}; launch {recorded['processes']} to find it finished, or give "
                         "--overwrite to train it again on these, or another --out")
    changed = changed_settings(recorded, wanted, manifest.get("paths"), input_paths(args))
    raise InputError(f"{args.out}: holds a finished {what} with other settings ({'; '.join(changed[:8])}"
                     f"{' and more' if len(changed) > 8 else ''}); give --overwrite to train it again (only what "
                     "the run wrote is removed), or another --out")


def other_processes(recorded, wanted):
    """Whether two identities differ in the number of processes alone (each process's share of the data depends on
    it, so only a launch of as many goes on with that run)."""
    return recorded.get("processes") != wanted.get("processes") and \
        {k: v for k, v in recorded.items() if k != "processes"} == {k: v for k, v in wanted.items() if k != "processes"}


def check_run_folder(out):
    """Refuse an ``--out`` that is a file, a folder that holds something and is not a run folder of this project
    (no ``run.json``; its lock, private folders and cache are no reason: a run may be claiming it meanwhile), or one
    with a symbolic link at a path a command on it moves, writes or deletes (``run_entries.links``): checked before
    the first move, so that nothing is moved, written or deleted through one."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise InputError(f"{out}: --out is a file, not a run folder")
    if os.path.isdir(out) and not os.path.exists(os.path.join(out, RUN_FILE)) and \
            [n for n in os.listdir(out) if n not in (LOCK, CACHE, NEXT) and not n.startswith(STAGING)]:
        raise InputError(f"{out}: not empty and not a run folder of this project (no {RUN_FILE}); "
                         "use another --out")
    found = links(out)
    if found:
        raise InputError(f"{found[0]}: a symbolic link in the run folder; remove it (a run never moves, writes or "
                         "deletes through one)")


def read_state(path):
    """A checkpoint's state file, its fields checked (a ValueError says what is wrong): the identity an object, the
    counts whole numbers (``true`` is none) from 0 to 2^53, ``best`` a finite number or null."""
    with open(path, encoding="utf-8") as f:
        state = io.loads(f.read())
    if not isinstance(state, dict) or not isinstance(state.get("identity"), dict):
        raise ValueError(f"{STATE} lacks a field or holds a wrong value")
    try:
        for key in ("step", "epoch", "batch_in_epoch", "micro", "log_lines"):
            io.number(state.get(key), f"{STATE}: {key}", int, 0, LARGEST)
        if state.get("best") is not None:
            io.number(state["best"], f"{STATE}: best", float)
        # the losses and log values since the last log record (TrainState.window)
        window = state.get("window")
        if not isinstance(window, list) or not all(isinstance(entry, list) and len(entry) == 3 and
                                                   isinstance(entry[2], dict) for entry in window):
            raise InputError(f"{STATE}: window is not a list of [step, loss, log values]")
        for at, loss, logs in window:
            io.number(at, f"{STATE}: window's step", int, 0, LARGEST)
            io.number(loss, f"{STATE}: window's loss", float)
            for name, value in logs.items():
                io.number(value, f"{STATE}: window's {name}", float)
    except InputError as e:
        raise ValueError(str(e)) from None
    return state


def resumable_state(run_dir, path, identity, paths=None):
    """The trainer state of the checkpoint ``path`` (``step_N``) in ``run_dir``, for a run of ``identity`` to resume
    from: a ValueError says why it cannot be (unreadable, of another step than N, or beyond this run's epochs or
    steps: the one before is tried); an InputError refuses a checkpoint of a run with other settings, or of another
    number of processes (``paths``: where this run's inputs are, ``input_paths``, named where the data or model is
    another's)."""
    try:
        state = read_state(os.path.join(path, STATE))
    except OSError as e:
        raise ValueError(str(e)) from None
    recorded = recorded_identity(state["identity"])
    if other_processes(recorded, identity):
        raise InputError(f"{run_dir}: its checkpoints come from a run on {recorded['processes']} processes, and this "
                         f"launch starts {identity['processes']}; launch {recorded['processes']} to resume it, or use "
                         f"another --out")
    if recorded != identity:
        changed = changed_settings(recorded, identity, state.get("paths"), paths)
        raise InputError(f"{run_dir}: its checkpoints come from a run with other settings "
                         f"({'; '.join(changed)}); use another --out or remove {path}")
    named = int(os.path.basename(path).removeprefix("step_"))
    if state["step"] != named:  # resumed as its own step, an optimizer step would be skipped or taken twice
        raise ValueError(f"{STATE}: step {state['step']}, where its folder names step {named}")
    epochs, steps = identity.get("epochs"), identity.get("max_steps")
    if (isinstance(epochs, int) and state["epoch"] > epochs) or (steps and state["step"] > steps):
        raise ValueError(f"{STATE}: step {state['step']}, epoch {state['epoch']}, beyond this run's")
    return state


def own_checkpoints(run_dir, identity):
    """Whether the newest checkpoint in ``run_dir`` is one of a run of ``identity`` (``--overwrite`` resumes from
    it: a run resumed trains to the weights of one that was not stopped)."""
    found = checkpoints(run_dir)
    try:
        return bool(found) and recorded_identity(read_state(os.path.join(found[-1], STATE))["identity"]) == identity
    except (OSError, ValueError):
        return False
