"""Articles with expert lists of similar articles → the similarity data 05's ``similarity`` task reads
(``docs.jsonl``, ``similarity.qrels``): Ginzburg et al. (2021)'s WINES and GAMES, the distillation thesis's retrieval
tasks, as they publish them.

- The articles (``wines.txt``, ``video_games.txt`` on Zenodo): a CSV table with a header row, a row an article, its
  ``title`` and its ``sections``, a Python literal list of ``(section title, section text)`` pairs. A document's id
  is its row number from 0 (the thesis's), its text every section with a text, ``section title + " " + text``,
  space-joined (the thesis's text less the article's title, which the project's input puts before it).
- The similar articles (``gt`` in microsoft/SDR): a pickled dictionary, a source article's title → a dictionary whose
  keys are the titles of the articles similar to it. It is read by an unpickler that builds dictionaries and
  nothing else (a pickle can otherwise run any code). A title that names no article is dropped and counted, as the
  thesis drops it.

``similarity.qrels`` holds ``source 0 target 1`` for each source with at least one target left.
"""

import ast
import csv
import io
import pickle
import sys

from common.io import InputError, read_input_bytes, shown
from common.jsontext import dumps_line


def _sections(value, at):
    try:
        sections = ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise InputError(f"{at}: field 'sections' is not a Python literal list of (title, text) pairs") from None
    if not isinstance(sections, (list, tuple)) or not all(
            isinstance(s, (list, tuple)) and len(s) == 2 and all(isinstance(x, str) for x in s) for s in sections):
        raise InputError(f"{at}: field 'sections' must be a list of (title, text) pairs of strings, not "
                         f"{shown(repr(sections))}")
    return sections


def write_articles(path, out, counts):
    """docs.jsonl (``out``, text mode) from the articles table; returns {title: id}."""
    csv.field_size_limit(min(sys.maxsize, 1 << 31))
    reader = csv.reader(io.StringIO(_decoded(path), newline=""))
    ids = {}
    try:
        next(reader, None)  # the header row
        for row in reader:
            at = f"{path}:{reader.line_num}"
            if not row:
                continue
            if len(row) != 2:
                raise InputError(f"{at}: expected two fields, title and sections (found {len(row)})")
            title = row[0]
            if title in ids:
                raise InputError(f"{at}: title {shown(title)} repeats an earlier article's")
            body = " ".join(f"{heading} {section}".strip() for heading, section in _sections(row[1], at) if section)
            ids[title] = str(len(ids))
            out.write(dumps_line({"id": ids[title], "title": title, "text": body}))
    except csv.Error as e:
        raise InputError(f"{path}:{reader.line_num}: malformed CSV ({e})") from None
    if not ids:
        raise InputError(f"{path}: no articles")
    counts["documents"] = len(ids)
    return ids


def _decoded(path):
    try:
        return read_input_bytes(path).decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


class _Unpickler(pickle.Unpickler):
    """Dictionaries (``dict`` and ``collections.defaultdict``, as ``gt`` holds them), strings and numbers only."""

    def find_class(self, module, name):
        if (module, name) in {("collections", "defaultdict"), ("builtins", "dict")}:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not a dictionary")


def read_targets(path):
    """{source title: [similar titles]} from the pickled ``gt``."""
    try:
        value = _Unpickler(io.BytesIO(read_input_bytes(path))).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            OverflowError, MemoryError, RecursionError) as e:
        raise InputError(f"{path}: not a pickled dictionary of similar articles ({e})") from None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, dict) and
                                              all(isinstance(t, str) for t in v) for k, v in value.items()):
        raise InputError(f"{path}: expected a dictionary from a title to a dictionary keyed by similar titles")
    return {source: list(similar) for source, similar in value.items()}


def write_qrels(targets, ids, out, counts):
    """similarity.qrels (``out``): each source's targets that are articles, by id."""
    for source, similar in targets.items():
        if source not in ids:
            counts["sources_unknown"] += 1
            continue
        found = [ids[t] for t in similar if t in ids and t != source]
        counts["targets_unknown"] += sum(t not in ids for t in similar)
        if found:
            counts["sources"] += 1
            counts["targets"] += len(found)
            out.writelines(f"{ids[source]} 0 {target} 1\n" for target in found)
    if not counts["sources"]:
        raise InputError("no source of the similar articles names an article of the table (their titles differ)")
