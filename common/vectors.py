"""Row vectors on disk: ``name.npy`` (memory-mapped, filled by its producer row by row) beside ``name.ids.txt``,
written into an ``Outputs`` folder and read back checked against the documents' ids."""

import os
import tokenize

from common.outdir.write_errors import reserve
from common.io import InputError, open_input, verify_input


def open_npy(outputs, name, shape, dtype="float32"):
    """A memory-mapped NPY under ``outputs``' temporary path for ``name``, written row by row by its producer and
    committed with the folder's other files: the same bytes as ``np.save`` of the finished array, never the whole
    array in memory. Its bytes are allocated on disk first (``reserve``), so a full disk is one line, not SIGBUS."""
    from numpy.lib.format import open_memmap
    path = outputs.tmp_path(name)
    array = open_memmap(path, mode="w+", dtype=dtype, shape=tuple(shape))
    reserve(path, os.path.getsize(path), outputs.directory)
    return array


def write_ids(outputs, name, ids):
    """``name.ids.txt``: the id of each row of ``name.npy``, one a line."""
    with outputs.open(f"{name}.ids.txt") as f:
        f.writelines(f"{i}\n" for i in ids)


def open_rows(outputs, name, ids, dim, dtype="float32"):
    """``name.ids.txt`` written and ``name.npy`` opened memory-mapped (``open_npy``) for a ``dim``-wide row per
    id, for its producer to fill."""
    write_ids(outputs, name, ids)
    return open_npy(outputs, f"{name}.npy", (len(ids), dim), dtype)


def read_rows(directory, name, ids):
    """``directory/name.npy``, memory-mapped, checked against ``directory/name.ids.txt`` and the documents'
    ``ids`` (docs.jsonl's, line by line), so that rows are never paired with the wrong documents."""
    path, ids_path = os.path.join(directory, f"{name}.npy"), os.path.join(directory, f"{name}.ids.txt")
    for p in (path, ids_path):
        if not os.path.isfile(p):
            raise InputError(f"{p}: no such file")
    with open_input(ids_path) as f:
        found = [line.rstrip("\n") for line in f]
    for lineno, (got, want) in enumerate(zip(found, ids), 1):
        if got != want:
            raise InputError(f"{ids_path}:{lineno}: id {got!r}, but docs.jsonl has {want!r} there")
    if len(found) != len(ids):
        raise InputError(f"{ids_path}: {len(found)} ids, docs.jsonl has {len(ids)} documents")
    array = load_npy(path)
    if array.ndim == 0 or len(array) != len(ids):
        raise InputError(f"{path}: {len(array) if array.ndim else 0} rows, {ids_path} names {len(ids)}")
    check_finite_rows(array, path, ids)
    return array


def load_npy(path):
    """An NPY file, memory-mapped, checked against its folder's manifest (``verify_input``); anything that is not
    one (a missing file, a zip archive, a pickle, a header numpy cannot parse, a file that ends early) is one line
    naming it."""
    import numpy as np
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    verify_input(path)
    with open(path, "rb") as f:  # np.load would also open a zip archive (.npz) or a pickle by their magic
        if f.read(len(NPY_MAGIC)) != NPY_MAGIC:
            raise InputError(f"{path}: not a NumPy array file (it does not start as one)")
    try:  # numpy's header parser raises any of these for a header it cannot read or a file that ends early
        return np.load(path, mmap_mode="r")
    except (ValueError, EOFError, OSError, SyntaxError, tokenize.TokenError) as e:
        raise InputError(f"{path}: not a NumPy array file ({e})") from None


NPY_MAGIC = b"\x93NUMPY"


def check_finite_rows(array, path, ids=None, chunk=65_536):
    """InputError naming the first row of a float array that holds a NaN or an infinity (one would turn every score
    against it into NaN), read a chunk of rows at a time; other dtypes pass."""
    import numpy as np
    if not np.issubdtype(array.dtype, np.floating):
        return
    bad = []
    for start in range(0, len(array), chunk):
        rows = np.asarray(array[start:start + chunk]).reshape(min(chunk, len(array) - start), -1)
        bad.extend((start + np.flatnonzero(~np.isfinite(rows).all(axis=1))).tolist())
    if bad:
        which = f" (document {ids[bad[0]]!r})" if ids is not None else ""
        raise InputError(f"{path}: row {bad[0]}{which} is not finite ({len(bad)} of {len(array)} rows are not)")
