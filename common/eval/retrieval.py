"""Paper search evaluation: exact search over the whole corpus by each model's similarity (cosine where its folder
states none), the ranking metrics, and the BM25 baseline.

Metrics (mean over every query of the qrels; a query with no relevant document retrieved scores 0), with R = the
query's number of relevant documents (relevance above 0) and a document's gain its relevance (1 in paper search;
graded in BEIR's qrels):

| metric      | definition                                                                              |
|-------------|-----------------------------------------------------------------------------------------|
| MRR@10      | 1 / rank of the first relevant document in the top 10, else 0                           |
| nDCG@10     | Σ_{i≤10} gain_i / log2(i + 1), over the same sum for the relevant documents, best first |
| Recall@k    | relevant documents in the top k / R (k = 1, 5, 10, 100)                                  |
| MAP@100     | Σ over relevant documents in the top 100 of precision at their rank, / R                 |

These are trec_eval's ``recip_rank`` (on a run cut to 10), ``ndcg_cut_10``, ``recall_k`` and ``map_cut_100``;
rankings break score ties by document id descending, as trec_eval sorts. sentence-transformers'
``InformationRetrievalEvaluator`` agrees except that its MAP@k divides by min(k, R) and it breaks ties by ascending
corpus id, so the two coincide when R ≤ k and no scores tie (both tested).
"""

import os
import time
from dataclasses import replace

import numpy as np

from common import io
from common.cli import LENGTH
from common.data.retrieval import read_queries
from common.eval import ann, trec_run, uncertainty
from common.eval.embedding import (embed_corpus, embed_queries, embedding_settings, is_retrieval_data,
                                  load_model)
from common.eval.metrics import average_precision, ndcg, trec_order
from common.io import InputError, open_input, read_trec_qrels
from common.models.encoder import POOLINGS
from common.models.precision import PRECISIONS
from common.vectors import check_finite_rows, read_rows

K = 100
CUTOFFS = {"mrr": (10,), "ndcg": (10,), "recall": (1, 5, 10, 100), "map": (100,)}


def search(queries, docs, k=K, chunk=65536, query_chunk=1024, similarity=None):
    """Top ``k`` documents per query by the model's ``similarity`` (``similarity_fn_name``; None, a model that states
    none: cosine): ``(indices [Q, k], scores [Q, k])``, best first, equal scores by document position descending.
    Documents are scored ``chunk`` rows at a time and merged into a running top k (``torch.topk``, linear in the
    chunk), so memory is O(query_chunk × chunk) besides the vectors, which may be a read-only memory map (a chunk is
    copied as it is scored); an exact tie across the k-th place is resolved arbitrarily."""
    import torch

    def rows(start):
        return torch.from_numpy(np.array(docs[start:start + chunk], dtype=np.float32))

    queries = torch.as_tensor(np.asarray(queries), dtype=torch.float32)
    cosine = similarity in (None, "cosine")
    if cosine:
        queries = torch.nn.functional.normalize(queries, dim=1)
        # cosine = dot product scaled by each document's inverse norm: no normalised copy of the documents
        inverse_norm = torch.cat([1 / torch.linalg.vector_norm(rows(s), dim=1).clamp_min(1e-12)
                                  for s in range(0, len(docs), chunk)]) if len(docs) else torch.empty(0)

    def scored(q, start):
        if cosine:
            return (q @ rows(start).T) * inverse_norm[start:start + chunk]
        if similarity == "dot":
            return q @ rows(start).T
        return -torch.cdist(q, rows(start), p=1 if similarity == "manhattan" else 2,
                            compute_mode="donot_use_mm_for_euclid_dist")

    k = min(k, len(docs))
    all_idx, all_scores = [], []
    for qs in range(0, len(queries), query_chunk):
        q = queries[qs:qs + query_chunk]
        best_s = torch.empty((len(q), 0))
        best_i = torch.empty((len(q), 0), dtype=torch.long)
        for ds in range(0, len(docs), chunk):
            scores = scored(q, ds)
            top_s, top_i = torch.topk(scores, min(k, scores.shape[1]), dim=1)
            best_s, best_i = torch.cat([best_s, top_s], 1), torch.cat([best_i, top_i + ds], 1)
            keep = torch.topk(best_s, k, dim=1).indices if best_s.shape[1] > k else None
            if keep is not None:
                best_s, best_i = best_s.gather(1, keep), best_i.gather(1, keep)
        # position descending first, then a stable sort by score
        by_pos = torch.argsort(best_i, dim=1, descending=True)
        best_s, best_i = best_s.gather(1, by_pos), best_i.gather(1, by_pos)
        by_score = torch.sort(best_s, dim=1, descending=True, stable=True).indices
        all_idx.append(best_i.gather(1, by_score).cpu())
        all_scores.append(best_s.gather(1, by_score).cpu())
    return torch.cat(all_idx).numpy(), torch.cat(all_scores).numpy()


