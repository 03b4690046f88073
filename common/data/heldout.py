"""The documents kept out of training so that evaluation is on documents not seen in fine-tuning (the thesis):
which they are (``--eval-docs``), the training corpus without them and every link to or from them, the training
and validation queries that remain, and the warning where little remains."""

import numpy as np
import scipy.sparse as sp

from common import jsontext
from common.data.articles import CHUNK_ROWS, Corpus


def evaluation_documents(mode, candidates, topic_parts):
    """The documents no triplet may touch: every cross-reference query and candidate and every topic document
    (``heldout``), the cross-reference documents and topic test documents only (``test``), or none (``shared``)."""
    if mode == "shared":
        return np.zeros(0, dtype=np.int64)
    parts = [np.array([q for q, _, _ in candidates], dtype=np.int64)]
    parts += [np.asarray(d, dtype=np.int64) for _, p, n in candidates for d in (p, n)]
    parts += [test if mode == "test" else np.concatenate([train, test]) for train, test in topic_parts.values()]
    return np.unique(np.concatenate(parts))


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


def training_side(corpus, excluded, splits, train_queries, rng, counts):
    """What training keeps once ``excluded`` is kept out: the training corpus (``training_corpus``), its
    train/validation queries in its own numbering (``training_queries``; at most ``train_queries`` training ones, a
    seeded sample, where that is fewer; 0: all), and ``splits`` with those queries in the full corpus's numbering
    (splits.json's)."""
    train_corpus, new_number = training_corpus(corpus, excluded, counts)
    queries = training_queries(splits, new_number, train_corpus, counts)
    if 0 < train_queries < len(queries["train"]):  # a seeded sample, for a quick or smaller run
        queries["train"] = np.sort(rng.choice(queries["train"], train_queries, replace=False))
    kept_docs = np.flatnonzero(new_number >= 0)
    kept = {**splits, **{name: kept_docs[members] for name, members in queries.items()}}
    for name, members in kept.items():
        counts[f"queries_{name}"] = int(len(members))
    return train_corpus, queries, kept


def write_splits(ids, kept, outputs):
    """splits.json: the ids of each split's queries (``kept``, as ``training_side`` returns it)."""
    with outputs.open("splits.json") as f:
        f.write(jsontext.dumps_line({name: [ids[i] for i in part.tolist()] for name, part in kept.items()}))


def too_few_left(eval_docs, n, excluded, splits, kept):
    """The warning where the evaluation documents are more than half the ``n`` documents, or leave fewer than half
    the training and validation queries of ``splits`` (``kept``: those that remain); None otherwise."""
    before, after = (len(s["train"]) + len(s["val"]) for s in (splits, kept))
    if eval_docs == "shared" or (len(excluded) <= n / 2 and after >= before / 2):
        return None
    return (f"warning: the {len(excluded)} evaluation documents are {len(excluded) / max(n, 1):.0%} of the {n} "
            f"documents; {after} of {before} training queries remain. Use --eval-docs test or shared, or fewer "
            "--crossref-queries, on a corpus this small")
