"""A training run's identity: every flag of the command that changes the result and the data it reads
(``command_identity``), and the number of processes (``run_identity``: the data each process sees depends on it). A
finished run's manifest records it; a later command on the same ``--out`` finds the run done when it matches, and a
checkpoint is resumed only by a run of the same identity (``run_status``)."""

import hashlib
import json
import os

from common import io
from common.train import objectives

# flags that change the trained weights or which checkpoint becomes RUN/model: a resume must match them all
RESULT_ARGS = ("model", "max_length", "pooling", "normalize", "lr", "weight_decay", "warmup", "schedule", "epochs",
               "max_steps", "batch_size", "grad_accum", "clip", "seed", "eval_every", "drop_last", "length_buckets",
               "chunk_tokens", "length_groups")
# flags that change only speed, memory or logging: tests/test_run_folder.py trains with them changed and checks that
# the weights stay the same (--chunk-tokens and --length-groups do not: their parts and groups draw other dropout
# masks, except where the CPU layer packs a batch's groups into one row)
SPEED_ARGS = ("checkpoint_every", "keep", "log_every", "gradient_checkpointing", "report_to", "save_epochs",
              "loader_workers")


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


def run_identity(args, processes):
    """``command_identity`` and the number of ``processes`` the run trains on: what a finished run's manifest
    records and a later command must match to find it done, and what a checkpoint's identity holds besides the
    settings the model was loaded with."""
    return {**command_identity(args), "processes": processes}
