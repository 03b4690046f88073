"""The link graph as integer CSR arrays: direct links, two-hop hard negatives, splits, triplets, qrels, topics.

Documents are numbered 0..N-1 in file order. Direct links are a scipy CSR matrix (deduplicated, no self-loops);
two-hop neighbours are computed a chunk of rows at a time (``A[rows] @ A``), so the full square of a
million-article graph is never held. All sampling draws from numpy generators spawned from one seed, in a fixed
order, so the same seed gives byte-identical files.
"""

import json
from array import array

import numpy as np
import scipy.sparse as sp

from common.io import InputError, read_jsonl

CHUNK_ROWS = 4096  # fixed: the random streams are consumed chunk by chunk, so it is part of the seed's meaning


class Corpus:
    """What 02 keeps in memory: ids, the link matrix and label codes, no text."""

    def __init__(self, ids, links, labels, label_names, counts):
        self.ids = ids
        self.links = links  # scipy CSR, N×N, int32 ones
        self.labels = labels  # {level: int32 array, -1 = none}
        self.label_names = label_names  # {level: [name by code]}
        self.counts = counts

    @property
    def n(self):
        return len(self.ids)

    def neighbours(self, i):
        return self.links.indices[self.links.indptr[i]:self.links.indptr[i + 1]]


def _check_str_list(value, field, path, lineno):
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise InputError(f"{path}:{lineno}: field {field!r} must be a list of strings")


def read_articles(path, docs_out, counts):
    """Read articles.jsonl once: validate every line, write docs.jsonl, build the link matrix."""
    node_of = {}  # id string → node number (documents and link targets, in order of first sight)
    doc_of_node = array("q")
    ids = []
    src, dst = array("i"), array("q")
    level_codes, label_names, label_code = {}, {}, {}
    for lineno, obj in read_jsonl(path, required=("id", "title", "text", "links")):
        doc_id = obj["id"]
        for field in ("id", "title", "text"):
            if not isinstance(obj[field], str):
                raise InputError(f"{path}:{lineno}: field {field!r} must be a string")
        _check_str_list(obj["links"], "links", path, lineno)
        node = node_of.setdefault(doc_id, len(node_of))
        if node == len(doc_of_node):
            doc_of_node.append(-1)
        if doc_of_node[node] != -1:
            raise InputError(f"{path}:{lineno}: duplicate id {doc_id!r}")
        index = len(ids)
        doc_of_node[node] = index
        ids.append(doc_id)
        docs_out.write(json.dumps({"id": doc_id, "title": obj["title"], "text": obj["text"]},
                                  ensure_ascii=False) + "\n")
        for target in obj["links"]:
            t = node_of.setdefault(target, len(node_of))
            if t == len(doc_of_node):
                doc_of_node.append(-1)
            src.append(index)
            dst.append(t)
        labels = obj.get("labels") or {}
        if not isinstance(labels, dict):
            raise InputError(f"{path}:{lineno}: field 'labels' must be an object")
        for level, name in labels.items():
            if name is None:
                continue
            if not isinstance(name, str):
                raise InputError(f"{path}:{lineno}: label {level!r} must be a string")
            codes = level_codes.setdefault(level, array("i"))
            names = label_code.setdefault(level, {})
            code = names.setdefault(name, len(names))
            if code == len(label_names.setdefault(level, [])):
                label_names[level].append(name)
            codes.extend([-1] * (index + 1 - len(codes)))
            codes[index] = code
    n = len(ids)
    counts["documents"] = n
    counts["links_read"] = len(src)
    del node_of
    links = _link_matrix(np.frombuffer(src, dtype=np.int32), np.frombuffer(doc_of_node, dtype=np.int64),
                         np.frombuffer(dst, dtype=np.int64), n, counts)
    labels = {}
    for level, codes in level_codes.items():
        arr = np.full(n, -1, dtype=np.int32)
        arr[:len(codes)] = np.frombuffer(codes, dtype=np.int32)
        labels[level] = arr
    return Corpus(ids, links, labels, label_names, counts)


