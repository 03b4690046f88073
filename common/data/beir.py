"""A BEIR dataset's folder (Thakur et al. 2021: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/{train,dev,test}.tsv``,
as SciFact, SCIDOCS, TREC-COVID and NFCorpus are published) → the project's retrieval data, which 05 scores and
``03_train.py --objective mnrl`` trains on.

- ``corpus.jsonl`` ``{"_id", "title", "text"}`` → ``docs.jsonl`` ``{"id", "title", "text"}``, ``text`` the title
  and the text joined by a space, as BEIR's dense models read a document (05 embeds a retrieval corpus's ``text``
  alone, and BM25 indexes it);
- ``queries.jsonl`` ``{"_id", "text"}`` with ``qrels/test.tsv`` and ``qrels/dev.tsv`` → ``queries.{test,val}.jsonl``
  ``{"qid": "q:<_id>", "text"}`` and ``retrieval.{test,val}.qrels`` ``q:<_id> 0 <doc> <score>``, the queries the
  file judges;
- ``qrels/train.tsv`` → ``pairs.train.jsonl`` ``{"query": text, "doc": id}``, a pair for each judgement above 0.

Query ids take the prefix ``q:``: BEIR's query and corpus ids may share values (SciFact's do), and the project
keeps a query apart from every document. Graded relevance is kept as the score BEIR gives (nDCG uses it as the
gain). A judgement of a query or a document the folder does not hold is dropped and counted (05 refuses qrels
that name a document docs.jsonl lacks), and so is a test or dev query no judgement of which is above 0: it has no
relevant document, so every figure of it is 0 whatever the ranking (recall and MAP divide by none), and the pinned
pytrec_eval crashes on a query judged only below 0.
"""

import os

from common.io import RELEVANCE, RELEVANCE_RANGE, InputError, open_input, plain_id, read_jsonl, shown
from common.jsontext import dumps_line

SPLITS = {"test": "test", "dev": "val", "train": "train"}  # BEIR's qrels file → the project's split


def find(folder, name):
    """``folder/name``, or its ``.gz`` (some BEIR folders ship them compressed), or None."""
    return next((p for p in (os.path.join(folder, name), os.path.join(folder, name + ".gz")) if os.path.isfile(p)),
                None)


def _id(value, at, what):
    plain = plain_id(value)
    if plain is None:
        raise InputError(f"{at}: {what} {shown(value)} must be a string without whitespace or control characters "
                         "(the qrels files cannot carry it)")
    return plain


def read_qrels_tsv(path):
    """``query-id<TAB>corpus-id<TAB>score`` lines (a header line first) → ``[(line, query id, doc id, score)]``."""
    found = []
    with open_input(path) as f:
        for lineno, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if not line.strip() or (lineno == 1 and parts[-1].strip() == "score"):
                continue
            if len(parts) != 3:
                raise InputError(f"{path}:{lineno}: expected 'query-id<TAB>corpus-id<TAB>score'")
            qid, doc, score = (p.strip() for p in parts)
            if not RELEVANCE.fullmatch(score) or not RELEVANCE_RANGE[0] <= int(score) <= RELEVANCE_RANGE[1]:
                raise InputError(f"{path}:{lineno}: score {shown(score)} is not a whole number between "
                                 f"{RELEVANCE_RANGE[0]:,} and {RELEVANCE_RANGE[1]:,} (trec_eval's)")
            found.append((lineno, qid, doc, int(score)))
    return found


def corpus_rows(path):
    """``(id, title, text)`` of every document of a BEIR ``corpus.jsonl``, each id checked once and plain, title and
    text strings (a missing title is "")."""
    ids = set()
    for lineno, obj in read_jsonl(path, required=("_id", "text")):
        at = f"{path}:{lineno}"
        doc_id = _id(obj["_id"], at, "_id")
        if doc_id in ids:
            raise InputError(f"{at}: duplicate _id {shown(doc_id)}")
        title, text = obj.get("title") or "", obj["text"]
        for field, value in (("title", title), ("text", text)):
            if not isinstance(value, str):
                raise InputError(f"{at}: field {field!r} must be a string, not {shown(value)}")
        ids.add(doc_id)
        yield doc_id, title, text


