"""A training run's identity: every flag of the command that changes the result and what the data, the model and any
other input folder hold (``command_identity``), and the number of processes (``run_identity``: the data each process
sees depends on it). A finished run's manifest records it; a later command on the same ``--out`` finds the run done
when it matches, and a checkpoint is resumed only by a run of the same identity (``run_status``). Inputs enter it by
content, not by place: the same data directory or model folder staged at another path (a job's node-local scratch)
resumes its checkpoints and is found finished; their paths are recorded beside it, for messages (``input_paths``)."""

import functools
import hashlib
import json
import os

from common import io
from common.train import objectives

# flags that change the trained weights or which checkpoint becomes RUN/model: a resume must match them all
RESULT_ARGS = ("model", "max_length", "pooling", "normalize", "lr", "weight_decay", "warmup", "schedule", "epochs",
               "max_steps", "batch_size", "grad_accum", "clip", "seed", "eval_every", "drop_last", "length_buckets",
               "chunk_tokens", "cache_chunk", "length_groups")
# flags of RESULT_ARGS that entered every objective's identity after runs had been recorded without them: left out
# at their off value (None or 0), in what is recorded and in what is wanted, so that those runs are found finished
# and resume
LATER_ARGS = ("cache_chunk",)
# flags that change only speed, memory or logging: tests/test_run_folder.py trains with them changed and checks that
# the weights stay the same (--chunk-tokens, --cache-chunk and --length-groups do not: their parts, chunks and groups
# draw other dropout masks, except where the CPU layer packs a batch's groups into one row)
SPEED_ARGS = ("checkpoint_every", "keep", "log_every", "gradient_checkpointing", "report_to", "save_epochs",
              "loader_workers")
# flags naming an input folder or file (the model to start from, 04's teacher vectors): a local one enters the
# identity as NAME_content, what it holds (``content_fingerprint``); a hub id as it is given
CONTENT_ARGS = ("model", "teachers")


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


def content_fingerprint(path):
    """What a file or folder holds, as a SHA-256: a folder this project wrote by its manifest's SHA-256 of its files
    (04 teachers': its readers check them), else of each file by its name in the folder (links followed, as a hub
    snapshot's are), computed once per process while no file of it changes (its size, time and inode)."""
    path = os.path.realpath(path)
    recorded = io.read_manifest(path).get("sha256") if os.path.isdir(path) else None
    if isinstance(recorded, dict) and recorded:
        return hashlib.sha256(json.dumps(recorded, sort_keys=True).encode()).hexdigest()
    files = [("", path)] if os.path.isfile(path) else sorted(
        (os.path.relpath(os.path.join(d, f), path), os.path.join(d, f))
        for d, _, names in os.walk(path, followlinks=True) for f in names)
    return _fingerprint(tuple((name, full, _stamp(os.stat(full))) for name, full in files))


def _stamp(st):
    return st.st_size, st.st_mtime_ns, st.st_ino


@functools.cache
def _fingerprint(files):
    found = {name: io.sha256(full) for name, full, _ in files}
    return hashlib.sha256(json.dumps(found, sort_keys=True).encode()).hexdigest()


def _is_content(key, value):
    return key in CONTENT_ARGS and isinstance(value, str) and os.path.exists(value)


def command_identity(args):
    """Every flag of the command that changes the result, the data's content and a local model's or teachers' (not
    their paths) included, as JSON values: what a finished run records in its manifest and a later command must match
    to find it done."""
    found = {"objective": args.objective, "data_content": data_fingerprint(args.objective, args.data)}
    for key in RESULT_ARGS + objectives.get(args.objective).result_args:
        value = getattr(args, key)
        if key in LATER_ARGS and not value:
            continue
        if _is_content(key, value):
            found[f"{key}_content"] = content_fingerprint(value)
        else:
            found[key] = value
    return json.loads(json.dumps(found))


def input_paths(args):
    """Where the inputs that enter the identity by content are, as absolute paths: recorded beside the identity, never
    compared, so that a refusal can say where the run's inputs were."""
    found = {"data": os.path.abspath(args.data)}
    found.update({key: os.path.abspath(getattr(args, key)) for key in CONTENT_ARGS
                  if _is_content(key, getattr(args, key, None))})
    return found


def run_identity(args, processes):
    """``command_identity`` and the number of ``processes`` the run trains on: what a finished run's manifest
    records and a later command must match to find it done, and what a checkpoint's identity holds besides the
    settings the model was loaded with."""
    return {**command_identity(args), "processes": processes}


def recorded_identity(identity):
    """An identity as an earlier version recorded it, as this one would: the data's path left out (its content is
    there), a local input folder's path replaced by what it holds, where it is still there, and a flag of
    ``LATER_ARGS`` at its off value left out."""
    if not isinstance(identity, dict):
        return identity
    found = {k: v for k, v in identity.items() if k != "data" and not (k in LATER_ARGS and not v)}
    for key in CONTENT_ARGS:
        if _is_content(key, found.get(key)) and f"{key}_content" not in found:
            found[f"{key}_content"] = content_fingerprint(found.pop(key))
    return found


def changed_settings(recorded, wanted, then=None, now=None):
    """What differs between a ``recorded`` identity and the ``wanted`` one, as a refusal lists it: the keys, the
    numbers of processes both ways, and a changed input with where it was (``then``, ``input_paths`` as recorded)
    where that is not where it is ``now``."""
    then, now = (paths if isinstance(paths, dict) else {} for paths in (then, now))
    found = []
    for key in sorted(k for k in set(recorded) | set(wanted) if recorded.get(k) != wanted.get(k)):
        name = key.removesuffix("_content")
        if key == "processes":
            found.append(f"processes: {recorded.get(key)} then, {wanted.get(key)} now")
        elif name != key and isinstance(then.get(name), str) and then[name] != now.get(name):
            found.append(f"{key}: --{name} {then[name]} then")
        else:
            found.append(key)
    return found
