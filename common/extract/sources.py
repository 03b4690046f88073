"""01's corpora besides Wikipedia, arXiv and key-sentence articles, each read into articles.jsonl by its own module:
a DICT-format dictionary (``dictd``), reStructuredText sources (``rst``), a folder of label folders and a CSV table
(``plaintext``). ``reader`` names the files one reads, for its manifest, and how it is read."""

import os

from common.io import InputError


def reader(kind, path, min_chars, columns=None):
    """``(inputs, read)`` for a corpus of ``kind`` (``dictd``, ``rst``, ``folder``, ``csv``) at ``path``: the files
    it reads, and ``read(out, counts)``, which writes its articles (texts of at least ``min_chars`` characters) into
    ``out`` and refuses a corpus without one. ``columns`` are a CSV table's (id, title, text, label) column names."""
    inputs, extract = _extractor(kind, path, min_chars, columns)

    def read(out, counts):
        extract(out, counts)
        if not counts["articles"]:
            raise InputError(f"{path}: no document of at least --min-chars {min_chars} characters")
    return inputs, read


def _extractor(kind, path, min_chars, columns):
    from common.extract import dictd, plaintext, rst
    if kind == "dictd":
        index = path + ".index"
        body = next((path + s for s in (".dict.dz", ".dict") if os.path.exists(path + s)), path + ".dict.dz")
        return [index, body], lambda out, counts: dictd.extract_dictd(index, body, out, counts, min_chars)
    if kind == "rst":
        if not os.path.isdir(path):
            raise InputError(f"{path}: no such folder")
        inputs = [source for _, source in rst.source_files(path)]
        if not inputs:
            raise InputError(f"{path}: no .rst or .rst.txt files")
        return inputs, lambda out, counts: rst.extract_rst(path, out, counts, min_chars)
    if kind == "folder":
        return ([source for _, _, source in plaintext.labelled_files(path)],
                lambda out, counts: plaintext.extract_folder(path, out, counts, min_chars))
    return [path], lambda out, counts: plaintext.extract_csv(path, out, counts, *columns, min_chars)
