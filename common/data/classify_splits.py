"""Classification tasks from labelled splits → the files 05's ``classify`` task reads: ``docs.jsonl`` and
``classify.<name>.{train,test}.jsonl`` (``{"id", "label"}``, or ``{"ids": [a, b], "label"}`` for a pair).

A split is what ``01_extract.py hf`` wrote: articles.jsonl (a document a line, its label ``labels.top``) or
pairs.jsonl (``{"docs": [two documents], "label"}``). Several tasks share one data directory, as the distillation
thesis's six do, so each task's document ids are prefixed by its name (``imdb:train-17``); within a task a
document (a pair set's text, named by its content) may recur in both splits, but an id that names two texts is
refused, with the line that gives the second.
"""

import hashlib

from common.io import InputError, plain_id, read_jsonl, safe_name, shown
from common.jsontext import dumps_line

PARTS = ("train", "test")


def read_split(path):
    """Yield ``(line, documents, label)``: a line's one or two ``{"id", "title", "text"}`` documents and its label,
    each checked; a file mixing documents and pairs is refused."""
    kind = None
    for lineno, obj in read_jsonl(path):
        at = f"{path}:{lineno}"
        pair = "docs" in obj
        if kind is not None and pair != kind:
            raise InputError(f"{at}: mixes single documents and pairs")
        kind = pair
        docs = obj["docs"] if pair else [obj]
        if pair and (not isinstance(docs, list) or len(docs) != 2 or not all(isinstance(d, dict) for d in docs)):
            raise InputError(f"{at}: field 'docs' must be two documents, not {shown(docs)}")
        for doc in docs:
            for field in ("id", "title", "text"):
                if not isinstance(doc.get(field), str):
                    raise InputError(f"{at}: field {field!r} must be a string, not {shown(doc.get(field))}")
            if plain_id(doc["id"]) != doc["id"]:
                raise InputError(f"{at}: id {shown(doc['id'])} is empty or holds whitespace or a control character")
        labels = {"top": obj.get("label")} if pair else obj.get("labels")
        label = labels.get("top") if isinstance(labels, dict) else None
        if not isinstance(label, str) or not label:
            raise InputError(f"{at}: no label (a non-empty string in {'label' if pair else 'labels.top'})")
        yield lineno, docs, label


def write_tasks(tasks, outputs, counts):
    """``tasks``: ``[(name, train path, test path)]``. Writes docs.jsonl (every document once, in the order first
    read) and each task's two split files into ``outputs``."""
    texts = {}  # a written document's id → the SHA-256 of its title and text
    names = [name for name, *_ in tasks]
    for name in names:
        safe_name(name, "--name")
        if names.count(name) > 1:
            raise InputError(f"--name {name}: given {names.count(name)} times; each task has a name of its own")
    with outputs.open("docs.jsonl") as docs_out:
        for name, *paths in tasks:
            kinds = {}
            for part, path in zip(PARTS, paths):
                with outputs.open(f"classify.{name}.{part}.jsonl") as out:
                    for lineno, docs, label in read_split(path):
                        kinds[part] = len(docs)
                        ids = []
                        for doc in docs:
                            doc_id = f"{name}:{doc['id']}"
                            digest = hashlib.sha256(f"{doc['title']}\n{doc['text']}".encode("utf-8")).digest()[:8]
                            if doc_id not in texts:
                                texts[doc_id] = digest
                                docs_out.write(dumps_line({"id": doc_id, "title": doc["title"], "text": doc["text"]}))
                            elif texts[doc_id] != digest:
                                raise InputError(f"{path}:{lineno}: id {shown(doc['id'])} names another text than "
                                                 f"where it was first read (task {name}; each id one text, in "
                                                 "both splits)")
                            ids.append(doc_id)
                        out.write(dumps_line({"id": ids[0], "label": label} if len(ids) == 1 else
                                             {"ids": ids, "label": label}))
                        counts[f"{name}_{part}"] += 1
                if not counts[f"{name}_{part}"]:
                    raise InputError(f"{path}: no rows")
            if kinds["train"] != kinds["test"]:
                what = {1: "single documents", 2: "pairs"}
                raise InputError(f"{paths[1]}: holds {what[kinds['test']]}, {paths[0]} {what[kinds['train']]} "
                                 f"(task {name})")
    counts["documents"] = len(texts)
