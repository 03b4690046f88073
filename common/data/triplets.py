"""SPECTER's triplets (query, positive, negative) of the training corpus, drawn a chunk of queries at a time:
each query's positives from its links, its hard negatives from its two-hop documents, the rest easy; written as
triplets.{train,val}.jsonl."""

import numpy as np

from common import jsontext
from common.data.articles import CHUNK_ROWS
from common.data.neighbours import easy_negatives, two_hop


def _distinct_ranks(sizes, k, rng):
    """Per row, ``k`` distinct uniform ranks in ``range(size)`` (columns past ``size`` are meaningless): the j-th
    draw is uniform over the ranks not yet taken, mapped by stepping over the taken ones in increasing order."""
    ranks = np.zeros((len(sizes), k), dtype=np.int64)
    for j in range(k):
        r = (rng.random(len(sizes)) * np.maximum(sizes - j, 1)).astype(np.int64)
        taken = np.sort(ranks[:, :j], axis=1)
        for c in range(j):
            r += r >= taken[:, c]
        ranks[:, j] = r
    return ranks


def sample_triplets(corpus, queries, hop_indptr, hop_indices, per_query, hard, rng, counts):
    """SPECTER triplets for a chunk of queries: ``per_query`` each, up to ``hard`` of them with a two-hop
    negative and the rest (all, when a query has no two-hop documents) with easy ones: random documents that
    are neither the query, nor linked, nor two hops away. A query's negatives are distinct. Every triplet draws
    its own positive from the query's links.

    Returns arrays ``(query, pos, neg, hard)``, query by query, hard triplets first.
    """
    links = corpus.links
    degree = np.diff(links.indptr)[queries]
    positives = links.indices[links.indptr[queries][:, None]
                              + rng.integers(0, degree[:, None], size=(len(queries), per_query))]
    n_hop = np.diff(hop_indptr)
    n_hard = np.minimum(n_hop, hard)
    ranks = _distinct_ranks(n_hop, hard, rng)  # hard negatives: a random distinct subset of the two-hop docs
    take = np.arange(hard)[None, :] < n_hard[:, None]
    hard_negs = hop_indices[(hop_indptr[:-1, None] + ranks)[take]]
    easy_flat, n_easy = easy_negatives(queries, per_query - n_hard, links, corpus.n, rng, counts,
                                        (hop_indptr, hop_indices))
    row = np.concatenate([np.repeat(np.arange(len(queries)), n_hard), np.repeat(np.arange(len(queries)), n_easy)])
    is_hard = np.concatenate([np.ones(len(hard_negs), dtype=bool), np.zeros(len(easy_flat), dtype=bool)])
    neg = np.concatenate([hard_negs, easy_flat])
    order = np.argsort(row, kind="stable")  # per query: its hard negatives, then its easy ones
    row, is_hard, neg = row[order], is_hard[order], neg[order]
    slot = np.arange(len(row)) - np.concatenate([[0], np.cumsum(n_hard + n_easy)])[row]
    counts["triplets_hard"] = counts.get("triplets_hard", 0) + int(n_hard.sum())
    return queries[row], positives[row, slot], neg, is_hard


class TripletText:
    """triplets.{train,val}.jsonl lines: ``{"query": id, "pos": id, "neg": id, "hard": bool}``."""

    def __init__(self, enc):
        self.n = len(enc)
        self.tokens = jsontext.TokenTable([b'{"query": %s', b', "pos": %s', b', "neg": %s'], enc,
                                          [b', "hard": false}\n', b', "hard": true}\n'])

    def lines(self, q, p, n, hard):
        return self.tokens.render(np.stack([q, self.n + p, 2 * self.n + n, 3 * self.n + hard], axis=1).ravel())


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


def write_training_files(outputs, corpus, queries, rngs, per_query, hard, graph_json, counts):
    """SPECTER's training files of ``corpus`` (the training side): the graph (links count 5, two-hop documents 1;
    graph.npz, and graph.json with ``graph_json``), written by a second process while this one draws each query's
    triplets into triplets.{train,val}.jsonl (``queries`` and ``rngs`` by split): a positive from its links,
    ``hard`` negatives two hops away, the rest random."""
    from common.data import graph
    from common.pool import Background
    encoded_ids = [jsontext.json_bytes(i) for i in corpus.ids]  # once, before the fork, for both writers
    graph_file = Background(graph.write_training_graph, outputs.tmp_path("graph.npz"),
                            outputs.tmp_path("graph.json") if graph_json else None, corpus, encoded_ids,
                            what="the training graph (graph.npz)")
    try:
        text = TripletText(encoded_ids)
        for name, rng in rngs.items():
            with outputs.open(f"triplets.{name}.jsonl", "wb") as out:
                counts[f"triplets_{name}"] = write_triplets(out, corpus, text, queries[name], per_query, hard, rng,
                                                            counts)
        counts["two_hop_pairs"] = graph_file.result()
    finally:
        graph_file.cancel()
