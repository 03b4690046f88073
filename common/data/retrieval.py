"""Paper-search data: a seeded split *by paper*, training pairs (query text → the paper it should find), and
evaluation queries with TREC qrels over the whole corpus.

Every document stays in the corpus (``docs.jsonl``): a search index holds all papers, and a held-out paper is
held out only as the *target of a query*, so neither its title nor any query naming it is trained on. Query ids
are ``"q:" + ...`` and never equal a document id (BEIR and MTEB evaluators skip a hit whose id equals the query's,
which would drop the only relevant document). A query whose text stands inside its target's text (a news article
that repeats its headline) would be found by string matching, not by what a model learnt: such a pair is dropped and
counted (``queries_inside_document``), in every split.
"""

import numpy as np

from common.extract.arxiv import normalise, text_key
from common.data.splits import refuse_empty_splits
from common.io import InputError, loads, open_input, plain_id, read_jsonl, read_trec_qrels, shown
from common.jsontext import dumps_line

SPLITS = ("train", "val", "test")


def split_papers(n, test, val, rng, source):
    """A split code per document (0 train, 1 val, 2 test): the first ``test`` share of a permutation, then
    ``val``; a split that its share asks for but that rounds down to nothing is refused, naming ``source``."""
    perm = rng.permutation(n)
    n_test, n_val = int(round(test * n)), int(round(val * n))
    code = np.zeros(n, dtype=np.int8)
    code[perm[:n_test]] = 2
    code[perm[n_test:n_test + n_val]] = 1
    refuse_empty_splits(source, n, "papers", {name: int((code == c).sum()) for c, name in enumerate(SPLITS)},
                        {"train": 1, "val": val, "test": test})
    return code


def write_split(ids, split, outputs):
    """splits.json: the document ids of each split (``SPLITS``, by their codes in ``split``)."""
    with outputs.open("splits.json") as f:
        f.write(dumps_line({name: [ids[i] for i in np.flatnonzero(split == code).tolist()]
                               for code, name in enumerate(SPLITS)}))


def inside(query, text):
    """Whether the query's words stand, in order and together, inside the text (case and spacing ignored)."""
    query = normalise(query).lower()
    return bool(query) and query in normalise(text).lower()


def title_queries(articles_path, index, split, counts):
    """Default queries: each paper's title, query id ``q:<paper id>``. Yields ``(split, qid, text, doc)``."""
    for _, obj in read_jsonl(articles_path, required=("id", "title", "text")):
        i = index[obj["id"]]
        if inside(obj["title"], obj["text"]):
            counts["queries_inside_document"] += 1
            continue
        yield SPLITS[split[i]], f"q:{obj['id']}", normalise(obj["title"]), obj["id"]


def file_queries(path, index, split, articles_path, counts):
    """Queries from a ``{"query", "doc"}`` JSONL, each in the split of its document; within a split, lines with
    the same normalised query text are one query (id ``q:<first line>``) with every document they name relevant.
    The pairs are read first, then the articles once, to drop a query that stands inside its document."""
    first, pairs = {}, []
    for lineno, obj in read_jsonl(path, required=("query", "doc")):
        query, doc = obj["query"], obj["doc"]
        if not isinstance(query, str) or not isinstance(doc, str):
            raise InputError(f"{path}:{lineno}: fields 'query' and 'doc' must be strings")
        if doc not in index:
            raise InputError(f"{path}:{lineno}: document {doc!r} is not in the articles")
        name = SPLITS[split[index[doc]]]
        qid = first.setdefault((name, text_key(query)), f"q:{lineno}")
        pairs.append((name, qid, normalise(query), doc))
    wanted = {}
    for n, (_, _, _, doc) in enumerate(pairs):
        wanted.setdefault(doc, []).append(n)
    dropped = set()
    for _, obj in read_jsonl(articles_path, required=("id", "text")):
        for n in wanted.get(obj["id"], ()):
            if inside(pairs[n][2], obj["text"]):
                dropped.add(n)
    counts["queries_inside_document"] += len(dropped)
    return [pair for n, pair in enumerate(pairs) if n not in dropped]


