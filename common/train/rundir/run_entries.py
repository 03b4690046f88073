"""What a training run writes in its run folder (``--out``), by name: the entries it may write (``run_entry``), the
files under them that are the run's (``run_files``), what a finished run records it wrote (``recorded_files``), and
its complete checkpoints (``checkpoints``). What a run removes is what a run wrote, by these names only.

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
| ``cache``             | the documents and token stores every process maps (``shared_docs.py``), the masked     |
|                       | LM's tokenised texts and learnt vocabulary (``--cache-dir``'s default), kept from run  |
|                       | to run                                                                                |
| ``.next-run``         | a run that replaces a finished one (``--overwrite``): a run folder of its own until it  |
|                       | is committed, so that the finished run stays whole until then (``replacement.py``)      |

A finished run's ``files`` (``recorded_files``: read as input, only names under the entries above), or, for a run
that did not finish, the entries above and the files under them (``run_files``). A file anyone else put in the
folder stays, and one in a folder a finished run wrote.
"""

import os
import re

from common import io
from common.outdir import folders
from common.io import InputError
from common.outdir.written import entries, written_name

STATE = "trainer_state.json"
RUN_FILE = "run.json"
# what a run writes besides RUN_FILE
WRITTEN = ("model", "checkpoints", "log.jsonl", "curves.png", "trackers", "manifest.json")
EPOCH_MODEL = re.compile(r"epoch_\d+")  # --save-epochs: the model at the end of epoch K
STEP = re.compile(r"step_\d+")  # a checkpoint in RUN/checkpoints
NEXT = folders.REPLACING  # where a run that replaces a finished one (--overwrite) trains until it is committed
CACHE = "cache"  # what is made from the data (--cache-dir's default), kept from run to run: no run's result


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


def links(out):
    """The symbolic links in the run folder ``out`` at paths a command on it moves, writes or deletes (links not
    followed): ``.next-run`` and ``cache`` themselves, and in ``out`` and in a ``.next-run`` folder every entry a
    run writes and everything under it (in ``checkpoints``, its ``step_N``)."""
    found = [os.path.join(out, name) for name in (NEXT, CACHE) if os.path.islink(os.path.join(out, name))]
    next_dir = os.path.join(out, NEXT)
    for folder in [out] + ([next_dir] if os.path.isdir(next_dir) and not os.path.islink(next_dir) else []):
        for name in _names(folder):
            path = os.path.join(folder, name)
            if not run_entry(name):
                continue
            places = [path]
            if name == "checkpoints" and not os.path.islink(path):
                places = [os.path.join(path, step) for step in _names(path) if STEP.fullmatch(step)]
            for place in places:
                if os.path.islink(place):
                    found.append(place)
                elif os.path.isdir(place):
                    found += [p for p in (os.path.join(place, *rel.split("/")) for rel in entries(place))
                              if os.path.islink(p)]
    return found


def _names(folder):
    """What ``folder`` holds, sorted; nothing where it is no folder, or is gone (another process of the launch may be
    clearing it meanwhile)."""
    try:
        return sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []


def finished_in(out):
    """Whether ``out`` holds a finished run: its manifest.json (the run's last file) beside its ``run.json``."""
    return all(os.path.isfile(os.path.join(out, name)) for name in ("manifest.json", RUN_FILE))


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
