"""SPECTER's training graph of the training corpus, a chunk of queries at a time: graph.npz (CSR arrays) and, where
asked, SPECTER's own graph.json; per query its direct links (count 5), then its two-hop documents (count 1)."""

import contextlib
import os
import zipfile

import numpy as np
from tqdm import tqdm

from common import jsontext
from common.data.articles import CHUNK_ROWS
from common.data.neighbours import two_hop


def training_rows(links, rows, hop_indptr, hop_indices):
    """graph.json's entries of some rows, flat: per row its direct links, then its two-hop documents (each part
    sorted). Returns ``(entries per row, documents, is_direct)``."""
    start = links.indptr[rows]
    n_direct = links.indptr[rows + 1] - start
    lengths = n_direct + np.diff(hop_indptr)
    row_start = np.concatenate([[0], np.cumsum(lengths)])
    row = np.repeat(np.arange(len(rows)), lengths)
    rank = np.arange(len(row)) - row_start[row]
    direct = rank < n_direct[row]
    docs = np.empty(len(row), dtype=np.int64)
    docs[direct] = links.indices[(start[row] + rank)[direct]]
    docs[~direct] = hop_indices[(hop_indptr[row] + rank - n_direct[row])[~direct]]
    return lengths, docs, direct


class GraphFile:
    """graph.npz, the training graph as CSR, written a chunk of rows at a time (rows in increasing order) so that
    memory holds one chunk and a count per document. The entries go to two part files beside it and are copied
    into an uncompressed ``.npz`` on ``close``; every zip entry carries a fixed date, so that the same graph gives
    the same bytes.

    | array   | dtype, shape          | content                                                            |
    |---------|-----------------------|--------------------------------------------------------------------|
    | ids     | ``S<width>``, [N]     | document ids, UTF-8, NUL-padded, the training documents in docs.jsonl order |
    | indptr  | int64, [N + 1]        | row ``i``'s entries are ``indptr[i]:indptr[i + 1]``                  |
    | indices | int32, [E]            | per row its direct links, then its two-hop documents, each part ascending |
    | counts  | uint8, [E]            | SPECTER's ``count``: 5 for a direct link, 1 for a two-hop document |
    """

    def __init__(self, path, ids):
        self.path, self.ids = path, ids
        self.lengths = np.zeros(len(ids), dtype=np.int64)
        self.parts = {name: open(f"{path}.{name}.tmp", "wb") for name in ("indices", "counts")}

    def add(self, rows, lengths, docs, direct):
        self.lengths[rows] = lengths
        self.parts["indices"].write(docs.astype("<i4").tobytes())
        self.parts["counts"].write(np.where(direct, 5, 1).astype(np.uint8).tobytes())

    def close(self):
        width = max((len(i.encode("utf-8")) for i in self.ids), default=1)
        ids = np.empty(len(self.ids), dtype=f"S{width}")
        for start in range(0, len(self.ids), 65536):
            ids[start:start + 65536] = [i.encode("utf-8") for i in self.ids[start:start + 65536]]
        indptr = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)
        with zipfile.ZipFile(self.path, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
            for name, array_ in (("ids", ids), ("indptr", indptr)):
                with z.open(zipfile.ZipInfo(f"{name}.npy"), "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, array_, allow_pickle=False)
            for name, dtype in (("indices", "<i4"), ("counts", "|u1")):
                part = self.parts[name]
                part.close()
                with z.open(zipfile.ZipInfo(f"{name}.npy"), "w", force_zip64=True) as f, open(part.name, "rb") as src:
                    np.lib.format.write_array_header_1_0(f, {"descr": dtype, "fortran_order": False,
                                                             "shape": (int(indptr[-1]),)})
                    while block := src.read(1 << 24):
                        f.write(block)
                os.remove(part.name)


class GraphText:
    """graph.json's pieces for every document: a row opens with ``, "q": {``, its first entry has no leading comma,
    direct links say count 5 and two-hop documents count 1."""

    def __init__(self, enc):
        self.n = n = len(enc)
        self.tokens = jsontext.TokenTable(
            [b', %s: {', b'%s: {"count": 5}', b', %s: {"count": 5}', b', %s: {"count": 1}'], enc, [b"}"])
        self.head, self.first, self.direct, self.hop, self.end = 0, n, 2 * n, 3 * n, 4 * n

    def rows(self, chunk, lengths, docs, direct):
        """The rows of a chunk of queries (:func:`training_rows`): head, entries, closing brace."""
        row_start = np.concatenate([[0], np.cumsum(lengths + 2)])
        idx = np.empty(row_start[-1], dtype=np.int64)
        idx[row_start[:-1]] = self.head + chunk
        idx[row_start[1:] - 1] = self.end
        row = np.repeat(np.arange(len(chunk)), lengths)
        position = np.arange(len(row)) + 2 * row + 1
        first = position == row_start[row] + 1  # a query has a link, so its first entry is a direct one
        idx[position] = np.where(first, self.first, np.where(direct, self.direct, self.hop)) + docs
        return self.tokens.render(idx)


def write_training_graph(npz_path, json_path, corpus, encoded_ids):
    """graph.npz and, with ``json_path``, graph.json of the training ``corpus`` (``encoded_ids``: its ids as JSON),
    every document with a link a query, a chunk of queries at a time; returns the number of two-hop pairs."""
    links = corpus.links
    queries = np.flatnonzero(np.diff(links.indptr) > 0)
    out = GraphFile(npz_path, corpus.ids)
    text = GraphText(encoded_ids) if json_path else None
    pairs = 0
    with open(json_path, "wb") if json_path else contextlib.nullcontext() as g:
        if g:
            g.write(b"{")
        for start in tqdm(range(0, len(queries), CHUNK_ROWS), desc="graph", unit=" chunks", mininterval=1.0):
            chunk = queries[start:start + CHUNK_ROWS]
            hop_indptr, hop_indices = two_hop(links, chunk)
            pairs += len(hop_indices)
            rows = training_rows(links, chunk, hop_indptr, hop_indices)
            out.add(chunk, *rows)
            if g:
                text_rows = text.rows(chunk, *rows)
                g.write(text_rows[2:] if start == 0 else text_rows)  # the first row has no separating comma
        if g:
            g.write(b"}\n")
    out.close()
    return pairs
