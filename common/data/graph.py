"""The link graph as integer CSR arrays: direct links, two-hop hard negatives, splits, triplets, qrels, topics.

Documents are numbered 0..N-1 in file order. Direct links are a scipy CSR matrix (deduplicated, no self-loops);
two-hop neighbours are computed a chunk of rows at a time (``A[rows] @ A``), so the full square of a
million-article graph is never held. All sampling draws from numpy generators spawned from one seed, in a fixed
order, so the same seed gives byte-identical files.
"""

import os
import re
import zipfile
from array import array

import numpy as np
import scipy.sparse as sp

import orjson

from common.io import InputError, read_jsonl, safe_name

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

CHUNK_ROWS = 4096  # fixed: the random streams are consumed chunk by chunk, so it is part of the seed's meaning


class Corpus:
    """What 02 keeps in memory: ids, the link matrix and label codes, no text."""

    def __init__(self, ids, links, labels, label_names):
        self.ids = ids
        self.links = links  # scipy CSR, N×N, boolean (only the structure is used)
        self.labels = labels  # {level: int32 array, -1 = none}
        self.label_names = label_names  # {level: [name by code]}

    @property
    def n(self):
        return len(self.ids)

    def neighbours(self, i):
        return self.links.indices[self.links.indptr[i]:self.links.indptr[i + 1]]


class _Interner(dict):
    """id string → node number, numbering ids in order of first sight; a lookup of a new id assigns one, so
    ``map(interner.__getitem__, links)`` numbers a whole link list in C and only new ids reach Python."""

    def __init__(self, path):
        super().__init__()
        self.path = path
        self.lineno = 0

    def __missing__(self, key):
        if not isinstance(key, str):
            raise InputError(f"{self.path}:{self.lineno}: field 'links' must be a list of strings")
        value = self[key] = len(self)
        return value


def read_articles(path, docs_out, counts):
    """Read articles.jsonl once: validate every line, write docs.jsonl (``docs_out``, binary), build the link
    matrix."""
    interner = _Interner(path)
    doc_nodes, degrees, dst = array("i"), array("q"), array("i")  # node numbers fit 32 bits, as in the matrix
    ids = []
    # level → document numbers, their label codes in order of first sight, {label: code}; a code per document
    # rather than its label string, which would be one string object per labelled document
    label_docs, label_seen, label_code = {}, {}, {}
    batch = []
    for lineno, obj in read_jsonl(path, required=("id", "title", "text", "links")):
        interner.lineno = lineno
        doc_id, title, text, links = obj["id"], obj["title"], obj["text"], obj["links"]
        if not (type(doc_id) is str and type(title) is str and type(text) is str):
            for field in ("id", "title", "text"):
                if not isinstance(obj[field], str):
                    raise InputError(f"{path}:{lineno}: field {field!r} must be a string")
        if doc_id.split() != [doc_id]:  # qrels and run files are whitespace-separated
            raise InputError(f"{path}:{lineno}: id {doc_id!r} " + (
                "holds whitespace, which the qrels files cannot carry" if doc_id else "is empty"))
        if _CONTROL.search(doc_id):  # graph.npz's fixed-width ids would lose a trailing NUL
            raise InputError(f"{path}:{lineno}: id {doc_id!r} holds a control character")
        if type(links) is not list:
            raise InputError(f"{path}:{lineno}: field 'links' must be a list of strings")
        index = len(ids)
        ids.append(doc_id)
        doc_nodes.append(interner[doc_id])
        try:
            dst.extend(map(interner.__getitem__, links))
        except TypeError:  # a list or object among the links cannot even be looked up
            raise InputError(f"{path}:{lineno}: field 'links' must be a list of strings") from None
        degrees.append(len(links))
        batch.append(orjson.dumps({"id": doc_id, "title": title, "text": text}, option=orjson.OPT_APPEND_NEWLINE))
        if len(batch) >= 4096:
            docs_out.writelines(batch)
            batch.clear()
        labels = obj.get("labels")
        if labels:
            if type(labels) is not dict:
                raise InputError(f"{path}:{lineno}: field 'labels' must be an object")
            for level, name in labels.items():
                if name is None:
                    continue
                if type(name) is not str:
                    raise InputError(f"{path}:{lineno}: label {level!r} must be a string")
                if level not in label_docs:  # a level names the topics.<level>.*.jsonl files
                    safe_name(level, f"{path}:{lineno}: label level")
                code_of = label_code.setdefault(level, {})
                label_docs.setdefault(level, array("q")).append(index)
                label_seen.setdefault(level, array("i")).append(code_of.setdefault(name, len(code_of)))
    docs_out.writelines(batch)
    n = len(ids)
    doc_nodes = np.frombuffer(doc_nodes, dtype=np.int32)
    _check_unique(path, doc_nodes, ids)
    doc_of_node = np.full(len(interner), -1, dtype=np.int32)
    doc_of_node[doc_nodes] = np.arange(n)
    del interner
    counts["documents"] = n
    counts["links_read"] = len(dst)
    links = _link_matrix(np.frombuffer(degrees, dtype=np.int64), doc_of_node, np.frombuffer(dst, dtype=np.int32), n,
                         counts)
    labels, names_by_code = {}, {}
    for level, docs in label_docs.items():
        names = sorted(label_code[level])  # codes follow the sorted label names
        sorted_code = np.empty(len(names), dtype=np.int32)
        sorted_code[[label_code[level][name] for name in names]] = np.arange(len(names))
        arr = np.full(n, -1, dtype=np.int32)
        arr[np.frombuffer(docs, dtype=np.int64)] = sorted_code[np.frombuffer(label_seen[level], dtype=np.int32)]
        labels[level], names_by_code[level] = arr, names
    return Corpus(ids, links, labels, names_by_code)


