"""faiss indexes over the vectors 05 saved, for search past a million documents (``05 search --index-type``).

Exact search (``retrieval.search``) stays the default and the reference. ``flat`` is faiss's exact inner-product
index on unit vectors (the same ranking, ties aside); ``hnsw`` is approximate: a graph of M = 32 neighbours per
vector built with efConstruction 200 and searched with efSearch 128 (faiss's defaults are 40 and 16: recall@10
falls well below 0.9 on sentence embeddings at those). The index is built once, a chunk of vectors at a time from
the memory-mapped NPY, and saved beside it as ``<model>.<type>.faiss`` with ``<model>.<type>.faiss.sha256``, the
SHA-256 of the vectors file it was built from and of the index file; it is built again unless both hashes, its
rows and its dimension match now (a date says nothing of a file copied or rewritten within a second) or faiss
cannot read it.
"""

import os

import numpy as np

from common.io import InputError, sha256
from common.outdir.folders import create, writing
from common.outdir.write_errors import saving_error
from common.outdir.written import remove_entry

KINDS = ("flat", "hnsw")
HNSW_M, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH = 32, 200, 128


def _faiss():
    try:
        import faiss
    except ImportError:
        raise InputError("--index-type flat|hnsw needs faiss-cpu (pip install faiss-cpu)") from None
    return faiss


def index_path(vectors_path, kind):
    return f"{vectors_path[:-len('.npy')]}.{kind}.faiss"


def open_index(vectors, vectors_path, kind, chunk=65536):
    """The saved index of ``kind`` over ``vectors`` (``[N, d]``, read from ``vectors_path``), built and saved if
    missing, unreadable, or not built from these vectors: ``<index>.sha256`` holds the SHA-256 of the vectors it was
    built from and of the index file itself, written after the index, and both must match."""
    faiss = _faiss()
    path = index_path(vectors_path, kind)
    digest = sha256(vectors_path)
    if os.path.isfile(path) and _recorded(path + ".sha256") == [digest, _sha256_or_none(path)]:
        try:
            index = faiss.read_index(path)
        except RuntimeError:  # a damaged file whose hash was recorded: built again below
            index = None
        if index is not None and index.ntotal == len(vectors) and index.d == vectors.shape[1]:
            _set_search_depth(index)
            return index
    dim = vectors.shape[1]
    index = faiss.IndexFlatIP(dim) if kind == "flat" else faiss.IndexHNSWFlat(dim, HNSW_M,
                                                                              faiss.METRIC_INNER_PRODUCT)
    if kind == "hnsw":
        index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    for start in range(0, len(vectors), chunk):
        index.add(_unit(vectors[start:start + chunk]))
    folder, name = os.path.split(os.path.abspath(path))
    with writing(folder, name + ".sha256") as record:  # no hash names an index until the new one is in place
        remove_entry(path + ".sha256")
        with writing(folder, name) as staged:
            try:
                faiss.write_index(index, staged)  # faiss opens the path itself: it is in a private folder
            except RuntimeError as e:  # faiss's word for a failed write
                error = saving_error(folder, e, staged, f"the {kind} index was not saved")
                if error is None:
                    raise
                raise error from None
        with create(record) as f:
            f.write(f"{digest} {sha256(path)}\n")
    _set_search_depth(index)
    return index


def _sha256_or_none(path):
    try:
        return sha256(path)
    except OSError:
        return None


def _recorded(path):
    try:
        with open(path, encoding="ascii") as f:
            return f.read().split()
    except (OSError, UnicodeDecodeError):
        return None


def _set_search_depth(index):
    if hasattr(index, "hnsw"):
        index.hnsw.efSearch = HNSW_EF_SEARCH


def _unit(x):
    x = np.array(x, dtype=np.float32)
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    return x


def search(index, queries, k):
    """Top ``k`` by cosine: ``(indices [Q, k], scores [Q, k])``, best first, as ``retrieval.search``."""
    scores, indices = index.search(_unit(queries), min(k, index.ntotal))
    return indices, scores
