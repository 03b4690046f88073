"""articles.jsonl read once into what 02 keeps in memory (``Corpus``: ids, the link matrix, label codes; no text),
docs.jsonl written on the way: for every 02 command that reads articles, whether it builds a link graph or not.

Documents are numbered 0..N-1 in file order. Direct links are a scipy CSR matrix (deduplicated, no self-loops),
built a chunk of rows at a time.
"""

import re
from array import array

import numpy as np
import orjson
import scipy.sparse as sp

from common.io import InputError, read_jsonl, safe_name

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

CHUNK_ROWS = 4096  # fixed: the random streams are consumed chunk by chunk, so it is part of the seed's meaning


class Corpus:
    """What 02 keeps in memory: ids, the link matrix and label codes, no text."""

    def __init__(self, ids, links, labels, label_names):
        self.ids = ids
        self.links = links  # scipy CSR, N×N, boolean (only the structure is used)
        self.labels = labels  # {level: int32 array, -1 = none}
        self.label_names = label_names  # {level: [name by code]}

    @property
    def n(self):
        return len(self.ids)

    def neighbours(self, i):
        return self.links.indices[self.links.indptr[i]:self.links.indptr[i + 1]]


class _Interner(dict):
    """id string → node number, numbering ids in order of first sight; a lookup of a new id assigns one, so
    ``map(interner.__getitem__, links)`` numbers a whole link list in C and only new ids reach Python."""

    def __init__(self, path):
        super().__init__()
        self.path = path
        self.lineno = 0

    def __missing__(self, key):
        if not isinstance(key, str):
            raise InputError(f"{self.path}:{self.lineno}: field 'links' must be a list of strings")
        value = self[key] = len(self)
        return value


def read_articles(path, docs_out, counts):
    """Read articles.jsonl once: validate every line, write docs.jsonl (``docs_out``, binary), build the link
    matrix."""
    interner = _Interner(path)
    doc_nodes, degrees, dst = array("i"), array("q"), array("i")  # node numbers fit 32 bits, as in the matrix
    ids = []
    # level → document numbers, their label codes in order of first sight, {label: code}; a code per document
    # rather than its label string, which would be one string object per labelled document
    label_docs, label_seen, label_code = {}, {}, {}
    batch = []
    for lineno, obj in read_jsonl(path, required=("id", "title", "text", "links")):
        interner.lineno = lineno
        doc_id, title, text, links = obj["id"], obj["title"], obj["text"], obj["links"]
        if not (type(doc_id) is str and type(title) is str and type(text) is str):
            for field in ("id", "title", "text"):
                if not isinstance(obj[field], str):
                    raise InputError(f"{path}:{lineno}: field {field!r} must be a string")
        if doc_id.split() != [doc_id]:  # qrels and run files are whitespace-separated
            raise InputError(f"{path}:{lineno}: id {doc_id!r} " + (
                "holds whitespace, which the qrels files cannot carry" if doc_id else "is empty"))
        if _CONTROL.search(doc_id):  # graph.npz's fixed-width ids would lose a trailing NUL
            raise InputError(f"{path}:{lineno}: id {doc_id!r} holds a control character")
        if type(links) is not list:
            raise InputError(f"{path}:{lineno}: field 'links' must be a list of strings")
        index = len(ids)
        ids.append(doc_id)
        doc_nodes.append(interner[doc_id])
        try:
            dst.extend(map(interner.__getitem__, links))
        except TypeError:  # a list or object among the links cannot even be looked up
            raise InputError(f"{path}:{lineno}: field 'links' must be a list of strings") from None
        degrees.append(len(links))
        batch.append(orjson.dumps({"id": doc_id, "title": title, "text": text}, option=orjson.OPT_APPEND_NEWLINE))
        if len(batch) >= 4096:
            docs_out.writelines(batch)
            batch.clear()
        labels = obj.get("labels")
        if labels:
            if type(labels) is not dict:
                raise InputError(f"{path}:{lineno}: field 'labels' must be an object")
            for level, name in labels.items():
                if name is None:
                    continue
                if type(name) is not str:
                    raise InputError(f"{path}:{lineno}: label {level!r} must be a string")
                if level not in label_docs:  # a level names the topics.<level>.*.jsonl files
                    safe_name(level, f"{path}:{lineno}: label level")
                code_of = label_code.setdefault(level, {})
                label_docs.setdefault(level, array("q")).append(index)
                label_seen.setdefault(level, array("i")).append(code_of.setdefault(name, len(code_of)))
    docs_out.writelines(batch)
    n = len(ids)
    doc_nodes = np.frombuffer(doc_nodes, dtype=np.int32)
    _check_unique(path, doc_nodes, ids)
    doc_of_node = np.full(len(interner), -1, dtype=np.int32)
    doc_of_node[doc_nodes] = np.arange(n)
    del interner
    counts["documents"] = n
    counts["links_read"] = len(dst)
    links = _link_matrix(np.frombuffer(degrees, dtype=np.int64), doc_of_node, np.frombuffer(dst, dtype=np.int32), n,
                         counts)
    labels, names_by_code = {}, {}
    for level, docs in label_docs.items():
        names = sorted(label_code[level])  # codes follow the sorted label names
        sorted_code = np.empty(len(names), dtype=np.int32)
        sorted_code[[label_code[level][name] for name in names]] = np.arange(len(names))
        arr = np.full(n, -1, dtype=np.int32)
        arr[np.frombuffer(docs, dtype=np.int64)] = sorted_code[np.frombuffer(label_seen[level], dtype=np.int32)]
        labels[level], names_by_code[level] = arr, names
    return Corpus(ids, links, labels, names_by_code)


