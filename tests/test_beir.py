"""02_build_graph.py beir (common/data/beir.py): a BEIR folder as the project's retrieval data — query ids apart
from document ids, graded relevance kept, training qrels as the pairs 03 --objective mnrl trains on."""

import gzip
import json
import os

import pytest

from conftest import corpus_text, read_jsonl, run_main, script_error, train_in_process


def beir_folder(root, gz=False, qrels=None):
    """SciFact's shape: query ids and document ids share values ("1" is both)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "qrels").mkdir(exist_ok=True)
    texts = corpus_text(9, 6)
    corpus = "".join(json.dumps({"_id": str(i), "title": f"T{i}" if i != 3 else "", "text": t, "metadata": {}}) + "\n"
                     for i, t in enumerate(texts, 1))
    if gz:
        (root / "corpus.jsonl.gz").write_bytes(gzip.compress(corpus.encode()))
    else:
        (root / "corpus.jsonl").write_text(corpus)
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": f"query {q}", "metadata": {}}) + "\n"
                                                for q in ("1", "2", "3", "7", "8")))
    for split, lines in (qrels or {
            "test": ["1\t1\t2", "1\t4\t1", "1\t5\t0", "2\t2\t1", "2\t99\t1", "42\t2\t1", "8\t3\t0", "8\t4\t-1"],
            "dev": ["3\t3\t1"],
            "train": ["7\t5\t1", "7\t6\t2", "8\t6\t0"]}).items():
        (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{x}\n" for x in lines))
    return root, texts


@pytest.mark.parametrize("gz", [False, True])
def test_a_beir_folder_becomes_retrieval_data_with_query_ids_apart_and_graded_relevance(tmp_path, gz):
    folder, texts = beir_folder(tmp_path / "scifact", gz)
    out = tmp_path / "data"
    run_main("02_build_graph.py", "beir", "--input", folder, "--out", out)
    assert read_jsonl(out / "docs.jsonl") == [
        {"id": str(i), "title": f"T{i}" if i != 3 else "", "text": f"T{i} {t}" if i != 3 else t}
        for i, t in enumerate(texts, 1)]
    assert read_jsonl(out / "queries.test.jsonl") == [{"qid": "q:1", "text": "query 1"},
                                                      {"qid": "q:2", "text": "query 2"}]
    assert (out / "retrieval.test.qrels").read_text() == "q:1 0 1 2\nq:1 0 4 1\nq:1 0 5 0\nq:2 0 2 1\n"
    assert read_jsonl(out / "queries.val.jsonl") == [{"qid": "q:3", "text": "query 3"}]
    assert (out / "retrieval.val.qrels").read_text() == "q:3 0 3 1\n"
    assert read_jsonl(out / "pairs.train.jsonl") == [{"query": "query 7", "doc": "5"}, {"query": "query 7", "doc": "6"}]
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert counts == {"empty_documents": 0, "documents": 6, "qrels_test_unknown_document": 1,
                      "qrels_test_unknown_query": 1, "queries_test_none_relevant": 1, "queries_test": 2,
                      "qrels_test": 4, "queries_val": 1, "qrels_val": 1, "queries_train": 2, "pairs_train": 2}


def test_mnrl_trains_on_the_training_qrels_and_selects_on_dev(tiny_model, tmp_path):
    folder, _ = beir_folder(tmp_path / "beir", qrels={
        "test": ["1\t1\t1"], "dev": ["2\t2\t1", "3\t3\t1"],
        "train": ["1\t1\t1", "2\t2\t1", "3\t3\t1", "7\t4\t1", "8\t5\t2", "8\t6\t1"]})
    run_main("02_build_graph.py", "beir", "--input", folder, "--out", tmp_path / "data")
    counts = train_in_process(["--objective", "mnrl", "--data", str(tmp_path / "data"), "--model", str(tiny_model),
                               "--out", str(tmp_path / "run"), "--max-length", "32", "--batch-size", "3",
                               "--epochs", "1", "--log-every", "1", "--eval-every", "1"])
    assert counts["steps"] == 2  # 6 pairs, batch 3
    validations = [r for r in read_jsonl(tmp_path / "run" / "log.jsonl") if "val_ndcg@10" in r]
    assert len(validations) == 2 and counts["best_val_ndcg@10"] == max(r["val_ndcg@10"] for r in validations)


@pytest.mark.parametrize("case", ["no test qrels", "score", "id", "columns", "duplicate", "query is a document",
                                  "nothing judged"])
def test_bad_beir_folders_are_one_line_and_nothing_is_written(tmp_path, case):
    folder, _ = beir_folder(tmp_path / "beir")
    corpus = folder / "corpus.jsonl"
    if case == "no test qrels":
        os.remove(folder / "qrels" / "test.tsv")
    elif case == "score":
        (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\t1\t0.5\n")
    elif case == "columns":
        (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1 1 1\n")
    elif case == "id":
        corpus.write_text(corpus.read_text() + json.dumps({"_id": "a b", "title": "", "text": "x"}) + "\n")
    elif case == "nothing judged":
        (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\t404\t1\n404\t1\t1\n")
    elif case == "duplicate":
        corpus.write_text(corpus.read_text() + json.dumps({"_id": "2", "title": "", "text": "x"}) + "\n")
    else:
        corpus.write_text(corpus.read_text() + json.dumps({"_id": "q:1", "title": "", "text": "x"}) + "\n")
    error = script_error("02_build_graph.py", "beir", "--input", folder, "--out", tmp_path / "data")
    test_qrels = folder / "qrels" / "test.tsv"
    assert error == {
        "no test qrels": f"error: {folder}: no qrels/test.tsv (a BEIR folder holds corpus.jsonl, queries.jsonl and "
                         "qrels/test.tsv)",
        "score": f"error: {test_qrels}:2: score \"0.5\" is not a whole number between -2,147,483,648 and "
                 "2,147,483,647 (trec_eval's)",
        "columns": f"error: {test_qrels}:2: expected 'query-id<TAB>corpus-id<TAB>score'",
        "id": f"error: {corpus}:7: _id \"a b\" must be a string without whitespace or control characters (the qrels "
              "files cannot carry it)",
        "duplicate": f"error: {corpus}:7: duplicate _id \"2\"",
        "query is a document": f"error: {test_qrels}:2: query id q:1 equals a document id; rename that document",
        "nothing judged": f"error: {test_qrels}: judges no query of queries.jsonl relevant to a document of the corpus",
    }[case]
    assert not (tmp_path / "data").exists() or os.listdir(tmp_path / "data") == []