def query_metrics(ranked, relevant):
    """The metrics of one query from its ranked document ids (best first) and its relevant ids: a set (each gains
    1), or {id: relevance} of graded qrels, where nDCG@10 gains the relevance, as trec_eval's does, and the other
    metrics count every relevance above 0."""
    gain = {doc: rel for doc, rel in relevant.items() if rel > 0} if isinstance(relevant, dict) else \
        dict.fromkeys(relevant, 1)
    gains = [gain.get(doc, 0) for doc in ranked[:K]]
    hits = np.array(gains, dtype=np.float64) > 0
    r = len(gain)
    out = {}
    first = np.flatnonzero(hits[:10])
    out["mrr@10"] = 1.0 / (first[0] + 1) if len(first) else 0.0
    out["ndcg@10"] = ndcg(gains, gain.values(), cutoff=10)
    for k in CUTOFFS["recall"]:
        out[f"recall@{k}"] = float(hits[:k].sum() / r) if r else 0.0
    out["map@100"] = average_precision(gains, r, cutoff=100)
    return out


def retrieval_scores(run, qrels):
    """Mean metrics over the queries of ``qrels`` ({qid: set of relevant ids, or {id: relevance}}; ``run`` = {qid:
    ranked ids}), and their per-query values as a ``uncertainty.Sample`` (None without queries)."""
    per_query = [query_metrics(run.get(qid, []), relevant) for qid, relevant in qrels.items()]
    if not per_query:
        return {}, None
    names = tuple(per_query[0])
    return ({name: float(np.mean([m[name] for m in per_query])) for name in names},
            uncertainty.means([[m[name] for name in names] for m in per_query], names,
                              ("query", "queries")))


def retrieval_metrics(run, qrels):
    """Mean metrics over the queries of ``qrels``: ``retrieval_scores`` without the per-query values."""
    return retrieval_scores(run, qrels)[0]


def ranking(indices, scores, doc_ids, qids):
    """{qid: [(document id, score)] best first} from a top-k search, rows in ``qids`` order, ties in trec_eval's
    order."""
    run = {}
    for qid, row, row_scores in zip(qids, indices, scores):  # a row at a time: no Python copy of the whole arrays
        ids, values = [doc_ids[j] for j in row.tolist()], row_scores.tolist()
        run[qid] = [(ids[j], values[j]) for j in trec_order(values, ids)]
    return run


def ranked_ids(ranked):
    """{qid: ranked document ids} of a ``ranking``."""
    return {qid: [doc for doc, _ in docs] for qid, docs in ranked.items()}


def dense_ranking(query_vecs, doc_vecs, qids, doc_ids, similarity=None):
    """``ranking`` of an exact search by ``similarity`` (cosine where None)."""
    return ranking(*search(query_vecs, doc_vecs, similarity=similarity), doc_ids, qids)


def dense_run(query_vecs, doc_vecs, qids, doc_ids, similarity=None):
    """{qid: ranked document ids} of an exact search by ``similarity`` (cosine where None)."""
    return ranked_ids(dense_ranking(query_vecs, doc_vecs, qids, doc_ids, similarity))


def dense_retrieval(query_vecs, doc_vecs, qids, doc_ids, qrels):
    return retrieval_metrics(dense_run(query_vecs, doc_vecs, qids, doc_ids), qrels)


BM25_SETTINGS = {"method": "lucene", "k1": 1.5, "b": 0.75, "lowercase": True, "token_pattern": r"(?u)\b\w\w+\b",
                 "stopwords": "en", "stemmer": "snowball"}


