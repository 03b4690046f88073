"""Exact cosine search (05's ``search``) over 1M × 384 random vectors: latency, throughput and memory.

    python bench/search.py                      # 1M documents, 384 dimensions
    python bench/search.py --docs 200000 --queries 500
    python bench/search.py --docs 200000 --hnsw         # also faiss HNSW (05 search --index-type hnsw): recall@10
    python bench/search.py --vectors EVAL/minilm.npy --hnsw   # real vectors: the last --queries rows are the queries
    python bench/search.py --sentences --hnsw --k 10          # MiniLM vectors of the shipped samples' sentences

Reports the time for one query, the queries/s for a batch of --queries, and the process's peak RSS above the
document matrix itself, against one dense ``queries @ docs.T`` + ``topk`` (what a short script would do), whose
score matrix alone is queries × docs floats.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def peak_rss():
    """Peak resident memory of this process so far (Linux: VmHWM), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return psutil.Process().memory_info().rss


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--dense", action="store_true", help="also time the one-matrix baseline")
    parser.add_argument("--hnsw", action="store_true",
                        help="also build 05's HNSW index and report its recall@10 against exact search")
    parser.add_argument("--vectors", default=None, help="an NPY of real vectors instead of random ones")
    parser.add_argument("--sentences", action="store_true",
                        help="real vectors: all-MiniLM-L6-v2 on every distinct sentence of the arXiv sample's "
                             "abstracts and the enwiki sample's articles, whole (built once into --work)")
    parser.add_argument("--work", default=os.path.join(ROOT, "bench", "out", "search"))
    args = parser.parse_args()
    import torch

    from common.eval.retrieval import search
    rng = np.random.default_rng(0)
    if args.sentences:
        args.vectors = sentence_vectors(args.work)
    if args.vectors:
        from common.vectors import load_npy
        vectors = np.asarray(load_npy(args.vectors))
        docs, queries = vectors[:-args.queries], vectors[-args.queries:]
        args.docs, args.dim = docs.shape
    else:
        docs = rng.standard_normal((args.docs, args.dim), dtype=np.float32)
        for s in range(0, args.docs, 65536):  # in place, a chunk at a time: no second copy raises the peak
            docs[s:s + 65536] /= np.linalg.norm(docs[s:s + 65536], axis=1, keepdims=True)
        queries = rng.standard_normal((args.queries, args.dim), dtype=np.float32)
    base = peak_rss()
    print(f"{args.docs} × {args.dim} float32 documents ({docs.nbytes / 2**30:.2f} GiB); peak RSS so far "
          f"{base / 2**30:.2f} GiB; {torch.get_num_threads()} threads")
    search(queries[:1], docs, k=args.k)  # warm up
    wall, cpu = [], []
    for i in range(5):
        start, start_cpu = time.perf_counter(), time.process_time()
        search(queries[i:i + 1], docs, k=args.k)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    print(f"one query: {1000 * np.median(wall):.1f} ms wall, {1000 * np.median(cpu):.1f} ms CPU (medians of 5; CPU "
          f"time, summed over threads, is the steadier figure on a shared machine), top {args.k}")
    start, start_cpu = time.perf_counter(), time.process_time()
    idx, _ = search(queries, docs, k=args.k)
    took, took_cpu = time.perf_counter() - start, time.process_time() - start_cpu
    print(f"{args.queries} queries: {took:.2f} s wall ({args.queries / took:.0f} queries/s), {took_cpu:.2f} s CPU; "
          f"peak RSS above the start {(peak_rss() - base) / 2**20:.0f} MiB")
    if args.hnsw:
        hnsw_recall(args, docs, queries)
    if args.dense:
        before = peak_rss()
        start = time.perf_counter()
        scores = torch.from_numpy(queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ torch.from_numpy(docs).T
        dense = torch.topk(scores, args.k, dim=1).indices.numpy()
        took = time.perf_counter() - start
        same = bool((np.sort(dense, 1) == np.sort(idx, 1)).all())
        print(f"dense matmul + topk: {took:.2f} s, {args.queries / took:.0f} queries/s; peak RSS grew "
              f"{(peak_rss() - before) / 2**20:.0f} MiB; same top {args.k}: {same}")


def sentence_vectors(work):
    """MiniLM vectors (its own mean pooling, normalised, 256 tokens) of the distinct sentences of the shipped arXiv
    sample's abstracts and of the enwiki sample's articles, in a random order; cached in ``work``."""
    path = os.path.join(work, "sentences-minilm.npy")
    if os.path.exists(path):
        return path
    from bench.extract import sample_path
    from bench.train import ensure_arxiv, minilm
    from common.data.docs_jsonl import Documents
    from common.extract.sentences import split, splitter
    from common.models.inference import embed
    from common.models.loading import load_encoder
    from common.models.tokens import TokenStore
    punkt = splitter()
    wiki = os.path.join(work, "wiki-full")
    if not os.path.exists(os.path.join(wiki, "articles.jsonl")):
        subprocess.run([sys.executable, "01_extract.py", "wiki", "--dump", sample_path(), "--out", wiki, "--text",
                        "full"], cwd=ROOT, check=True, capture_output=True)
    with open(os.path.join(wiki, "articles.jsonl"), encoding="utf-8") as f:
        texts = Documents(ensure_arxiv(work)).texts + [json.loads(line)["text"] for line in f]
    sentences = sorted({s for text in texts for s, _, _ in split(text, punkt) if len(s.split()) >= 5})
    sentences = [sentences[i] for i in np.random.default_rng(0).permutation(len(sentences))]
    encoder, tokenizer, settings = load_encoder(minilm())
    vectors = embed(encoder, TokenStore(tokenizer, sentences, settings["max_length"]))
    os.makedirs(work, exist_ok=True)
    np.save(path, vectors)
    print(f"{len(sentences)} distinct sentences of five words or more embedded → {path}")
    return path


def hnsw_recall(args, docs, queries):
    from common.eval import ann
    from common.eval.retrieval import search
    os.makedirs(args.work, exist_ok=True)
    path = os.path.join(args.work, "vectors.npy")
    np.save(path, docs)
    if os.path.exists(ann.index_path(path, "hnsw")):
        os.remove(ann.index_path(path, "hnsw"))
    start = time.perf_counter()
    index = ann.open_index(np.load(path, mmap_mode="r"), path, "hnsw")
    built = time.perf_counter() - start
    start = time.perf_counter()
    found, _ = ann.search(index, queries, 10)
    took = time.perf_counter() - start
    exact, _ = search(queries, docs, k=10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found.tolist(), exact.tolist())])
    print(f"HNSW (M {ann.HNSW_M}, efConstruction {ann.HNSW_EF_CONSTRUCTION}, efSearch {ann.HNSW_EF_SEARCH}): built in "
          f"{built:.1f} s ({os.path.getsize(ann.index_path(path, 'hnsw')) / 2**20:.0f} MiB); {len(queries)} queries "
          f"{took:.2f} s ({len(queries) / took:.0f} queries/s); recall@10 against exact search {recall:.3f}")


if __name__ == "__main__":
    from common import cli  # a missing or damaged input is one line, as in the numbered scripts
    cli.run(main)
