"""The link graph's training files (docs/contract.md): graph.npz (and SPECTER's graph.json), the triplets drawn
from it, the choice of the documents kept out of training for evaluation, and ``build_graph``, which writes them
all into 02's output folder in the thesis's order (evaluation documents first)."""

import contextlib
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from common import jsontext
from common.data.graph import (CHUNK_ROWS, GraphFile, crossref_candidates, qrels_lines, sample_triplets,
                               split_queries, training_corpus, training_rows, two_hop)
from common.data.splits import write_topics
from common.pool import Background


class GraphText:
    """graph.json's pieces for every document: a row opens with ``, "q": {``, its first entry has no leading comma,
    direct links say count 5 and two-hop documents count 1."""

    def __init__(self, enc):
        self.n = n = len(enc)
        self.tokens = jsontext.TokenTable([b', %s: {', b'%s: {"count": 5}', b', %s: {"count": 5}', b', %s: {"count": 1}'],
                                    enc, [b"}"])
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


class TripletText:
    """triplets.{train,val}.jsonl lines: ``{"query": id, "pos": id, "neg": id, "hard": bool}``."""

    def __init__(self, enc):
        self.n = len(enc)
        self.tokens = jsontext.TokenTable([b'{"query": %s', b', "pos": %s', b', "neg": %s'], enc,
                                    [b', "hard": false}\n', b', "hard": true}\n'])

    def lines(self, q, p, n, hard):
        return self.tokens.render(np.stack([q, self.n + p, 2 * self.n + n, 3 * self.n + hard], axis=1).ravel())


def write_training_graph(npz_path, json_path, ids, encoded_ids, links, queries):
    """graph.npz and, with ``json_path``, graph.json, a chunk of queries at a time; returns the number of
    two-hop pairs."""
    out = GraphFile(npz_path, ids)
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


def write_triplets(out, corpus, text, queries, per_query, hard, rng, counts):
    """Triplets of one split into the binary file ``out``, a chunk of queries at a time (the chunking is part of the
    seed's meaning); returns their number."""
    total = 0
    for start in range(0, len(queries), CHUNK_ROWS):
        chunk = queries[start:start + CHUNK_ROWS]
        hop_indptr, hop_indices = two_hop(corpus.links, chunk)
        q, p, n, h = sample_triplets(corpus, chunk, hop_indptr, hop_indices, per_query, hard, rng, counts)
        total += len(q)
        out.write(text.lines(q, p, n, h.astype(np.int64)))
    return total


def evaluation_documents(mode, candidates, topic_parts):
    """The documents no triplet may touch: every cross-reference query and candidate and every topic document
    (``heldout``), the cross-reference documents and topic test documents only (``test``), or none (``shared``)."""
    if mode == "shared":
        return np.zeros(0, dtype=np.int64)
    parts = [np.array([q for q, _, _ in candidates], dtype=np.int64)]
    parts += [np.asarray(d, dtype=np.int64) for _, p, n in candidates for d in (p, n)]
    parts += [test if mode == "test" else np.concatenate([train, test]) for train, test in topic_parts.values()]
    return np.unique(np.concatenate(parts))


def training_queries(splits, new_number, train_corpus, counts):
    """Train/validation queries in the training corpus's numbering: neither an evaluation document nor left
    without links once the links into the evaluation set are gone (both counted)."""
    degree = np.append(np.diff(train_corpus.links.indptr), 0)  # an excluded document (-1) reads the 0
    out = {}
    for name in ("train", "val"):
        mapped = new_number[splits[name]]
        is_eval = mapped < 0
        no_links = ~is_eval & (degree[mapped] == 0)
        counts[f"eval_queries_dropped_{name}"] = int(is_eval.sum())
        counts[f"queries_without_training_links_{name}"] = int(no_links.sum())
        out[name] = mapped[~is_eval & ~no_links]
    return out