def bm25(doc_texts, doc_ids, query_texts, qids, qrels, language="english", k=K):
    """The BM25 baseline with ``bm25s`` (Lucene's variant, k1 1.5, b 0.75); corpus and queries go through one
    tokenizer: lower-cased, ``(?u)\\b\\w\\w+\\b`` tokens, English stop words, NLTK's Snowball stemmer. Returns the
    metrics, their per-query values (``retrieval_scores``), the settings used and the ``ranking``."""
    import bm25s
    from bm25s.tokenization import Tokenizer
    from nltk.stem.snowball import SnowballStemmer
    stem = SnowballStemmer(language).stem
    tokenizer = Tokenizer(lower=BM25_SETTINGS["lowercase"], splitter=BM25_SETTINGS["token_pattern"],
                          stopwords=BM25_SETTINGS["stopwords"] if language == "english" else None, stemmer=stem)
    corpus = tokenizer.tokenize(list(doc_texts), update_vocab=True, return_as="ids", show_progress=False)
    retriever = bm25s.BM25(method=BM25_SETTINGS["method"], k1=BM25_SETTINGS["k1"], b=BM25_SETTINGS["b"])
    retriever.index(corpus, show_progress=False)
    tokens = tokenizer.tokenize(list(query_texts), update_vocab=False, return_as="ids", show_progress=False)
    k = min(k, len(doc_ids))
    indices, scores = retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
    # bm25s gives a text without terms the empty string as its one token, so that a query of stop words or of
    # words no document holds would match the empty and stop-word-only documents, with a positive score; such a
    # query scores every document 0, and its ties fall in trec_eval's order (ids descending)
    empty = {tokenizer.get_vocab_dict().get("")} - {None}
    last = np.array(trec_order([0.0] * len(doc_ids), list(doc_ids))[:k], dtype=indices.dtype)
    for row, query in enumerate(tokens):
        if set(query) <= empty:
            indices[row], scores[row] = last, 0.0
    ranked = ranking(indices, scores, doc_ids, qids)
    settings = {**BM25_SETTINGS, "stemmer": f"snowball-{language}"}
    return (*retrieval_scores(ranked_ids(ranked), qrels), settings, ranked)


# -- 05_evaluate.py: the retrieval task, its sharded embedding, and search ----------------------------------------

def evaluate_retrieval(models, data_dir, how, outputs, wanted, say=print):
    """Test queries against the whole corpus for every model (``retrieval``) and BM25 (``bm25``), each document's
    gain its relevance in the qrels; writes each model's corpus vectors and its ranking's run file (``trec_run``)
    into ``outputs``. Returns the metrics, the counts, the figures (none) and the per-query values, {model:
    {"retrieval": [uncertainty.Sample]}}."""
    from common.data.docs_jsonl import Documents
    metrics, counts, samples = {}, {}, {}
    docs = Documents(data_dir, texts="bm25" in wanted)  # the embedding streams them
    qids, texts = read_queries(os.path.join(data_dir, "queries.test.jsonl"))
    qrels_path = os.path.join(data_dir, "retrieval.test.qrels")
    qrels = read_trec_qrels(qrels_path)
    if not qrels:
        raise InputError(f"{qrels_path}: no test queries (an empty test split); rebuild the data with "
                         "02_build_graph.py retrieval from more papers")
    for qid, judged in qrels.items():
        unknown = set(judged) - set(docs.index)
        if unknown:
            raise InputError(f"{qrels_path}: {qid} names documents not in docs.jsonl ({sorted(unknown)[0]!r})")
    counts.update({"retrieval_documents": len(docs.ids), "retrieval_queries": len(qrels)})
    if "retrieval" in wanted:
        for name, path in models.items():
            started = time.perf_counter()
            encoder, tokenizer, settings, emb = embed_corpus(path, name, data_dir, docs, how, outputs, say=say)
            counts.setdefault("embedding", {})[name] = embedding_settings(settings)
            queries = embed_queries(encoder, tokenizer, settings, texts, how)
            counts.setdefault("embedding_seconds", {})[name] = time.perf_counter() - started
            ranked = dense_ranking(queries, emb, qids, docs.ids, settings.get("similarity"))
            trec_run.write_run(outputs, name, "retrieval", ranked)
            found, sample = retrieval_scores(ranked_ids(ranked), qrels)
            metrics.setdefault(name, {})["retrieval"] = found
            samples[name] = {"retrieval": [sample]}
    if "bm25" in wanted:
        result, sample, settings, ranked = bm25(docs.texts, docs.ids, texts, qids, qrels)
        trec_run.write_run(outputs, "bm25", "retrieval", ranked)
        metrics["bm25"] = {"retrieval": {**result, "settings": settings}}
        samples["bm25"] = {"retrieval": [sample]}
    say(f"retrieval: {len(qrels)} test queries against {len(docs.ids)} documents (a small corpus makes every "
        "method look good: compare methods on one corpus only)")
    return metrics, counts, [], samples