def _link_matrix(src, doc_of_node, dst_nodes, n, counts):
    dst = doc_of_node[dst_nodes] if len(dst_nodes) else np.zeros(0, dtype=np.int64)
    known = dst >= 0
    counts["links_unknown_id"] = int((~known).sum())
    src, dst = src[known].astype(np.int64), dst[known]
    self_loop = src == dst
    counts["links_self"] = int(self_loop.sum())
    src, dst = src[~self_loop], dst[~self_loop]
    keys = np.unique(src * n + dst)  # sorted: rows in order, columns sorted within rows
    counts["links_duplicate"] = int(len(src) - len(keys))
    counts["edges"] = int(len(keys))
    rows, cols = keys // n if n else keys, keys % n if n else keys
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(indptr, rows + 1, 1)
    indptr = np.cumsum(indptr)
    data = np.ones(len(cols), dtype=np.int32)
    return sp.csr_matrix((data, cols.astype(np.int32), indptr), shape=(n, n))


def two_hop(links, rows):
    """For each row: documents reached by a link of a link, minus its direct links and itself (sorted CSR)."""
    sub = links[rows]
    reach = (sub @ links).tocsr()
    reach.sort_indices()
    n = links.shape[0]
    r_rows = np.repeat(np.arange(len(rows), dtype=np.int64), np.diff(reach.indptr))
    keys = r_rows * n + reach.indices
    d_rows = np.repeat(np.arange(len(rows), dtype=np.int64), np.diff(sub.indptr))
    exclude = np.concatenate([d_rows * n + sub.indices, np.arange(len(rows), dtype=np.int64) * n + rows])
    keep = ~np.isin(keys, exclude)
    counts = np.bincount(r_rows[keep], minlength=len(rows))
    indptr = np.concatenate([[0], np.cumsum(counts)])
    return indptr, reach.indices[keep].astype(np.int64)


def split_queries(corpus, holdout, val, rng):
    """Queries are documents with at least one link; held out for evaluation first, the rest train/val."""
    degree = np.diff(corpus.links.indptr)
    queries = np.flatnonzero(degree > 0)
    perm = rng.permutation(queries)
    n_hold = int(round(holdout * len(perm)))
    rest = perm[n_hold:]
    n_val = int(round(val * len(rest)))
    return {"train": np.sort(rest[n_val:]), "val": np.sort(rest[:n_val]), "holdout": np.sort(perm[:n_hold])}


def _easy_negatives(queries, need, links, n, rng, counts, also_exclude=None):
    """``need[i]`` distinct documents per query that are neither the query nor one of its links (nor, with
    ``also_exclude = (indptr, indices)`` per query, one of those)."""
    degree = np.diff(links.indptr)[queries]
    available = n - 1 - degree
    extra_keys = np.zeros(0, dtype=np.int64)
    if also_exclude is not None:
        ex_indptr, ex_indices = also_exclude
        available = available - np.diff(ex_indptr)
        extra_keys = np.repeat(np.arange(len(queries), dtype=np.int64), np.diff(ex_indptr)) * n + ex_indices
    short = need > available
    counts["easy_negatives_short"] = counts.get("easy_negatives_short", 0) + int((need - available)[short].sum())
    need = np.minimum(need, np.maximum(available, 0))
    slot_query = np.repeat(np.arange(len(queries)), need)
    out = np.full(len(slot_query), -1, dtype=np.int64)
    edge_keys = None
    open_ = np.arange(len(slot_query))
    while len(open_):
        q_local = slot_query[open_]
        q = queries[q_local]
        cand = rng.integers(0, n, size=len(open_))
        ok = cand != q
        if edge_keys is None:
            edge_keys = _edge_keys(links)
        key = q * n + cand
        pos = np.searchsorted(edge_keys, key)
        pos = np.minimum(pos, max(len(edge_keys) - 1, 0))
        if len(edge_keys):
            ok &= edge_keys[pos] != key
        # distinct within a query: a candidate already taken (or taken earlier in this round) is drawn again
        taken = out >= 0
        prior = np.concatenate([extra_keys, slot_query[taken] * n + out[taken]])
        all_keys = np.concatenate([prior, q_local * n + cand])
        _, first = np.unique(all_keys, return_index=True)
        is_first = np.zeros(len(all_keys), dtype=bool)
        is_first[first] = True
        ok &= is_first[len(prior):]
        out[open_[ok]] = cand[ok]
        open_ = open_[~ok]
    return np.split(out, np.cumsum(need)[:-1]) if len(need) else []