def write_corpus(path, out, counts):
    """docs.jsonl from corpus.jsonl; returns the set of document ids."""
    ids = set()
    for doc_id, title, text in corpus_rows(path):
        ids.add(doc_id)
        joined = f"{title} {text}".strip()
        counts["empty_documents"] += not joined
        out.write(dumps_line({"id": doc_id, "title": title, "text": joined}))
    counts["documents"] = len(ids)
    return ids


def read_queries(path):
    queries = {}
    for lineno, obj in read_jsonl(path, required=("_id", "text")):
        at = f"{path}:{lineno}"
        qid = _id(obj["_id"], at, "_id")
        if not isinstance(obj["text"], str) or not obj["text"].strip():
            raise InputError(f"{at}: field 'text' must be a non-empty string, not {shown(obj['text'])}")
        if qid in queries:
            raise InputError(f"{at}: duplicate _id {shown(qid)}")
        queries[qid] = obj["text"]
    return queries


def write_beir(folder, outputs, counts):
    """The data directory's files from the BEIR folder ``folder`` into ``outputs``; returns the files read."""
    if not os.path.isdir(folder):
        raise InputError(f"{folder}: no such folder")
    corpus, queries_path = find(folder, "corpus.jsonl"), find(folder, "queries.jsonl")
    qrels = {split: os.path.join(folder, "qrels", f"{split}.tsv") for split in SPLITS}
    qrels = {split: path for split, path in qrels.items() if os.path.isfile(path)}
    for name, path in (("corpus.jsonl", corpus), ("queries.jsonl", queries_path), ("qrels/test.tsv",
                                                                                 qrels.get("test"))):
        if path is None:
            raise InputError(f"{folder}: no {name} (a BEIR folder holds corpus.jsonl, queries.jsonl and "
                             "qrels/test.tsv)")
    with outputs.open("docs.jsonl") as out:
        doc_ids = write_corpus(corpus, out, counts)
    queries = read_queries(queries_path)
    for split, path in qrels.items():
        judged = {}  # query id → [(doc id, score)], in the file's order
        for lineno, qid, doc, score in read_qrels_tsv(path):
            if qid not in queries or doc not in doc_ids:
                counts[f"qrels_{SPLITS[split]}_unknown_{'query' if qid not in queries else 'document'}"] += 1
                continue
            if f"q:{qid}" in doc_ids:
                raise InputError(f"{path}:{lineno}: query id q:{qid} equals a document id; rename that document")
            judged.setdefault(qid, []).append((doc, score))
        if split != "train":
            for qid in [qid for qid, docs in judged.items() if all(score <= 0 for _, score in docs)]:
                del judged[qid]
                counts[f"queries_{SPLITS[split]}_none_relevant"] += 1
        if split == "test" and not judged:
            raise InputError(f"{path}: judges no query of queries.jsonl relevant to a document of the corpus")
        _write_split(SPLITS[split], judged, queries, outputs, counts)
    return [corpus, queries_path, *qrels.values()]


def _write_split(split, judged, queries, outputs, counts):
    counts[f"queries_{split}"] = len(judged)
    if split == "train":
        with outputs.open("pairs.train.jsonl") as f:
            for qid, docs in judged.items():
                for doc, score in docs:
                    if score > 0:
                        f.write(dumps_line({"query": queries[qid], "doc": doc}))
                        counts["pairs_train"] += 1
        return
    with outputs.open(f"queries.{split}.jsonl") as q, outputs.open(f"retrieval.{split}.qrels") as r:
        for qid, docs in judged.items():
            q.write(dumps_line({"qid": f"q:{qid}", "text": queries[qid]}))
            r.writelines(f"q:{qid} 0 {doc} {score}\n" for doc, score in docs)
            counts[f"qrels_{split}"] += len(docs)