def has_content(text):
    """Whether a query holds a letter or a digit: one without (empty, blank, punctuation) would still be embedded
    and return documents, ranked by nothing it says."""
    return any(ch.isalnum() for ch in text)


def read_query_file(path):
    """One query per line; a line without content is an error, and so is a file without queries."""
    with open_input(path) as f:
        lines = f.read().splitlines()
    for lineno, line in enumerate(lines, 1):
        if not has_content(line):
            raise InputError(f"{path}:{lineno}: a query without a letter or digit ({line!r})")
    if not lines:
        raise InputError(f"{path}: no queries")
    return lines


def search_queries(texts, path=None):
    """05 search's queries: the texts given, then the lines of the file ``path`` (``read_query_file``); a query
    without a letter or digit, or no query at all, is one line."""
    for text in texts:
        if not has_content(text):
            raise InputError(f"query {text!r}: no letter or digit to search for")
    queries = list(texts) + (read_query_file(path) if path else [])
    if not queries:
        raise InputError("give a query text or --queries FILE")
    return queries


def saved_index(index_dir, model, doc_ids):
    """The vectors 05 wrote for ``model`` in ``index_dir`` (the evaluation's manifest names each model's path),
    checked against the data directory's documents, and how they were embedded (``recorded_embedding``):
    ``(vectors, embedded)``."""
    manifest = io.read_manifest(index_dir)
    if not manifest:
        raise InputError(f"{index_dir}: no manifest.json (not an evaluation directory)")
    wanted = os.path.abspath(model)
    models = manifest.get("args", {}).get("model")
    if not isinstance(models, dict):
        raise InputError(f"{index_dir}: not an evaluation directory of 05_evaluate.py (its manifest.json names no "
                         "NAME=MODEL vectors; a run folder?)")
    names = [name for name, path in models.items() if isinstance(path, str) and os.path.abspath(path) == wanted]
    if not names:
        raise InputError(f"{index_dir}: holds no vectors of {model} (its manifest.json names no such --model)")
    name = io.safe_name(names[0], f"{index_dir}/manifest.json: model name")
    embedded = recorded_embedding(index_dir, manifest, name)
    vectors = read_rows(index_dir, name, doc_ids)
    if vectors.ndim != 2 or not np.issubdtype(vectors.dtype, np.floating):
        raise InputError(f"{os.path.join(index_dir, name + '.npy')}: {vectors.dtype} {list(vectors.shape)}, expected "
                         "float vectors [N, d]")
    return vectors, embedded


EMBEDDING_FIELDS = {"pooling": lambda v: v in POOLINGS, "normalize": lambda v: isinstance(v, bool),
                    "max_length": lambda v: type(v) is int and LENGTH[1](v),
                    "precision": lambda v: v in PRECISIONS}


def recorded_embedding(index_dir, manifest, name):
    """How the evaluation in ``index_dir`` embedded the documents of its model ``name``, as its manifest's
    ``embedding`` record gives it (``embedding_settings``): pooling, normalisation, length and the precision that
    ran (float32 where none is recorded). A record that is missing or holds another value is one line."""
    path = os.path.join(index_dir, "manifest.json")
    records = manifest.get("embedding")
    record = records.get(name) if isinstance(records, dict) else None
    if not isinstance(record, dict):
        raise InputError(f"{path}: records no embedding of {name!r} (its pooling, normalisation and length), so its "
                         "queries cannot be embedded alike; run 05_evaluate.py again")
    embedded = {"precision": "float32", **{key: record[key] for key in EMBEDDING_FIELDS if key in record}}
    for key, valid in EMBEDDING_FIELDS.items():
        if key not in embedded or not valid(embedded[key]):
            raise InputError(f"{path}: embedding {name!r}: field {key!r} is {embedded.get(key, 'missing')!r}, not "
                             "a value 05_evaluate.py records; run it again")
    return embedded


