"""A data directory's documents (``docs.jsonl``) and the triplet files that refer to them by id."""

import os

import numpy as np

from common.io import InputError, plain_id, read_jsonl, shown
from common.models.encoder import document_text


def read_documents(path):
    """Yield ``(line_number, id, title, text)`` of each document of a docs.jsonl, its fields checked as strings and
    its id by the id rule (ids are checked unique by the reader that keeps them)."""
    for lineno, obj in read_jsonl(path, required=("id", "title", "text")):
        if not (type(obj["id"]) is str and type(obj["title"]) is str and type(obj["text"]) is str):
            field = next(k for k in ("id", "title", "text") if type(obj[k]) is not str)
            raise InputError(f"{path}:{lineno}: field {field!r} must be a string")
        if plain_id(obj["id"]) != obj["id"]:  # the run files and qrels carry it among whitespace-split fields
            raise InputError(f"{path}:{lineno}: id {shown(obj['id'])} is empty or holds whitespace or a control "
                             "character (docs/contract.md)")
        yield lineno, obj["id"], obj["title"], obj["text"]


class Documents:
    """docs.jsonl: ids, their positions, titles and texts (``texts=False``: not kept, None; the texts are most of a
    corpus's memory, and searching saved vectors needs only ids and titles). Training maps one copy for all its
    processes instead (``shared_docs.SharedDocuments``)."""

    def __init__(self, data_dir, texts=True):
        path = self.path = os.path.join(data_dir, "docs.jsonl")
        self.ids, self.titles, self.texts, self.index = [], [], [] if texts else None, {}
        for lineno, doc, title, text in read_documents(path):
            if doc in self.index:
                raise InputError(f"{path}:{lineno}: duplicate id {doc!r}")
            self.index[doc] = len(self.ids)
            self.ids.append(doc)
            self.titles.append(title)
            if texts:
                self.texts.append(text)

    def rows(self, ids):
        """The positions of ``ids``, -1 for an id that is not in docs.jsonl."""
        return np.array([self.index.get(doc, -1) for doc in ids], dtype=np.int64)

    def subset(self, keep):
        """The documents whose ids are in ``keep``, in docs.jsonl's order (their texts kept)."""
        if self.texts is None:
            raise ValueError("a subset keeps the texts: read the documents with texts=True")
        out = Documents.__new__(Documents)
        rows = [i for i, doc in enumerate(self.ids) if doc in keep]
        out.path, out.ids = self.path, [self.ids[i] for i in rows]
        out.titles, out.texts = [self.titles[i] for i in rows], [self.texts[i] for i in rows]
        out.index = {doc: i for i, doc in enumerate(out.ids)}
        return out

    def stream_texts(self):
        """The texts, read again from docs.jsonl one at a time (for a ``Documents`` that did not keep them)."""
        if self.texts is not None:
            yield from self.texts
            return
        n = -1
        for n, (_, obj) in enumerate(read_jsonl(self.path, required=("id", "title", "text"))):
            if n >= len(self.ids) or obj["id"] != self.ids[n]:
                raise InputError(f"{self.path}: changed while it was being read")
            yield obj["text"]
        if n + 1 != len(self.ids):
            raise InputError(f"{self.path}: changed while it was being read")

    def inputs(self, sep_token, which=None):
        """Model input strings (title + sep + text) of all documents, or of the positions in ``which``."""
        which = range(len(self.ids)) if which is None else which
        return [document_text(self.titles[i], self.texts[i], sep_token) for i in which]


def read_triplets(path, docs):
    """``(query, positive, negative)`` positions of a triplet file's rows in ``docs`` (its ``rows``: one lookup of
    all the file's ids)."""
    lines, ids = [], []
    for lineno, obj in read_jsonl(path, required=("query", "pos", "neg")):
        if not all(type(obj[k]) is str for k in ("query", "pos", "neg")):
            raise InputError(f"{path}:{lineno}: fields 'query', 'pos' and 'neg' must be ids (strings)")
        lines.append(lineno)
        ids += (obj["query"], obj["pos"], obj["neg"])
    rows = docs.rows(ids).reshape(-1, 3)
    missing = np.flatnonzero(rows.ravel() < 0)
    if len(missing):
        raise InputError(f"{path}:{lines[missing[0] // 3]}: id {ids[missing[0]]!r} is not in docs.jsonl")
    return rows
