"""What lies near a query in the link graph and what lies far: the documents two links away (SPECTER's hard
negatives), and random documents neither the query nor linked to it (easy negatives, unlinked candidates).

Two-hop neighbours are computed for a chunk of rows at a time (``A[rows] @ A``), so the full square of a
million-article graph is never held.
"""

import numpy as np


def in_sorted(sorted_keys, keys):
    if not len(sorted_keys):
        return np.zeros(len(keys), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return sorted_keys[pos] == keys


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
    keep = ~(in_sorted(direct_keys, keys) | (reach.indices == rows[r_rows]))
    counts = np.bincount(r_rows[keep], minlength=len(rows))
    indptr = np.concatenate([[0], np.cumsum(counts)])
    return indptr, reach.indices[keep].astype(np.int64)


def easy_negatives(queries, need, links, n, rng, counts, also_exclude=None):
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
        ok = (cand != queries[slot_query[open_]]) & ~in_sorted(taken, key)
        for keys in forbidden:
            ok &= ~in_sorted(keys, key)
        _, first = np.unique(key, return_index=True)  # one of several equal draws in this round
        is_first = np.zeros(len(key), dtype=bool)
        is_first[first] = True
        ok &= is_first
        out[open_[ok]] = cand[ok]
        taken = np.sort(np.concatenate([taken, key[ok]]))
        open_ = open_[~ok]
    return out, need