def queries_alike(how, embedded):
    """``how`` with the pooling, normalisation, length and precision the documents were embedded with, where no
    flag gave them (a flag that gives another value is caught once the model is loaded, by ``check_alike``). The
    recorded bf16 is asked as float32 on a GPU, where float32 runs under bfloat16 autocast."""
    import torch
    precision = how.precision
    if precision == "float32":
        precision = "float32" if embedded["precision"] == "bf16" and torch.cuda.is_available() else \
            embedded["precision"]
    return replace(how, pooling={"model": how.pooling.get("model") or embedded["pooling"]},
                   normalize={"model": "yes" if embedded["normalize"] else "no"},
                   max_length=how.max_length or embedded["max_length"], precision=precision)


def check_alike(index_dir, model, embedded, settings):
    """Refuse, in one line, queries that ``settings`` (the loaded model's) would embed otherwise than the documents
    of ``index_dir`` were: another pooling, normalisation, length or precision."""
    ran = {key: value for key, value in embedding_settings(settings).items() if key in EMBEDDING_FIELDS}
    ran.setdefault("precision", "float32")
    differ = [key for key in EMBEDDING_FIELDS if ran[key] != embedded[key]]
    if differ:
        raise InputError(f"{index_dir}: its vectors of {model} were embedded with "
                         f"{', '.join(f'{key} {embedded[key]}' for key in differ)}; the queries would be with "
                         f"{', '.join(f'{key} {ran[key]}' for key in differ)} (leave out the flag that asks for it; "
                         "a precision runs as the device allows: search where the index was made)")


def read_manifest_args(directory):
    from common.io import read_manifest
    manifest = read_manifest(directory)
    if not manifest:
        raise InputError(f"{directory}: no manifest.json (not an evaluation directory)")
    return manifest.get("args", {})


def search_documents(model_path, data_dir, queries, how, top, index_dir=None, index_type="exact", say=print):
    """The top ``top`` documents of ``data_dir`` for each query, by the model's similarity (cosine where it states
    none; a faiss index, by cosine only): ``(docs, indices, scores)``. With
    ``index_dir`` (an evaluation directory of 05) the vectors 05 wrote for this model are reused, searched exactly
    or through a faiss index of ``index_type`` built beside them, and the queries embedded as its manifest says the
    documents were; without it every document is embedded. A ``data_dir`` that is no directory is one line."""
    from common.data.docs_jsonl import Documents
    if not os.path.isdir(data_dir):
        raise InputError(f"{data_dir}: no such data directory")
    if index_type != "exact" and not index_dir:
        raise InputError(f"--index-type {index_type} needs --index EVAL: the faiss index is built beside the "
                         "vectors 05_evaluate.py wrote")
    docs = Documents(data_dir, texts=not (index_dir or is_retrieval_data(data_dir)))
    if index_dir:
        doc_vecs, embedded = saved_index(index_dir, model_path, docs.ids)
        encoder, tokenizer, settings = load_model(model_path, "model", queries_alike(how, embedded), say)
        check_alike(index_dir, model_path, embedded, settings)
    else:
        say(f"note: embedding all {len(docs.ids)} documents; --index EVAL reuses the vectors 05_evaluate.py wrote")
        encoder, tokenizer, settings, doc_vecs = embed_corpus(model_path, "model", data_dir, docs, how, say=say)
    query_vecs = embed_queries(encoder, tokenizer, settings, queries, how)
    check_finite_rows(query_vecs, f"{model_path}: the vectors of the queries")
    if query_vecs.shape[1] != doc_vecs.shape[1]:
        raise InputError(f"{index_dir}: its vectors have {doc_vecs.shape[1]} dimensions, {model_path} makes "
                         f"{query_vecs.shape[1]} (vectors of another model?)")
    similarity = settings.get("similarity")
    if index_type != "exact" and similarity not in (None, "cosine"):
        raise InputError(f"--index-type {index_type}: a faiss index ranks by cosine, and {model_path} states "
                         f"{similarity} (config_sentence_transformers.json); search it with --index-type exact")
    if index_type == "exact":
        indices, scores = search(query_vecs, doc_vecs, k=top, similarity=similarity)
    else:
        index = ann.open_index(doc_vecs, doc_vecs.filename, index_type)
        indices, scores = ann.search(index, query_vecs, top)
    return docs, indices, scores