def write_retrieval(queries, index, outputs, counts):
    """pairs.train.jsonl, queries.{val,test}.jsonl and retrieval.{val,test}.qrels from ``(split, qid, text, doc)``
    tuples; empty queries are skipped and counted."""
    files = {"train": outputs.open("pairs.train.jsonl")}
    for name in SPLITS[1:]:
        files[f"queries.{name}"] = outputs.open(f"queries.{name}.jsonl")
        files[f"qrels.{name}"] = outputs.open(f"retrieval.{name}.qrels")
    written = set()
    for name, qid, text, doc in queries:
        if not text:
            counts["empty_queries"] += 1
            continue
        if qid in index:
            raise InputError(f"query id {qid!r} equals a document id; rename that document")
        if name == "train":
            files["train"].write(dumps_line({"query": text, "doc": doc}))
            counts["pairs_train"] += 1
            continue
        if qid not in written:
            written.add(qid)
            files[f"queries.{name}"].write(dumps_line({"qid": qid, "text": text}))
            counts[f"queries_{name}"] += 1
        files[f"qrels.{name}"].write(f"{qid} 0 {doc} 1\n")
        counts[f"qrels_{name}"] += 1


def write_queries(articles_path, pairs_path, ids, split, outputs, counts):
    """The training pairs and evaluation queries with their qrels (``write_retrieval``): ``pairs_path``'s pairs
    where given, else each paper's title, the held-out titles another paper shares then counted."""
    index = {doc: i for i, doc in enumerate(ids)}
    if pairs_path:
        write_retrieval(file_queries(pairs_path, index, split, articles_path, counts), index, outputs, counts)
    else:
        write_retrieval(title_queries(articles_path, index, split, counts), index, outputs, counts)
        count_repeated_titles(articles_path, split, index, counts)


def count_repeated_titles(articles_path, split, index, counts):
    """Held-out titles shared with another paper ("Comment on ...", "Erratum"): ambiguous queries."""
    keys, held = [], []
    for _, obj in read_jsonl(articles_path, required=("id", "title")):
        keys.append(text_key(obj["title"]))
        held.append(split[index[obj["id"]]] > 0)
    keys = np.array(keys, dtype=np.uint64)
    _, inverse, freq = np.unique(keys, return_inverse=True, return_counts=True)
    counts["repeated_titles_held_out"] = int(((freq[inverse] > 1) & np.array(held, dtype=bool)).sum())


def read_split_ids(path, split):
    """The ids of ``split`` in a splits.json (``{"train": [ids], ...}``; a split it lacks has none)."""
    with open_input(path) as f:
        text = f.read()
    try:
        splits = loads(text)
    except ValueError as e:
        raise InputError(f"{path}: not JSON ({e})") from None
    ids = splits.get(split, []) if isinstance(splits, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise InputError(f"{path}: expected an object of id lists, {{\"{split}\": [\"id\", ...], ...}}")
    return set(ids)


def read_qrels(path):
    """``retrieval.*.qrels`` → {qid: {docid, ...}} (relevance > 0)."""
    return {qid: {doc for doc, rel in judged.items() if rel > 0} for qid, judged in read_trec_qrels(path).items()}


def read_queries(path):
    """``queries.*.jsonl`` → ``(qids, texts)``."""
    qids, texts = [], []
    for lineno, obj in read_jsonl(path, required=("qid", "text")):
        if not isinstance(obj["text"], str) or not obj["text"].strip():
            raise InputError(f"{path}:{lineno}: field 'text' must be a non-empty string")
        if type(obj["qid"]) is not str:  # qrels name queries by their text: a number is no id
            raise InputError(f"{path}:{lineno}: field 'qid' must be a string")
        if plain_id(obj["qid"]) != obj["qid"]:  # the qrels and run files carry it among whitespace-split fields
            raise InputError(f"{path}:{lineno}: qid {shown(obj['qid'])} is empty or holds whitespace or a control "
                             "character")
        qids.append(obj["qid"])
        texts.append(obj["text"])
    return qids, texts
