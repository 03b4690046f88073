"""02_build_graph.py corpus: several articles files joined into one docs.jsonl, a corpus for masked-LM training."""

import re

from common.io import InputError, plain_id, read_jsonl, shown


def named_sources(values):
    """``--articles NAME=PATH`` values (``cli.name_values``) as [(name, path)]: each NAME unique, 1-40 letters,
    digits, '_', '-' or '.', since it prefixes the ids of its documents (NAME:id)."""
    sources = []
    for value, name, path in values:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", name) or name in {n for n, _ in sources}:
            raise InputError(f"--articles {value!r}: NAME must be unique, 1-40 letters, digits, '_', '-', '.'")
        sources.append((name, path))
    return sources


def write_corpus(sources, out, counts):
    """One docs.jsonl from several articles files (``sources``: ``[(name, path)]``) for masked-LM training: each
    document ``{"id": "name:id", "title", "text"}`` written to ``out`` (binary), in the sources' order; a text
    already written (the same words after whitespace collapse and lower-casing) is dropped and counted; sources
    without a document are refused."""
    from common.extract.arxiv import text_key
    from common.jsontext import dumps_line
    seen, ids = set(), set()
    for name, path in sources:
        for lineno, obj in read_jsonl(path, required=("id", "title", "text")):
            for field in ("id", "title", "text"):
                if not isinstance(obj[field], str):
                    raise InputError(f"{path}:{lineno}: field {field!r} must be a string")
            if plain_id(obj["id"]) != obj["id"]:
                raise InputError(f"{path}:{lineno}: id {shown(obj['id'])} is empty or holds whitespace or a control "
                                 "character (docs/contract.md)")
            doc_id = f"{name}:{obj['id']}"
            if doc_id in ids:
                raise InputError(f"{path}:{lineno}: duplicate id {obj['id']!r}")
            ids.add(doc_id)
            key = text_key(obj["text"])
            if key in seen:
                counts["duplicate_text"] += 1
                continue
            seen.add(key)
            out.write(dumps_line({"id": doc_id, "title": obj["title"], "text": obj["text"]}).encode("utf-8"))
            counts[f"documents_{name}"] += 1
            counts["documents"] += 1
            counts["words"] += len(obj["text"].split())
    if not counts["documents"]:
        raise InputError(f"{', '.join(p for _, p in sources)}: no documents")
