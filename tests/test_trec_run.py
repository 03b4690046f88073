"""05's rankings as TREC run files: trec_eval's figures (through pytrec_eval) computed from the files 05 writes
equal 05's own, for the retrieval task (a model and BM25, graded relevance) and the cross-reference task (a model
and the lexical baseline)."""

import json

import pytest

from conftest import WORDS, corpus_text, run_main

MEASURES = {"ndcg_cut_10", "recall_1", "recall_5", "recall_10", "recall_100", "map_cut_100"}
OURS = {"ndcg_cut_10": "ndcg@10", "recall_1": "recall@1", "recall_5": "recall@5", "recall_10": "recall@10",
        "recall_100": "recall@100", "map_cut_100": "map@100"}


def read_run(path):
    import pytrec_eval
    with open(path, encoding="utf-8") as f:
        return pytrec_eval.parse_run(f)


def read_qrels(path):
    import pytrec_eval
    with open(path, encoding="utf-8") as f:
        return pytrec_eval.parse_qrel(f)


def trec_eval(qrels, run):
    """The retrieval metrics as trec_eval computes them from a run file: the mean over the queries of ``qrels``,
    MRR@10 its ``recip_rank`` on the run cut to each query's ten best (score descending, ties by id descending)."""
    import pytrec_eval
    per_query = pytrec_eval.RelevanceEvaluator(qrels, MEASURES).evaluate(run)
    top10 = {qid: dict(sorted(docs.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:10])
             for qid, docs in run.items()}
    mrr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    assert set(per_query) == set(qrels) == set(mrr)
    found = {OURS[m]: sum(q[m] for q in per_query.values()) / len(per_query) for m in MEASURES}
    found["mrr@10"] = sum(q["recip_rank"] for q in mrr.values()) / len(mrr)
    return found


@pytest.fixture(scope="module")
def beir_eval(tiny_model, tmp_path_factory):
    """A BEIR folder of 40 documents and 12 test queries with graded relevance (2 for the document a query was
    cut from, 1 for two others) and a 13th of stop words only, imported by 02 beir and scored by 05 with the tiny
    model and BM25."""
    root = tmp_path_factory.mktemp("beir")
    texts = corpus_text(5, 40)
    folder = root / "toy"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": str(i), "title": WORDS[i].capitalize(), "text": t}) + "\n" for i, t in enumerate(texts)))
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"_id": str(q), "text": " ".join(texts[q].split()[:4]) if q < 12 else "the of and"}) + "\n"
        for q in range(13)))
    lines = ["query-id\tcorpus-id\tscore"]
    for q in range(12):
        lines += [f"{q}\t{q}\t2", f"{q}\t{(q + 13) % 40}\t1", f"{q}\t{(q + 27) % 40}\t1", f"{q}\t{(q + 5) % 40}\t0"]
    (folder / "qrels" / "test.tsv").write_text("\n".join(lines + ["12\t3\t1"]) + "\n")
    run_main("02_build_graph.py", "beir", "--input", folder, "--out", root / "data")
    run_main("05_evaluate.py", "--data", root / "data", "--model", f"tiny={tiny_model}", "--task", "retrieval",
             "bm25", "--resamples", "0", "--out", root / "eval")
    return root


@pytest.mark.parametrize("row", ["tiny", "bm25"])
def test_retrieval_run_files_give_trec_evals_figures_equal_to_05s(beir_eval, row):
    metrics = json.loads((beir_eval / "eval" / "metrics.json").read_text())[row]["retrieval"]
    run = read_run(beir_eval / "eval" / f"{row}.retrieval.trec")
    assert len(run) == 13 and all(len(docs) == 40 for docs in run.values())
    found = trec_eval(read_qrels(beir_eval / "data" / "retrieval.test.qrels"), run)
    assert found == pytest.approx({m: metrics[m] for m in found}, abs=1e-12)


def test_graded_relevance_moves_ndcg_and_not_the_binary_metrics(beir_eval):
    """The same run scored against the qrels with every relevance 1: the binary metrics stay, nDCG@10 changes (the
    graded qrels are what 05 scored)."""
    qrels = read_qrels(beir_eval / "data" / "retrieval.test.qrels")
    binary = {qid: {doc: min(rel, 1) for doc, rel in docs.items()} for qid, docs in qrels.items()}
    run = read_run(beir_eval / "eval" / "tiny.retrieval.trec")
    graded, flat = trec_eval(qrels, run), trec_eval(binary, run)
    assert {m: v for m, v in graded.items() if m != "ndcg@10"} == {m: v for m, v in flat.items() if m != "ndcg@10"}
    assert graded["ndcg@10"] != pytest.approx(flat["ndcg@10"])
    metrics = json.loads((beir_eval / "eval" / "metrics.json").read_text())["tiny"]["retrieval"]
    assert metrics["ndcg@10"] == pytest.approx(graded["ndcg@10"], abs=1e-12)


def test_a_run_file_line_is_qid_q0_docid_rank_score_tag(beir_eval):
    with open(beir_eval / "eval" / "bm25.retrieval.trec", encoding="utf-8") as f:
        first = [line.split() for line in f][:40]
    assert [(q, q0, rank, tag) for q, q0, _, rank, _, tag in first] == [("q:0", "Q0", str(r), "bm25")
                                                                         for r in range(1, 41)]
    scores = [float(score) for *_, score, _ in first]
    assert scores == sorted(scores, reverse=True)


def test_crossref_run_files_give_trec_evals_map_and_ndcg_equal_to_05s(tiny_model, tiny_data, tmp_path):
    import pytrec_eval
    run_main("05_evaluate.py", "--data", tiny_data, "--model", f"tiny={tiny_model}", "--task", "crossref", "lexical",
             "--resamples", "0", "--out", tmp_path / "eval")
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    qrels = read_qrels(tiny_data / "crossref.qrels")
    for row in ("tiny", "lexical"):
        run = read_run(tmp_path / "eval" / f"{row}.crossref.trec")
        assert {qid: set(docs) for qid, docs in run.items()} == {qid: set(docs) for qid, docs in qrels.items()}
        per_query = pytrec_eval.RelevanceEvaluator(qrels, {"map", "ndcg"}).evaluate(run)
        for measure in ("map", "ndcg"):
            mean = sum(q[measure] for q in per_query.values()) / len(per_query)
            assert metrics[row]["crossref"][measure] == pytest.approx(mean, abs=1e-12)


def test_a_query_without_terms_ranks_every_document_alike_in_the_table_and_the_run_file(beir_eval):
    """bm25s gives such a query the empty string as its token, which matched the empty and stop-word-only
    documents with a positive score; now every score is 0, in trec_eval's order of ties (ids descending)."""
    with open(beir_eval / "eval" / "bm25.retrieval.trec", encoding="utf-8") as f:
        lines = [line.split() for line in f if line.startswith("q:12 ")]
    assert [(doc, float(score)) for _, _, doc, _, score, _ in lines] == [
        (doc, 0.0) for doc in sorted(map(str, range(40)), reverse=True)]
