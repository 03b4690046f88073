"""Training objectives: the registry that maps ``--objective NAME`` to its class (the class they all extend is
``base.Objective``).

A new objective is one file in this folder (a subclass of ``Objective``) plus one line in ``REGISTRY``. The scripts
(``03_train.py``, ``04_distill.py train``) and their loop hold no per-objective code.

The registry names each objective's module lazily, with the files it needs in the data directory and the script
that trains it, so a script lists its objectives and checks ``--data`` before it imports torch or loads a model.
"""

import importlib
import os
from typing import NamedTuple

from common.io import InputError


class Entry(NamedTuple):
    target: str  # "package.module.Class"
    data_files: tuple  # files the objective needs in --data (checked before anything heavy is imported)
    script: str = "03_train.py"  # the script that trains it


REGISTRY = {
    "triplet": Entry(f"{__name__}.triplet.TripletObjective", ("docs.jsonl", "triplets.train.jsonl")),
    "contrastive": Entry(f"{__name__}.keysent.ContrastiveObjective", ("keysent.train.jsonl",)),
    "cosine": Entry(f"{__name__}.keysent.CosineObjective", ("keysent.train.jsonl",)),
    "distill": Entry(f"{__name__}.distill.DistillObjective", ("docs.jsonl",), "04_distill.py"),
    "mlm": Entry(f"{__name__}.mlm.MLMObjective", ("docs.jsonl",)),
    "mnrl": Entry(f"{__name__}.mnrl.MNRLObjective", ("docs.jsonl", "pairs.train.jsonl")),
}


def names(script):
    """The objectives ``script`` trains, in registry order (the first is its default)."""
    return tuple(name for name, entry in REGISTRY.items() if entry.script == script)


def check_data(name, data_dir):
    """The data directory exists and holds the files ``name`` reads (a one-line error otherwise)."""
    if not os.path.isdir(data_dir):
        raise InputError(f"{data_dir}: no such data directory")
    for file in REGISTRY[name].data_files:
        path = os.path.join(data_dir, file)
        if not os.path.isfile(path):
            raise InputError(f"{path}: no such file")


def get(name):
    module, cls = REGISTRY[name].target.rsplit(".", 1)
    return getattr(importlib.import_module(module), cls)
