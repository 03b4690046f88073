"""arXiv metadata (the Kaggle ``arxiv-metadata-oai-snapshot.json``, one JSON object per line) → articles.jsonl.

The snapshot is streamed line by line (plain or gzip), so memory stays flat in its size: besides the current line,
only a 64-bit hash of each kept abstract is held (about 100 bytes a paper in a Python set), to drop exact
duplicates; repeated ids are left to 02, which refuses them with their line. Titles and abstracts carry hard wraps
and leading spaces (``"  A fully differential calculation ...\\n presented for ..."``); both are whitespace-collapsed,
LaTeX is kept as written.
"""

import hashlib
import re


from common.io import InputError, read_jsonl
from common.jsontext import dumps_line

REQUIRED = ("id", "title", "abstract", "categories")
# withdrawn papers keep their id, their abstract replaced by a notice ("This paper has been withdrawn by the
# authors.", "paper withdrawn due to ...")
WITHDRAWN = re.compile(r"^(?:(?:this|the) )?(?:paper|article|manuscript|submission|preprint|work)\b[^.]{0,60}?"
                       r"\bwithdrawn\b", re.IGNORECASE)


def normalise(text):
    """Whitespace runs (hard wraps, leading indentation) → one space."""
    return " ".join(text.split())


def text_key(text):
    """A 64-bit hash of normalised, lower-cased text: how duplicates are recognised here and in training."""
    return int.from_bytes(hashlib.blake2b(normalise(text).lower().encode("utf-8"), digest_size=8).digest(), "little")


def parse_categories(value):
    return value.split() if isinstance(value, str) else value


def read_records(path):
    """Yield ``(line_number, record)`` for each non-empty line (``io.read_jsonl``, plain or gzip), with the
    snapshot's field types checked; a bad line or a truncated file names ``path:line``."""
    for lineno, obj in read_jsonl(path, REQUIRED):
        for field in ("id", "title", "categories"):
            if not isinstance(obj[field], str):
                raise InputError(f"{path}:{lineno}: field {field!r} must be a string")
        if obj["abstract"] is not None and not isinstance(obj["abstract"], str):
            raise InputError(f"{path}:{lineno}: field 'abstract' must be a string")
        if obj.get("authors") is not None and not isinstance(obj["authors"], str):
            raise InputError(f"{path}:{lineno}: field 'authors' must be a string (the snapshot's list form is "
                             "'authors_parsed')")
        yield lineno, obj


def extract_arxiv(path, out, prefixes, counts):
    """Write one contract article per kept paper to ``out`` (text mode). ``prefixes``: keep papers with any
    category starting with one of them (empty: all)."""
    seen_texts = set()
    for lineno, obj in read_records(path):
        counts["records"] += 1
        categories = parse_categories(obj["categories"])
        if prefixes and not any(c.startswith(prefixes) for c in categories):
            counts["other_categories"] += 1
            continue
        paper_id = obj["id"].strip()
        abstract = normalise(obj["abstract"] or "")
        if not abstract:
            counts["empty_abstract"] += 1
            continue
        if WITHDRAWN.match(abstract):
            counts["withdrawn"] += 1
            continue
        key = text_key(abstract)
        if key in seen_texts:
            counts["duplicate_abstract"] += 1
            continue
        seen_texts.add(key)
        first = categories[0] if categories else ""
        article = {"id": paper_id, "title": normalise(obj["title"]), "text": abstract, "links": [],
                   "categories": categories, "labels": {"top": first.split(".")[0], "second": first},
                   "authors": normalise(obj.get("authors") or ""), "update_date": obj.get("update_date")}
        if not first:
            del article["labels"]
        out.write(dumps_line(article))
        counts["articles"] += 1
