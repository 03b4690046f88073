"""Paper search: arXiv extraction, the by-paper split, the MNRL objective (gathered on two processes, GradCache,
training), the retrieval metrics (against pytrec_eval and sentence-transformers' evaluator), sharded embedding and
the search command. The MNRL loss against sentence-transformers': test_losses.py; the masked-LM stage:
test_masking.py, test_masked_lm.py, test_pretraining.py."""

import gzip
import importlib.util
import json
import os
import re
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import (ROOT, corpus_text, forget_hashes, free_port, paper_articles, read_jsonl, script_error,
                      train_in_process, unfinish)

from common.io import InputError, sha256


def script(name):
    spec = importlib.util.spec_from_file_location(name.replace(".py", "").lstrip("0123456789_"),
                                                  os.path.join(ROOT, name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record(i, title=None, abstract=None, categories="cs.CL stat.ML", **extra):
    return {"id": f"0704.{i:04d}", "title": title or f"Title  {i}\n  of paper", "categories": categories,
            "abstract": f"  Abstract {i} with $x^2$\n  wrapped text.\n" if abstract is None else abstract,
            "authors": "A. Author and\n  B. Author", "update_date": "2008-11-26", **extra}


def write_lines(path, lines, gz=False):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


# -- 01 arxiv -------------------------------------------------------------------------------------------------

def test_arxiv_extraction_normalises_whitespace_keeps_latex_and_drops_withdrawn_empty_and_duplicate_abstracts(
        tmp_path):
    records = [record(1), record(2, abstract="  This paper has been withdrawn by the authors.\n"),
               record(3, abstract="   \n"), record(4, abstract="Abstract 1 with $x^2$ wrapped\n text."),
               record(5, categories="hep-th"), record(6, categories="math.CO cs.CG", abstract="Other.")]
    path = write_lines(tmp_path / "snapshot.json.gz", [json.dumps(r) for r in records], gz=True)
    script("01_extract.py").main(["arxiv", "--input", str(path), "--out", str(tmp_path / "out"),
                                  "--categories", "cs.,stat.ML"])
    articles = read_jsonl(tmp_path / "out" / "articles.jsonl")
    assert articles[0] == {"id": "0704.0001", "title": "Title 1 of paper",
                           "text": "Abstract 1 with $x^2$ wrapped text.", "links": [],
                           "categories": ["cs.CL", "stat.ML"], "labels": {"top": "cs", "second": "cs.CL"},
                           "authors": "A. Author and B. Author", "update_date": "2008-11-26"}
    assert [a["id"] for a in articles] == ["0704.0001", "0704.0006"]
    assert articles[1]["labels"] == {"top": "math", "second": "math.CO"}
    counts = json.loads((tmp_path / "out" / "manifest.json").read_text())["counts"]
    assert counts == {"records": 6, "articles": 2, "withdrawn": 1, "empty_abstract": 1, "duplicate_abstract": 1,
                      "other_categories": 1}


@pytest.mark.parametrize("case, expected", [
    ("missing", "snapshot.json:2: missing field 'abstract'"),
    ("json", "snapshot.json:2: invalid JSON"),
    ("truncated", "snapshot.json.gz:"),
])
def test_arxiv_bad_input_names_file_and_line_and_writes_nothing(tmp_path, case, expected):
    good = json.dumps(record(1))
    if case == "missing":
        path = write_lines(tmp_path / "snapshot.json", [good, json.dumps({"id": "x", "title": "t", "categories": "a"})])
    elif case == "json":
        path = write_lines(tmp_path / "snapshot.json", [good, '{"id": "0704.0002", "title": '])
    else:
        data = gzip.compress("".join(json.dumps(record(i)) + "\n" for i in range(1, 200)).encode())
        path = tmp_path / "snapshot.json.gz"
        path.write_bytes(data[:len(data) // 2])
    with pytest.raises(InputError) as e:
        script("01_extract.py").main(["arxiv", "--input", str(path), "--out", str(tmp_path / "out")])
    assert str(e.value).startswith(str(tmp_path / expected)) if case != "truncated" else \
        str(e.value).startswith(str(path) + ":") and "truncated" in str(e.value)
    assert os.listdir(tmp_path / "out") == []


# -- 02 retrieval ---------------------------------------------------------------------------------------------

def test_retrieval_data_splits_by_paper_and_query_ids_never_equal_document_ids(paper_data):
    docs = read_jsonl(paper_data / "docs.jsonl")
    assert len(docs) == 60 and set(docs[0]) == {"id", "title", "text"}
    splits = json.loads((paper_data / "splits.json").read_text())
    assert [len(splits[s]) for s in ("train", "val", "test")] == [36, 12, 12]
    pairs = read_jsonl(paper_data / "pairs.train.jsonl")
    titles = {d["id"]: d["title"] for d in docs}
    assert sorted(p["doc"] for p in pairs) == sorted(splits["train"])
    assert all(p["query"] == titles[p["doc"]] for p in pairs)
    for part in ("val", "test"):
        queries = read_jsonl(paper_data / f"queries.{part}.jsonl")
        qrels = [line.split() for line in (paper_data / f"retrieval.{part}.qrels").read_text().splitlines()]
        assert [q["qid"] for q in queries] == [f"q:{d}" for _, _, d, _ in qrels]
        assert {d for _, _, d, _ in qrels} == set(splits[part])
        assert not {q["qid"] for q in queries} & set(titles)
    assert (paper_data / "topics.top.train.jsonl").exists()


def test_retrieval_pairs_file_groups_equal_queries_of_a_split_into_one_query(tmp_path, paper_data):
    splits = json.loads((paper_data / "splits.json").read_text())
    a, b = splits["test"][:2]
    lines = [{"query": "first sentence", "doc": a}, {"query": "First  sentence", "doc": b},
             {"query": "something", "doc": splits["train"][0]}]
    write_lines(tmp_path / "pairs.jsonl", [json.dumps(x) for x in lines])
    write_lines(tmp_path / "articles.jsonl", [json.dumps(x) for x in paper_articles()])
    out = tmp_path / "data"
    script("02_build_graph.py").main(["retrieval", "--articles", str(tmp_path / "articles.jsonl"), "--out", str(out),
                                      "--test", "0.2", "--val", "0.2", "--pairs", str(tmp_path / "pairs.jsonl")])
    assert read_jsonl(out / "queries.test.jsonl") == [{"qid": "q:1", "text": "first sentence"}]
    assert (out / "retrieval.test.qrels").read_text() == f"q:1 0 {a} 1\nq:1 0 {b} 1\n"
    assert read_jsonl(out / "pairs.train.jsonl") == [lines[2]]


def test_a_query_that_stands_inside_its_target_document_is_dropped_in_every_split(tmp_path, paper_data):
    articles = paper_articles()
    splits = json.loads((paper_data / "splits.json").read_text())
    train, test = splits["train"][0], splits["test"][0]
    for doc in (train, test):  # the headline repeated in the text, in other case and spacing
        article = next(a for a in articles if a["id"] == doc)
        article["text"] = f"As the  {article['title'].upper()} says: {article['text']}"
    write_lines(tmp_path / "articles.jsonl", [json.dumps(x) for x in articles])
    out = tmp_path / "data"
    script("02_build_graph.py").main(["retrieval", "--articles", str(tmp_path / "articles.jsonl"), "--out", str(out),
                                      "--test", "0.2", "--val", "0.2"])
    assert train not in {p["doc"] for p in read_jsonl(out / "pairs.train.jsonl")}
    assert f"q:{test}" not in {q["qid"] for q in read_jsonl(out / "queries.test.jsonl")}
    assert len(read_jsonl(out / "queries.test.jsonl")) == 11
    assert json.loads((out / "manifest.json").read_text())["counts"]["queries_inside_document"] == 2
    lines = [{"query": "as the", "doc": test}, {"query": "nowhere in it", "doc": test}]
    write_lines(tmp_path / "pairs.jsonl", [json.dumps(x) for x in lines])
    script("02_build_graph.py").main(["retrieval", "--articles", str(tmp_path / "articles.jsonl"), "--out",
                                      str(tmp_path / "pairs"), "--test", "0.2", "--val", "0.2", "--pairs",
                                      str(tmp_path / "pairs.jsonl")])
    assert read_jsonl(tmp_path / "pairs" / "queries.test.jsonl") == [{"qid": "q:2", "text": "nowhere in it"}]


# -- MNRL on two processes -----------------------------------------------------------------------------------

def _two_process_worker(rank, world, port, queries, docs, keys, model, texts, out):
    import torch.distributed as dist
    from types import SimpleNamespace

    from common.models.inference import embed_sharded
    from common.models.loading import load_encoder
    from common.models.tokens import TokenStore
    from common.train.objectives.mnrl import MNRLObjective
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    objective = MNRLObjective.__new__(MNRLObjective)
    objective.args = SimpleNamespace(gather=True, scale=20.0, symmetric=True, mask_duplicates=True)
    half = len(queries) // world
    q = queries[rank * half:(rank + 1) * half].clone().requires_grad_(True)
    d = docs[rank * half:(rank + 1) * half].clone().requires_grad_(True)
    objective._loss(q, d, keys[rank * half:(rank + 1) * half]).mean().backward()
    encoder, tok, _ = load_encoder(model, pooling="mean", max_length=32)
    store = TokenStore(tok, texts, 32)
    vecs = torch.from_numpy(embed_sharded(encoder, store, batch_size=4))
    # a helping process (05's followers) takes part in the gathering and keeps nothing
    kept = embed_sharded(encoder, store, batch_size=4, block=5, collect=rank == 0)
    torch.save({"q": q.grad, "d": d.grad, "vecs": vecs, "kept": None if kept is None else torch.from_numpy(kept)},
               os.path.join(out, f"rank_{rank}.pt"))
    dist.barrier()  # neither process tears gloo down while the other is still in a collective
    dist.destroy_process_group()
    os._exit(0)  # past the results: skip interpreter teardown, where gloo's threads can abort the process


@pytest.fixture(scope="module")
def two_processes(tiny_model, tmp_path_factory):
    """One gloo run of two processes: gathered MNRL gradients, and the corpus embedded in two shards."""
    out = tmp_path_factory.mktemp("gloo")
    torch.manual_seed(0)
    queries, docs = torch.randn(8, 6), torch.randn(8, 6)
    keys = torch.tensor([[i, i, i] for i in range(8)])
    keys[6, 1] = keys[1, 1]  # a duplicate abstract across the two processes
    texts = corpus_text(9, 23)
    torch.multiprocessing.spawn(_two_process_worker, args=(2, free_port(), queries, docs, keys, str(tiny_model),
                                                           texts, str(out)), nprocs=2)
    return {"queries": queries, "docs": docs, "keys": keys, "texts": texts,
            "ranks": [torch.load(out / f"rank_{r}.pt") for r in range(2)]}


def test_mnrl_gathered_on_two_processes_has_the_gradients_of_one_process_with_the_whole_batch(two_processes):
    from types import SimpleNamespace

    from common.train.objectives.mnrl import MNRLObjective
    objective = MNRLObjective.__new__(MNRLObjective)
    objective.args = SimpleNamespace(gather=True, scale=20.0, symmetric=True, mask_duplicates=True)
    q = two_processes["queries"].clone().requires_grad_(True)
    d = two_processes["docs"].clone().requires_grad_(True)
    objective._loss(q, d, two_processes["keys"]).mean().backward()
    grads = two_processes["ranks"]
    # DDP averages the two processes' parameter gradients
    torch.testing.assert_close(torch.cat([g["q"] for g in grads]) / 2, q.grad)
    torch.testing.assert_close(torch.cat([g["d"] for g in grads]) / 2, d.grad)


def test_sharded_embedding_on_two_processes_gives_the_vectors_of_one(tiny_model, two_processes):
    from common.models.inference import embed
    from common.models.loading import load_encoder
    from common.models.tokens import TokenStore
    encoder, tok, _ = load_encoder(str(tiny_model), pooling="mean", max_length=32)
    one = embed(encoder, TokenStore(tok, two_processes["texts"], 32), batch_size=4)
    for rank in two_processes["ranks"]:
        np.testing.assert_allclose(rank["vecs"].numpy(), one, rtol=1e-5, atol=1e-6)
    main, helper = two_processes["ranks"]
    assert helper["kept"] is None
    np.testing.assert_allclose(main["kept"].numpy(), one, rtol=1e-5, atol=1e-6)  # gathered 5 rows at a time


# -- MLM masking ----------------------------------------------------------------------------------------------

# -- training MNRL --------------------------------------------------------------------------------------------

def train(data, model, out, objective, *extra):
    argv = ["--objective", objective, "--data", str(data), "--model", str(model), "--out", str(out),
            "--log-every", "1", *map(str, extra)]
    return train_in_process(argv)


def test_mnrl_with_gradcache_has_the_gradients_of_the_plain_loss(tiny_model, paper_data):
    from types import SimpleNamespace

    from common.train.objectives.mnrl import MNRLObjective
    grads = []
    for chunk in (0, 3):
        args = SimpleNamespace(model=str(tiny_model), data=str(paper_data), pooling="mean", normalize=False,
                               max_length=32, query_max_length=16, length_groups=2, cache_chunk=chunk, gather=True,
                               scale=20.0, symmetric=True, mask_duplicates=True)
        objective = MNRLObjective(args, None)
        model = objective.build()
        objective.load_data()
        model.eval()  # dropout off: the two computations then see the same network
        rows = objective.train_rows[:10]
        batch = objective.collate(rows)
        for n, part in enumerate(batch.get("chunks", [])):  # each chunk padded to its own longest document
            mine = rows[n * chunk:(n + 1) * chunk]
            documents = part["groups"][min(args.length_groups, len(mine)):]
            assert max(ids.shape[1] for ids, _ in documents) == objective.docs.lengths()[mine[:, 1]].max()
        objective.losses(model, batch).mean().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        # fp32 sums in another order: torch's own float32 atol
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-4, atol=1e-5)


def test_mnrl_trains_selects_on_validation_ndcg_and_resumes_bit_identically(tiny_model, paper_data, tmp_path):
    extra = ["--max-length", "32", "--batch-size", "8", "--epochs", "2", "--checkpoint-every", "4", "--keep", "10",
             "--eval-every", "0", "--cache-chunk", "4", "--symmetric"]
    ref = tmp_path / "ref"
    counts = train(paper_data, tiny_model, ref, "mnrl", *extra)
    assert counts["steps"] == 8  # 36 pairs, batch 8, the last partial batch dropped
    validations = [r for r in read_jsonl(ref / "log.jsonl") if "val_ndcg@10" in r]
    assert counts["best_val_ndcg@10"] == max(r["val_ndcg@10"] for r in validations)
    assert json.loads((ref / "model" / "docembed.json").read_text())["similarity"] == "cosine"
    out = tmp_path / "resumed"
    import shutil
    shutil.copytree(ref, out)
    unfinish(out, model=False)  # RUN/model stays: it holds the best model of the steps before the checkpoint
    shutil.rmtree(out / "checkpoints" / "step_8")
    train(paper_data, tiny_model, out, "mnrl", *extra)
    final = "checkpoints/step_8/model.safetensors"
    a, b = load_file(str(ref / final)), load_file(str(out / final))
    assert all(torch.equal(a[k], b[k]) for k in a)

    def log(run):
        return [{k: v for k, v in r.items() if k != "steps_per_s"} for r in read_jsonl(run / "log.jsonl")]
    assert log(out) == log(ref)


# -- evaluation and search ------------------------------------------------------------------------------------

def random_run(seed, n_queries=12, n_docs=30, ties=False):
    rng = np.random.default_rng(seed)
    doc_ids = [f"d{j:02d}" for j in range(n_docs)]
    qrels = {f"q:{i}": set(rng.choice(doc_ids, rng.integers(1, 4), replace=False).tolist())
             for i in range(n_queries)}
    scores = rng.integers(0, 5, (n_queries, n_docs)).astype(float) if ties else rng.random((n_queries, n_docs))
    return doc_ids, qrels, scores


@pytest.mark.parametrize("ties", [False, True])
def test_retrieval_metrics_equal_pytrec_eval(ties):
    import pytrec_eval

    from common.eval.retrieval import retrieval_metrics, tie_order
    doc_ids, qrels, scores = random_run(0, ties=ties)
    run = {qid: [doc_ids[j] for j in tie_order(doc_ids, list(row))] for qid, row in zip(qrels, scores)}
    ours = retrieval_metrics(run, qrels)
    judged = {q: {d: 1 for d in rel} for q, rel in qrels.items()}
    full = {q: {d: float(s) for d, s in zip(doc_ids, row)} for q, row in zip(qrels, scores)}
    top10 = {q: {d: full[q][d] for d in run[q][:10]} for q in qrels}
    evaluate = pytrec_eval.RelevanceEvaluator(judged, {"ndcg_cut_10", "recall_1", "recall_5", "recall_10",
                                                       "recall_100", "map_cut_100"}).evaluate(full)
    mrr = pytrec_eval.RelevanceEvaluator(judged, {"recip_rank"}).evaluate(top10)
    mean = {m: np.mean([evaluate[q][m] for q in qrels]) for m in evaluate["q:0"]}
    assert ours["ndcg@10"] == pytest.approx(mean["ndcg_cut_10"], abs=1e-12)
    assert ours["map@100"] == pytest.approx(mean["map_cut_100"], abs=1e-12)
    for k in (1, 5, 10, 100):
        assert ours[f"recall@{k}"] == pytest.approx(mean[f"recall_{k}"], abs=1e-12)
    assert ours["mrr@10"] == pytest.approx(np.mean([mrr[q]["recip_rank"] for q in qrels]), abs=1e-12)


def test_retrieval_metrics_equal_sentence_transformers_evaluator_without_ties_and_with_few_relevant():
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    from common.eval.retrieval import retrieval_metrics, tie_order
    doc_ids, qrels, scores = random_run(1)
    evaluator = InformationRetrievalEvaluator({q: "x" for q in qrels}, {d: "x" for d in doc_ids}, qrels,
                                              precision_recall_at_k=[1, 5, 10], accuracy_at_k=[1])
    results = [[{"corpus_id": d, "score": float(s)} for d, s in zip(doc_ids, row)] for row in scores]
    theirs = evaluator.compute_metrics(results)
    run = {qid: [doc_ids[j] for j in tie_order(doc_ids, list(row))] for qid, row in zip(qrels, scores)}
    ours = retrieval_metrics(run, qrels)
    assert ours["mrr@10"] == pytest.approx(theirs["mrr@k"][10])
    assert ours["ndcg@10"] == pytest.approx(theirs["ndcg@k"][10])
    assert ours["map@100"] == pytest.approx(theirs["map@k"][100])  # R ≤ 3 < 100: the denominators agree
    for k in (1, 5, 10):
        assert ours[f"recall@{k}"] == pytest.approx(theirs["recall@k"][k])


def test_chunked_search_equals_a_full_sort_with_ties_by_position_descending():
    from common.eval.retrieval import search
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((50, 8)).astype(np.float32)
    docs[10] = docs[40]  # an exact tie
    queries = np.concatenate([docs[[40]], rng.standard_normal((4, 8)).astype(np.float32)])
    idx, scores = search(queries, docs, k=7, chunk=16, query_chunk=2)
    unit = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    full = (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ unit.T
    for row, expected in zip(idx, full):
        order = sorted(range(50), key=lambda j: (-expected[j], -j))[:7]
        assert row.tolist() == order
    assert idx[0][:2].tolist() == [40, 10]


def test_evaluate_retrieval_and_search_reuse_the_index(tiny_model, paper_data, tmp_path, capsys):
    evaluate = script("05_evaluate.py")
    out = tmp_path / "eval"
    evaluate.main(["--data", str(paper_data), "--model", f"base={tiny_model}", "--out", str(out),
                   "--pooling", "base=mean", "--max-length", "32", "--task", "retrieval", "bm25"])
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {"base", "bm25"}
    names = {"mrr@10", "ndcg@10", "recall@1", "recall@5", "recall@10", "recall@100", "map@100"}
    assert set(metrics["base"]["retrieval"]) == names | {f"{name}_ci" for name in names}
    assert metrics["bm25"]["retrieval"]["settings"]["k1"] == 1.5
    assert metrics["bm25"]["retrieval"]["recall@100"] == 1.0  # 60 documents: every one is in the top 100
    ids = (out / "base.ids.txt").read_text().split()
    assert len(ids) == 60 and np.load(out / "base.npy").shape == (60, 32)
    capsys.readouterr()
    docs = {d["id"]: d for d in read_jsonl(paper_data / "docs.jsonl")}
    evaluate.main(["search", "--model", str(tiny_model), "--data", str(paper_data), "--index", str(out),
                   "--pooling", "mean", "--max-length", "32", "--top", "3", docs["p7"]["text"]])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"query: {docs['p7']['text']}" and len(lines) == 4
    assert lines[1].split("\t")[0] == "  1. p7" and lines[1].endswith(docs["p7"]["title"])
    (tmp_path / "queries.txt").write_text("gene cell\n\nriver\n")
    with pytest.raises(InputError, match=re.escape("queries.txt:2: a query without a letter or digit ('')")):
        evaluate.main(["search", "--model", str(tiny_model), "--data", str(paper_data), "--queries",
                       str(tmp_path / "queries.txt")])


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_a_faiss_index_beside_the_vectors_finds_what_exact_search_finds(tiny_model, paper_data, tmp_path, capsys,
                                                                       kind):
    pytest.importorskip("faiss")
    evaluate = script("05_evaluate.py")
    out = tmp_path / "eval"
    evaluate.main(["--data", str(paper_data), "--model", f"base={tiny_model}", "--out", str(out),
                   "--pooling", "base=mean", "--max-length", "32", "--task", "retrieval"])
    search = ["search", "--model", str(tiny_model), "--data", str(paper_data), "--index", str(out), "--pooling",
              "mean", "--max-length", "32", "--top", "5", "gene expression in cells", "rivers and lakes"]
    capsys.readouterr()

    class Ranked(list):
        """Printed lines (query lines, and rank, id, score of each hit); equal to another where every query line,
        rank and score (to the 4 printed decimals, ±1e-4) agree and every id does, except between two hits whose
        scores tie to within 2e-4, or at a query's last hit, which may tie with the first one left out (faiss and
        numpy sum a dot product in different orders, and the tiny model gives some documents equal vectors)."""

        def __eq__(self, other):
            if len(self) != len(other):
                return False
            for i, (a, b) in enumerate(zip(self, other)):
                if len(a) != len(b) or (len(a) == 1 and a != b) or (len(a) == 3 and a[0] != b[0]):
                    return False
                if len(a) == 3 and abs(a[2] - b[2]) > 1e-4:
                    return False
                if len(a) == 3 and a[1] != b[1]:
                    last = i + 1 == len(self) or len(self[i + 1]) != 3
                    near = [j for j in (i - 1, i + 1) if 0 <= j < len(self) and len(self[j]) == 3
                            and abs(self[j][2] - a[2]) <= 2e-4]
                    if not last and not any(other[j][1] == a[1] for j in near):
                        return False
            return True

    def ranked(*flags):
        evaluate.main(search + list(flags))
        lines = []
        for line in capsys.readouterr().out.splitlines():
            if "\t" not in line:
                lines.append((line,))
                continue
            rank_id, score, _ = line.split("\t", 2)
            rank, doc = rank_id.split()
            lines.append((rank, doc, float(score)))
        return Ranked(lines)

    exact = ranked()
    assert ranked("--index-type", kind) == exact  # 60 documents: HNSW's search reaches every one
    built = (out / f"base.{kind}.faiss").stat().st_mtime_ns
    assert ranked("--index-type", kind) == exact
    assert (out / f"base.{kind}.faiss").stat().st_mtime_ns == built  # read back, not built again
    # vectors rewritten in place (same rows, dimension and date): the recorded hash no longer matches, so the
    # index is built again from the new vectors, not reused
    vectors = np.load(out / "base.npy")
    stat = (out / "base.npy").stat()
    forget_hashes(out)  # else 05's manifest refuses the rewritten vectors first
    np.save(out / "base.npy", vectors[::-1].copy())
    os.utime(out / "base.npy", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert ranked("--index-type", kind) == ranked()
    assert (out / f"base.{kind}.faiss.sha256").read_text().split() == [sha256(str(out / "base.npy")),
                                                                      sha256(str(out / f"base.{kind}.faiss"))]
    # a damaged or truncated index whose record still names the vectors: built again, not read as it is
    for damage in (b"garbage", (out / f"base.{kind}.faiss").read_bytes()[:100]):
        (out / f"base.{kind}.faiss").write_bytes(damage)
        assert ranked("--index-type", kind) == ranked()
        assert (out / f"base.{kind}.faiss").stat().st_size > 100
    with pytest.raises(InputError, match=f"--index-type {kind} needs --index EVAL"):
        evaluate.main(search[:5] + ["--index-type", kind, "a query"])


@pytest.fixture(scope="module")
def index(tiny_model, paper_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("index") / "eval"
    script("05_evaluate.py").main(["--data", str(paper_data), "--model", f"base={tiny_model}", "--out", str(out),
                                   "--max-length", "32", "--task", "retrieval"])
    return out


@pytest.mark.parametrize("case, expected", [
    ("half", "base.npy: 30 rows, {index}/base.ids.txt names 60"),
    ("dims", "{index}: its vectors have 16 dimensions, {model} makes 32 (vectors of another model?)"),
    ("ids", "base.ids.txt:1: id 'x0', but docs.jsonl has 'p0' there"),
    ("no-ids", "base.ids.txt: no such file"),
    ("run-folder", "{index}: not an evaluation directory of 05_evaluate.py (its manifest.json names no NAME=MODEL "
                   "vectors; a run folder?)"),
])
def test_a_saved_index_that_does_not_fit_the_corpus_or_the_model_is_a_one_line_error(tiny_model, paper_data, index,
                                                                                      tmp_path, case, expected):
    bad = tmp_path / "eval"
    shutil.copytree(index, bad)
    forget_hashes(bad)
    vectors = np.load(bad / "base.npy")
    if case == "half":
        np.save(bad / "base.npy", vectors[:30])
    elif case == "dims":
        np.save(bad / "base.npy", vectors[:, :16])
    elif case == "ids":
        (bad / "base.ids.txt").write_text("x0\n")
    elif case == "no-ids":
        os.remove(bad / "base.ids.txt")
    else:
        (bad / "manifest.json").write_text(json.dumps({"script": "03_train.py", "args": {"model": str(tiny_model)}}))
    with pytest.raises(InputError) as e:
        script("05_evaluate.py").main(["search", "--model", str(tiny_model), "--data", str(paper_data), "--index",
                                       str(bad), "--max-length", "32", "query"])
    message = expected.format(index=bad, model=tiny_model)
    assert str(e.value) == (message if message.startswith(str(bad)) else f"{bad}/{message}")


@pytest.mark.parametrize("flag, value", [("--top", "0"), ("--top", "-1"), ("--batch-size", "0"),
                                         ("--max-length", "0")])
def test_search_settings_that_cannot_work_are_refused(tiny_model, paper_data, flag, value):
    most = "131,072" if flag == "--max-length" else "1,073,741,824"
    assert script_error("05_evaluate.py", "search", "--model", tiny_model, "--data", paper_data, flag, value,
                        "query") == f"error: argument {flag}: {value}: must be between 1 and {most}"


def test_splits_that_round_down_to_nothing_are_refused_and_an_empty_test_split_is_one_line(tmp_path, tiny_model):
    articles = write_lines(tmp_path / "articles.jsonl", [json.dumps(a) for a in paper_articles(3)])
    with pytest.raises(InputError) as e:
        script("02_build_graph.py").main(["retrieval", "--articles", str(articles), "--out", str(tmp_path / "d")])
    assert str(e.value) == (f"{articles}: 3 papers leave the val and test split(s) empty (train 3, val 0, test 0); "
                            "give more papers or other shares")
    with pytest.raises(InputError) as e:
        script("02_build_graph.py").main(["retrieval", "--articles", str(articles), "--out", str(tmp_path / "d"),
                                          "--test", "0.7", "--val", "0.7"])
    assert str(e.value) == "--test 0.7 and --val 0.7: both are shares of all papers and must leave some for " \
                           "training (sum below 1)"
    assert list((tmp_path / "d").iterdir()) == []
    data = tmp_path / "data"
    script("02_build_graph.py").main(["retrieval", "--articles", str(articles), "--out", str(data), "--test", "0.34",
                                      "--val", "0.34"])
    forget_hashes(data)
    (data / "retrieval.test.qrels").write_text("")
    with pytest.raises(InputError) as e:
        script("05_evaluate.py").main(["--data", str(data), "--task", "bm25", "--out", str(tmp_path / "eval")])
    assert str(e.value) == f"{data}/retrieval.test.qrels: no test queries (an empty test split); rebuild the data " \
                           "with 02_build_graph.py retrieval from more papers"


def test_paper_texts_stream_from_docs_jsonl_into_the_token_store_as_the_list_would(tiny_model, paper_data, tmp_path):
    from transformers import AutoTokenizer

    from common.data.docs_jsonl import Documents
    from common.models.tokens import TokenStore
    kept, streamed = Documents(paper_data), Documents(paper_data, texts=False)
    assert streamed.texts is None and list(streamed.stream_texts()) == kept.texts
    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    a, b = TokenStore(tok, kept.texts, 32, batch=7), TokenStore(tok, streamed.stream_texts(), 32, batch=7)
    assert np.array_equal(a.ids, b.ids) and np.array_equal(a.offsets, b.offsets) and len(b) == len(kept.ids)
    changed = tmp_path / "data"
    shutil.copytree(paper_data, changed)
    forget_hashes(changed)
    docs = Documents(changed, texts=False)
    lines = (changed / "docs.jsonl").read_text().splitlines()
    (changed / "docs.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # a document gone since it was read
    with pytest.raises(InputError) as e:
        list(docs.stream_texts())
    assert str(e.value) == f"{changed / 'docs.jsonl'}: changed while it was being read"


@pytest.mark.parametrize("query, expected", [
    ("", "error: query '': no letter or digit to search for"),
    ("   ", "error: query '   ': no letter or digit to search for"),
    ("?!", "error: query '?!': no letter or digit to search for"),
    ("FILE:\n", "error: {file}:1: a query without a letter or digit ('')"),
    ("FILE:gene expression\n -- \n", "error: {file}:2: a query without a letter or digit (' -- ')"),
    ("FILE:", "error: {file}: no queries"),
])
def test_a_query_without_content_is_refused_in_one_line(tiny_model, paper_data, tmp_path, query, expected):
    flags = ["search", "--model", tiny_model, "--data", paper_data, "--max-length", "32"]
    file = tmp_path / "queries.txt"
    if query.startswith("FILE:"):
        file.write_text(query[len("FILE:"):], encoding="utf-8")
        flags += ["--queries", file]
    else:
        flags.append(query)
    assert script_error("05_evaluate.py", *flags) == expected.format(file=file)


def test_vectors_that_are_not_finite_are_refused_wherever_they_are_read(tiny_model, paper_data, tmp_path):
    """A NaN row in the vectors 05 wrote (search --index) is one line naming the row and its document."""
    evaluate = script("05_evaluate.py")
    out = tmp_path / "eval"
    evaluate.main(["--data", str(paper_data), "--model", f"base={tiny_model}", "--out", str(out),
                   "--max-length", "32", "--task", "retrieval"])
    vectors = np.load(out / "base.npy")
    vectors[7, 3] = np.nan
    forget_hashes(out)
    np.save(out / "base.npy", vectors)
    doc = (out / "base.ids.txt").read_text(encoding="utf-8").split("\n")[7]
    assert script_error("05_evaluate.py", "search", "--model", tiny_model, "--data", paper_data, "--index", out,
                        "--max-length", "32", "gene expression") == \
        f"error: {out / 'base.npy'}: row 7 (document {doc!r}) is not finite (1 of {len(vectors)} rows are not)"


def test_a_full_disk_while_saving_a_faiss_index_is_one_line_and_leaves_no_index(tmp_path, monkeypatch):
    faiss = pytest.importorskip("faiss")
    from common.eval import ann
    vectors = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32)
    np.save(tmp_path / "base.npy", vectors)

    def full(index, path):  # faiss's own words when fwrite fails on a full disk
        with open(path, "wb") as f:
            f.write(b"\0" * 1000)
        raise RuntimeError(f"Error in void faiss::write_HNSW(const HNSW*, IOWriter*) at index_write.cpp:362: Error: "
                           f"'ret == (size)' failed: write error in {path}: 56 != 1945 (No space left on device)")
    monkeypatch.setattr(faiss, "write_index", full)
    with pytest.raises(InputError) as e:
        ann.open_index(vectors, str(tmp_path / "base.npy"), "hnsw")
    assert re.fullmatch(rf"{re.escape(str(tmp_path))}: no space left on the device \(needs more than 1,000 bytes, "
                        r"[\d,]+ free\); the hnsw index was not saved", str(e.value)), str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.npy"]
    monkeypatch.setattr(faiss, "write_index", lambda index, path: (_ for _ in ()).throw(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):  # any other error is not taken for a full disk
        ann.open_index(vectors, str(tmp_path / "base.npy"), "hnsw")