def _check_unique(path, doc_nodes, ids):
    """A repeated id is an error at the line of its second occurrence (found by re-reading, the rare path)."""
    if len(np.unique(doc_nodes)) == len(doc_nodes):
        return
    seen = set()
    for lineno, obj in read_jsonl(path):
        if obj["id"] in seen:
            raise InputError(f"{path}:{lineno}: duplicate id {obj['id']!r}")
        seen.add(obj["id"])


def _link_matrix(degrees, doc_of_node, dst_nodes, n, counts):
    """The CSR link matrix, a chunk of rows at a time: links to unknown ids, self-loops and repeats are dropped
    (counted), columns sorted within rows. Memory: the links read and the matrix, 4 bytes a link each."""
    indptr_in = np.concatenate([[0], np.cumsum(degrees)])
    cols = np.empty(len(dst_nodes), dtype=np.int32)  # the pages past the links kept are never touched
    kept_per_row = np.zeros(n, dtype=np.int64)
    written = 0
    for key in ("links_unknown_id", "links_self", "links_duplicate"):
        counts[key] = 0
    step = CHUNK_ROWS * 16
    for start in range(0, n, step):
        stop = min(start + step, n)
        lo, hi = indptr_in[start], indptr_in[stop]
        src = np.repeat(np.arange(stop - start, dtype=np.int64), degrees[start:stop])
        dst = doc_of_node[dst_nodes[lo:hi]].astype(np.int64)
        known = dst >= 0
        counts["links_unknown_id"] += int((~known).sum())
        src, dst = src[known], dst[known]
        self_loop = src + start == dst
        counts["links_self"] += int(self_loop.sum())
        src, dst = src[~self_loop], dst[~self_loop]
        keys = np.sort(src * n + dst)  # rows in order, columns sorted within rows
        if len(keys):
            keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
        counts["links_duplicate"] += int(len(src) - len(keys))
        cols[written:written + len(keys)] = keys % n
        kept_per_row[start:stop] = np.bincount(keys // n, minlength=stop - start)
        written += len(keys)
    counts["edges"] = written
    indptr = np.concatenate([[0], np.cumsum(kept_per_row)]).astype(np.int64)
    return sp.csr_matrix((np.ones(written, dtype=bool), cols[:written], indptr), shape=(n, n))