@dataclass(frozen=True)
class GraphSettings:
    """02's settings for the link-graph data directory (its flags of the same names)."""
    seed: int
    holdout: float
    val: float
    crossref_queries: int
    crossref_min_links: int
    crossref_positives: int
    crossref_negatives: int
    eval_docs: str
    per_query: int
    hard: int
    topic_min: int
    topic_cap: str
    topic_test: float
    graph_json: bool = False
    train_queries: int = 0


def build_graph(settings, corpus, outputs, counts, say=print):
    """The link-graph data directory in SPECTER's steps: query splits, the held-out cross-reference candidates and
    topic splits (the evaluation documents, chosen first), the training corpus without them, then the training
    graph and the triplets. ``settings`` is a ``GraphSettings``; the files go into ``outputs``."""
    streams = np.random.SeedSequence(settings.seed).spawn(6)  # a sixth stream leaves the first five as they were
    rng_split, rng_train, rng_val, rng_qrels, rng_topics, rng_subset = (np.random.default_rng(s) for s in streams)
    splits = split_queries(corpus, settings.holdout, settings.val, rng_split)

    # The evaluation documents are chosen first, so that training can be kept off them (the thesis evaluates on
    # documents not seen in fine-tuning).
    candidates = crossref_candidates(corpus, splits["holdout"], settings.crossref_queries,
                                           settings.crossref_min_links, settings.crossref_positives,
                                           settings.crossref_negatives, rng_qrels, counts)
    with outputs.open("crossref.qrels") as f:
        f.writelines(qrels_lines(corpus, candidates))
    topic_parts = write_topics(corpus, outputs, rng_topics, counts, settings.topic_min, settings.topic_cap,
                               settings.topic_test, settings.seed, say)

    excluded = evaluation_documents(settings.eval_docs, candidates, topic_parts)
    train_corpus, new_number = training_corpus(corpus, excluded, counts)
    queries_before = len(splits["train"]) + len(splits["val"])
    train_queries = training_queries(splits, new_number, train_corpus, counts)
    if 0 < settings.train_queries < len(train_queries["train"]):  # a seeded sample, for a quick or smaller run
        train_queries["train"] = np.sort(rng_subset.choice(train_queries["train"], settings.train_queries,
                                                           replace=False))
    kept_docs = np.flatnonzero(new_number >= 0)
    splits.update({name: kept_docs[members] for name, members in train_queries.items()})
    for name, members in splits.items():
        counts[f"queries_{name}"] = int(len(members))
    with outputs.open("splits.json") as f:
        f.write(jsontext.dumps_line({name: [corpus.ids[i] for i in members.tolist()] for name, members in splits.items()}))
    kept = len(train_queries["train"]) + len(train_queries["val"])
    if settings.eval_docs != "shared" and (len(excluded) > corpus.n / 2 or kept < queries_before / 2):
        say(f"warning: the {len(excluded)} evaluation documents are {len(excluded) / max(corpus.n, 1):.0%} of the "
            f"{corpus.n} documents; {kept} of {queries_before} training queries remain. Use --eval-docs test or "
            "shared, or fewer --crossref-queries, on a corpus this small")

    # the training graph is written by a second process while this one samples triplets; both see only the
    # training corpus
    queries = np.flatnonzero(np.diff(train_corpus.links.indptr) > 0)
    encoded_ids = [jsontext.json_bytes(i) for i in train_corpus.ids]  # once, before the fork, for both writers
    writer = Background(write_training_graph, outputs.tmp_path("graph.npz"),
                        outputs.tmp_path("graph.json") if settings.graph_json else None, train_corpus.ids, encoded_ids,
                        train_corpus.links, queries)
    try:
        text = TripletText(encoded_ids)
        for name, rng in (("train", rng_train), ("val", rng_val)):
            with outputs.open(f"triplets.{name}.jsonl", "wb") as out:
                counts[f"triplets_{name}"] = write_triplets(
                    out, train_corpus, text, train_queries[name], settings.per_query, settings.hard, rng, counts)
        counts["two_hop_pairs"] = writer.result()
    finally:
        writer.cancel()