def _check_unique(path, doc_nodes, ids):
    """A repeated id is an error at the line of its second occurrence (found by re-reading, the rare path)."""
    if len(np.unique(doc_nodes)) == len(doc_nodes):
        return
    seen = set()
    for lineno, obj in read_jsonl(path):
        if obj["id"] in seen:
            raise InputError(f"{path}:{lineno}: duplicate id {obj['id']!r}")
        seen.add(obj["id"])


def _link_matrix(degrees, doc_of_node, dst_nodes, n, counts):
    """The CSR link matrix, a chunk of rows at a time: links to unknown ids, self-loops and repeats are dropped
    (counted), columns sorted within rows. Memory: the links read and the matrix, 4 bytes a link each."""
    indptr_in = np.concatenate([[0], np.cumsum(degrees)])
    cols = np.empty(len(dst_nodes), dtype=np.int32)  # the pages past the links kept are never touched
    kept_per_row = np.zeros(n, dtype=np.int64)
    written = 0
    for key in ("links_unknown_id", "links_self", "links_duplicate"):
        counts[key] = 0
    step = CHUNK_ROWS * 16
    for start in range(0, n, step):
        stop = min(start + step, n)
        lo, hi = indptr_in[start], indptr_in[stop]
        src = np.repeat(np.arange(stop - start, dtype=np.int64), degrees[start:stop])
        dst = doc_of_node[dst_nodes[lo:hi]].astype(np.int64)
        known = dst >= 0
        counts["links_unknown_id"] += int((~known).sum())
        src, dst = src[known], dst[known]
        self_loop = src + start == dst
        counts["links_self"] += int(self_loop.sum())
        src, dst = src[~self_loop], dst[~self_loop]
        keys = np.sort(src * n + dst)  # rows in order, columns sorted within rows
        if len(keys):
            keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
        counts["links_duplicate"] += int(len(src) - len(keys))
        cols[written:written + len(keys)] = keys % n
        kept_per_row[start:stop] = np.bincount(keys // n, minlength=stop - start)
        written += len(keys)
    counts["edges"] = written
    indptr = np.concatenate([[0], np.cumsum(kept_per_row)]).astype(np.int64)
    return sp.csr_matrix((np.ones(written, dtype=bool), cols[:written], indptr), shape=(n, n))


def two_hop(links, rows):
    """For each row: documents reached by a link of a link, minus its direct links and itself (sorted CSR)."""
    sub = links[rows]
    reach = (sub @ links).tocsr()
    reach.sort_indices()
    n = links.shape[0]
    r_rows = np.repeat(np.arange(len(rows), dtype=np.int64), np.diff(reach.indptr))
    keys = r_rows * n + reach.indices
    d_rows = np.repeat(np.arange(len(rows), dtype=np.int64), np.diff(sub.indptr))
    direct_keys = d_rows * n + sub.indices  # sorted, as both keys are row-major with sorted columns
    keep = ~(_in_sorted(direct_keys, keys) | (reach.indices == rows[r_rows]))
    counts = np.bincount(r_rows[keep], minlength=len(rows))
    indptr = np.concatenate([[0], np.cumsum(counts)])
    return indptr, reach.indices[keep].astype(np.int64)


def training_rows(links, rows, hop_indptr, hop_indices):
    """graph.json's entries of some rows, flat: per row its direct links, then its two-hop documents (each part
    sorted). Returns ``(entries per row, documents, is_direct)``."""
    start = links.indptr[rows]
    n_direct = links.indptr[rows + 1] - start
    lengths = n_direct + np.diff(hop_indptr)
    row_start = np.concatenate([[0], np.cumsum(lengths)])
    row = np.repeat(np.arange(len(rows)), lengths)
    rank = np.arange(len(row)) - row_start[row]
    direct = rank < n_direct[row]
    docs = np.empty(len(row), dtype=np.int64)
    docs[direct] = links.indices[(start[row] + rank)[direct]]
    docs[~direct] = hop_indices[(hop_indptr[row] + rank - n_direct[row])[~direct]]
    return lengths, docs, direct


class GraphFile:
    """graph.npz, the training graph as CSR, written a chunk of rows at a time (rows in increasing order) so that
    memory holds one chunk and a count per document. The entries go to two part files beside it and are copied
    into an uncompressed ``.npz`` on ``close``; every zip entry carries a fixed date, so that the same graph gives
    the same bytes.

    | array   | dtype, shape          | content                                                            |
    |---------|-----------------------|--------------------------------------------------------------------|
    | ids     | ``S<width>``, [N]     | document ids, UTF-8, NUL-padded, the training documents in docs.jsonl order |
    | indptr  | int64, [N + 1]        | row ``i``'s entries are ``indptr[i]:indptr[i + 1]``                  |
    | indices | int32, [E]            | per row its direct links, then its two-hop documents, each part ascending |
    | counts  | uint8, [E]            | SPECTER's ``count``: 5 for a direct link, 1 for a two-hop document |
    """

    def __init__(self, path, ids):
        self.path, self.ids = path, ids
        self.lengths = np.zeros(len(ids), dtype=np.int64)
        self.parts = {name: open(f"{path}.{name}.tmp", "wb") for name in ("indices", "counts")}

    def add(self, rows, lengths, docs, direct):
        self.lengths[rows] = lengths
        self.parts["indices"].write(docs.astype("<i4").tobytes())
        self.parts["counts"].write(np.where(direct, 5, 1).astype(np.uint8).tobytes())

    def close(self):
        width = max((len(i.encode("utf-8")) for i in self.ids), default=1)
        ids = np.empty(len(self.ids), dtype=f"S{width}")
        for start in range(0, len(self.ids), 65536):
            ids[start:start + 65536] = [i.encode("utf-8") for i in self.ids[start:start + 65536]]
        indptr = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)
        with zipfile.ZipFile(self.path, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
            for name, array_ in (("ids", ids), ("indptr", indptr)):
                with z.open(zipfile.ZipInfo(f"{name}.npy"), "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, array_, allow_pickle=False)
            for name, dtype in (("indices", "<i4"), ("counts", "|u1")):
                part = self.parts[name]
                part.close()
                with z.open(zipfile.ZipInfo(f"{name}.npy"), "w", force_zip64=True) as f, open(part.name, "rb") as src:
                    np.lib.format.write_array_header_1_0(f, {"descr": dtype, "fortran_order": False,
                                                             "shape": (int(indptr[-1]),)})
                    while block := src.read(1 << 24):
                        f.write(block)
                os.remove(part.name)


def split_queries(corpus, holdout, val, rng):
    """Queries are documents with at least one link; held out for evaluation first, the rest train/val."""
    degree = np.diff(corpus.links.indptr)
    queries = np.flatnonzero(degree > 0)
    perm = rng.permutation(queries)
    n_hold = int(round(holdout * len(perm)))
    rest = perm[n_hold:]
    n_val = int(round(val * len(rest)))
    return {"train": np.sort(rest[n_val:]), "val": np.sort(rest[:n_val]), "holdout": np.sort(perm[:n_hold])}


def _in_sorted(sorted_keys, keys):
    if not len(sorted_keys):
        return np.zeros(len(keys), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return sorted_keys[pos] == keys


def _easy_negatives(queries, need, links, n, rng, counts, also_exclude=None):
    """``need[i]`` distinct documents per query that are neither the query nor one of its links (nor, with
    ``also_exclude = (indptr, indices)`` per query, one of those). Returns them flat, query by query, and the
    number per query (fewer than asked where a query has not enough candidates; counted)."""
    local = np.arange(len(queries), dtype=np.int64)
    ptr = links.indptr
    degree = ptr[queries + 1] - ptr[queries]
    link_rows = np.repeat(local, degree)
    link_cols = links.indices[np.repeat(ptr[queries] - np.concatenate([[0], np.cumsum(degree)[:-1]]), degree)
                              + np.arange(int(degree.sum()))]
    forbidden = [link_rows * n + link_cols]  # each sorted (row-major, sorted columns)
    available = n - 1 - degree
    if also_exclude is not None:
        ex_indptr, ex_indices = also_exclude
        available = available - np.diff(ex_indptr)
        forbidden.append(np.repeat(local, np.diff(ex_indptr)) * n + ex_indices)
    short = need > available
    counts["easy_negatives_short"] = counts.get("easy_negatives_short", 0) + int((need - available)[short].sum())
    need = np.minimum(need, np.maximum(available, 0))
    slot_query = np.repeat(local, need)
    out = np.full(len(slot_query), -1, dtype=np.int64)
    taken = np.zeros(0, dtype=np.int64)  # sorted keys of accepted negatives
    open_ = np.arange(len(slot_query))
    while len(open_):
        cand = rng.integers(0, n, size=len(open_))
        key = slot_query[open_] * n + cand
        ok = (cand != queries[slot_query[open_]]) & ~_in_sorted(taken, key)
        for keys in forbidden:
            ok &= ~_in_sorted(keys, key)
        _, first = np.unique(key, return_index=True)  # one of several equal draws in this round
        is_first = np.zeros(len(key), dtype=bool)
        is_first[first] = True
        ok &= is_first
        out[open_[ok]] = cand[ok]
        taken = np.sort(np.concatenate([taken, key[ok]]))
        open_ = open_[~ok]
    return out, need


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
    easy_flat, n_easy = _easy_negatives(queries, per_query - n_hard, links, corpus.n, rng, counts,
                                        (hop_indptr, hop_indices))
    row = np.concatenate([np.repeat(np.arange(len(queries)), n_hard), np.repeat(np.arange(len(queries)), n_easy)])
    is_hard = np.concatenate([np.ones(len(hard_negs), dtype=bool), np.zeros(len(easy_flat), dtype=bool)])
    neg = np.concatenate([hard_negs, easy_flat])
    order = np.argsort(row, kind="stable")  # per query: its hard negatives, then its easy ones
    row, is_hard, neg = row[order], is_hard[order], neg[order]
    slot = np.arange(len(row)) - np.concatenate([[0], np.cumsum(n_hard + n_easy)])[row]
    counts["triplets_hard"] = counts.get("triplets_hard", 0) + int(n_hard.sum())
    return queries[row], positives[row, slot], neg, is_hard


def crossref_candidates(corpus, holdout, max_queries, min_links, positives, negatives, rng, counts):
    """Cross-reference ranking candidates: per query, linked positives (rel 1) and random unlinked negatives.
    Returns ``[(query, positives, negatives)]`` as document numbers."""
    degree = np.diff(corpus.links.indptr)
    eligible = holdout[degree[holdout] >= min_links]
    if len(eligible) > max_queries:
        eligible = np.sort(rng.choice(eligible, max_queries, replace=False))
    counts["crossref_queries"] = int(len(eligible))
    pos = [rng.choice(corpus.neighbours(q), min(positives, degree[q]), replace=False) for q in eligible.tolist()]
    flat, n_neg = _easy_negatives(eligible, np.full(len(eligible), negatives), corpus.links, corpus.n, rng,
                                  counts)
    neg = np.split(flat, np.cumsum(n_neg)[:-1]) if len(eligible) else []
    return list(zip(eligible.tolist(), pos, neg))


def qrels_lines(corpus, candidates):
    """TREC qrels lines ``qid 0 docid rel`` of :func:`crossref_candidates`."""
    lines = []
    for q, p, ng in candidates:
        qid = corpus.ids[q]
        lines.extend(f"{qid} 0 {corpus.ids[d]} 1\n" for d in p.tolist())
        lines.extend(f"{qid} 0 {corpus.ids[d]} 0\n" for d in ng.tolist())
    return lines


def training_corpus(corpus, excluded, counts):
    """The corpus without the documents in ``excluded`` (document numbers) and every link to or from them, so no
    triplet can take one as query, positive or negative. Returns the smaller corpus (renumbered, no labels) and,
    per document of the full corpus, its number there (-1 for an excluded one).

    The links are filtered in place, a chunk of rows at a time, so the link matrix is never held twice; the full
    corpus keeps no links afterwards (``corpus.links`` is None) where documents were excluded."""
    keep = np.ones(corpus.n, dtype=bool)
    keep[excluded] = False
    kept = np.flatnonzero(keep)
    new_number = np.full(corpus.n, -1, dtype=np.int64)
    new_number[kept] = np.arange(len(kept))
    links = corpus.links
    counts["eval_documents"] = int(corpus.n - len(kept))
    counts["eval_links_dropped"] = int(links.nnz)
    if len(kept) < corpus.n:
        links = _drop_documents(links, keep, new_number, len(kept))
        corpus.links = None
    counts["eval_links_dropped"] -= int(links.nnz)
    return Corpus([corpus.ids[i] for i in kept.tolist()], links, {}, {}), new_number


def _drop_documents(links, keep, new_number, n_kept):
    """``links`` restricted to the rows and columns in ``keep``, renumbered, reusing its own arrays: the kept
    entries of a chunk are moved to the front of ``indices`` (never past the chunk being read), and the columns
    stay sorted within rows because the renumbering keeps their order."""
    indptr, indices = links.indptr, links.indices
    n = len(keep)
    kept_per_row = np.zeros(n, dtype=np.int64)
    written = 0
    for start in range(0, n, CHUNK_ROWS * 16):
        stop = min(start + CHUNK_ROWS * 16, n)
        lo, hi = indptr[start], indptr[stop]
        rows = np.repeat(np.arange(start, stop), np.diff(indptr[start:stop + 1]))
        ok = keep[rows] & keep[indices[lo:hi]]
        moved = new_number[indices[lo:hi][ok]].astype(np.int32)
        indices[written:written + len(moved)] = moved
        kept_per_row[start:stop] = np.bincount(rows[ok] - start, minlength=stop - start)
        written += len(moved)
    new_indptr = np.concatenate([[0], np.cumsum(kept_per_row[keep])]).astype(np.int64)
    return sp.csr_matrix((links.data[:written], indices[:written], new_indptr), shape=(n_kept, n_kept))


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
