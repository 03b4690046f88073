"""A training run that replaces a finished one (``--overwrite``): it trains in ``--out/.next-run`` (``NEXT``), so that
the finished run stays whole until this one is committed, and is then moved into place, the previous run's files
removed by name (``run_entries.recorded_files``); killed while moving, the next command on ``--out`` finishes the
move (``complete_replacement``)."""

import os
import time

from common.outdir import folders
from common.train.rundir.run_entries import NEXT, finished_in, recorded_files, run_entry
from common.outdir.written import remove_entry, remove_written


def work_folder(args):
    """Where the run of ``args`` trains: ``--out``, or where ``--overwrite`` replaces a finished run there,
    ``--out/.next-run`` (``NEXT``), so that the finished run stays whole until this one is committed
    (``RunFolder.commit``); killed before, the finished run is still there for a command without ``--overwrite``,
    and a rerun with it resumes from the new run's checkpoints."""
    if args.overwrite and finished_in(args.out):
        return os.path.join(args.out, NEXT)
    return args.out


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
        move_into_place(out)
    finally:
        lock.release()


def move_into_place(out):
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
