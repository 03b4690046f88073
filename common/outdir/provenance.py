"""What an output's manifest records about the run that made it (docs/contract.md): the command line and
arguments, the code's commit, the library versions, when it started and finished, each input's SHA-256."""

import datetime
import os
import subprocess
import sys
from importlib import metadata

from common.io import sha256


def git_commit():
    """The commit of the code that runs (None outside a git checkout)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


_PACKAGES = ("torch", "transformers", "accelerate", "sentence-transformers", "numpy", "scipy", "scikit-learn",
             "gensim", "nltk", "tokenizers")


def versions():
    """Python's version and those of the libraries whose versions move a result."""
    found = {"python": sys.version.split()[0]}
    for name in _PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def manifest(script, args, started, inputs=(), counts=None, seed=None, **extra):
    """The manifest every output directory gets (docs/contract.md); ``folders.Outputs.finish`` writes a script's."""
    return {
        "script": os.path.basename(script),
        "argv": sys.argv,
        "args": {k: v for k, v in vars(args).items() if not callable(v)},
        "started": started,
        "finished": now(),
        "git_commit": git_commit(),
        "versions": versions(),
        "seed": seed,
        "inputs": {p: sha256(p) for p in inputs if os.path.isfile(p)},
        "counts": counts or {},
        **extra,
    }