def _edge_keys(links):
    n = links.shape[0]
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(links.indptr))
    return rows * n + links.indices


def sample_triplets(corpus, queries, hop_indptr, hop_indices, per_query, hard, rng, counts):
    """SPECTER triplets for a chunk of queries: ``per_query`` each, up to ``hard`` of them with a two-hop
    negative and the rest (all, when a query has no two-hop documents) with easy ones: random documents that
    are neither the query, nor linked, nor two hops away. A query's negatives are distinct. Every triplet draws
    its own positive from the query's links."""
    links = corpus.links
    degree = np.diff(links.indptr)[queries]
    positives = links.indices[links.indptr[queries][:, None]
                              + rng.integers(0, degree[:, None], size=(len(queries), per_query))]
    n_hop = np.diff(hop_indptr)
    n_hard = np.minimum(n_hop, hard)
    # hard negatives: a random distinct subset of each query's two-hop documents
    entry_row = np.repeat(np.arange(len(queries)), n_hop)
    order = np.lexsort((rng.random(len(hop_indices)), entry_row))
    rank = np.arange(len(order)) - hop_indptr[entry_row[order]]
    chosen = order[rank < n_hard[entry_row[order]]]
    hard_negs = np.split(hop_indices[chosen], np.cumsum(n_hard)[:-1])
    easy_negs = _easy_negatives(queries, per_query - n_hard, links, corpus.n, rng, counts,
                                (hop_indptr, hop_indices))
    out = []
    for i, q in enumerate(queries.tolist()):
        negs = [(int(x), True) for x in hard_negs[i]] + [(int(x), False) for x in easy_negs[i]]
        for (neg, is_hard), pos in zip(negs, positives[i].tolist()):
            out.append((q, pos, neg, is_hard))
    counts["triplets_hard"] = counts.get("triplets_hard", 0) + int(n_hard.sum())
    return out


def crossref_qrels(corpus, holdout, max_queries, min_links, positives, negatives, rng, counts):
    """Cross-reference ranking candidates: per query, linked positives (rel 1) and random unlinked negatives."""
    degree = np.diff(corpus.links.indptr)
    eligible = holdout[degree[holdout] >= min_links]
    if len(eligible) > max_queries:
        eligible = np.sort(rng.choice(eligible, max_queries, replace=False))
    counts["crossref_queries"] = int(len(eligible))
    pos = [rng.choice(corpus.neighbours(q), min(positives, degree[q]), replace=False) for q in eligible.tolist()]
    neg = _easy_negatives(eligible, np.full(len(eligible), negatives), corpus.links, corpus.n, rng, counts)
    lines = []
    for q, p, ng in zip(eligible.tolist(), pos, neg):
        qid = corpus.ids[q]
        lines.extend(f"{qid} 0 {corpus.ids[d]} 1\n" for d in p.tolist())
        lines.extend(f"{qid} 0 {corpus.ids[d]} 0\n" for d in ng.tolist())
    return lines


def topic_splits(corpus, level, min_count, cap, test_size, rng, seed):
    """Labels with fewer than ``min_count`` documents dropped, at most ``cap`` documents per label, stratified
    train/test split. Returns None when fewer than two labels remain."""
    from sklearn.model_selection import train_test_split
    codes = corpus.labels[level]
    kept = []
    for code in range(len(corpus.label_names[level])):
        members = np.flatnonzero(codes == code)
        if len(members) < min_count:
            continue
        if len(members) > cap:
            members = np.sort(rng.choice(members, cap, replace=False))
        kept.append(members)
    if len(kept) < 2:
        return None
    docs = np.concatenate(kept)
    train, test = train_test_split(docs, test_size=test_size, stratify=codes[docs], random_state=seed)
    return np.sort(train), np.sort(test)
