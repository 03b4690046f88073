"""02_build_graph.py classify (common/data/classify_splits.py): labelled splits from 01_extract.py hf — documents
and document pairs — as classification tasks in one data directory, which 05 --task classify scores."""

import json
import os

import pytest

from conftest import WORDS, corpus_text, read_jsonl, run_main, script_error


def article(doc_id, text, label, title=""):
    return {"id": doc_id, "title": title, "text": text, "links": [], "categories": [label], "labels": {"top": label}}


def pair(row, a, b, label):
    return {"id": row, "docs": [{"id": a[0], "title": "", "text": a[1]}, {"id": b[0], "title": "", "text": b[1]}],
            "label": label}


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_documents_and_pairs_of_two_tasks_become_one_data_directory(tmp_path):
    docs_train = write(tmp_path / "d-train.jsonl", [article("train-1", "good film", "pos", "A"),
                                                     article("train-2", "bad film", "neg")])
    docs_test = write(tmp_path / "d-test.jsonl", [article("test-1", "fine film", "pos")])
    pairs_train = write(tmp_path / "p-train.jsonl", [pair("train-1", ("h1", "x"), ("h2", "y"), "1"),
                                                     pair("train-2", ("h2", "y"), ("h3", "z"), "0")])
    pairs_test = write(tmp_path / "p-test.jsonl", [pair("test-1", ("h3", "z"), ("h1", "x"), "1")])
    out = tmp_path / "data"
    run_main("02_build_graph.py", "classify", "--name", "imdb", "--train", docs_train, "--test", docs_test,
             "--name", "aan", "--train", pairs_train, "--test", pairs_test, "--out", out)
    assert read_jsonl(out / "docs.jsonl") == [
        {"id": "imdb:train-1", "title": "A", "text": "good film"},
        {"id": "imdb:train-2", "title": "", "text": "bad film"},
        {"id": "imdb:test-1", "title": "", "text": "fine film"}, {"id": "aan:h1", "title": "", "text": "x"},
        {"id": "aan:h2", "title": "", "text": "y"}, {"id": "aan:h3", "title": "", "text": "z"}]
    assert read_jsonl(out / "classify.imdb.train.jsonl") == [{"id": "imdb:train-1", "label": "pos"},
                                                             {"id": "imdb:train-2", "label": "neg"}]
    assert read_jsonl(out / "classify.imdb.test.jsonl") == [{"id": "imdb:test-1", "label": "pos"}]
    assert read_jsonl(out / "classify.aan.train.jsonl") == [{"ids": ["aan:h1", "aan:h2"], "label": "1"},
                                                            {"ids": ["aan:h2", "aan:h3"], "label": "0"}]
    assert read_jsonl(out / "classify.aan.test.jsonl") == [{"ids": ["aan:h3", "aan:h1"], "label": "1"}]
    assert json.loads((out / "manifest.json").read_text())["counts"] == {
        "imdb_train": 2, "imdb_test": 1, "aan_train": 2, "aan_test": 1, "documents": 6}


@pytest.mark.parametrize("case", ["id in both splits", "mixed", "kinds differ", "no label", "counts", "name twice",
                                  "id with a tab"])
def test_bad_splits_are_one_line_and_nothing_is_written(tmp_path, case):
    train = write(tmp_path / "train.jsonl", [article("a", "one", "x"), article("b", "two", "y")])
    test_rows = {"id in both splits": [article("a", "another text", "x")],
                 "mixed": [article("c", "three", "x"), pair("p", ("h1", "x"), ("h2", "y"), "1")],
                 "kinds differ": [pair("p", ("h1", "x"), ("h2", "y"), "1")],
                 "no label": [{"id": "c", "title": "", "text": "three", "links": []}],
                 "counts": [article("c", "three", "x")], "name twice": [article("c", "three", "x")],
                 "id with a tab": [article("c\td", "three", "x")]}[case]
    test = write(tmp_path / "test.jsonl", test_rows)
    extra = {"counts": ["--name", "second"], "name twice": ["--name", "t", "--train", train, "--test", test]}.get(
        case, [])
    error = script_error("02_build_graph.py", "classify", "--name", "t", *extra, "--train", train, "--test", test,
                         "--out", tmp_path / "data")
    assert error == {
        "id in both splits": f"error: {test}:1: id \"a\" names another text than where it was first read (task t; "
                             "each id one text, in both splits)",
        "mixed": f"error: {test}:2: mixes single documents and pairs",
        "kinds differ": f"error: {test}: holds pairs, {train} single documents (task t)",
        "no label": f"error: {test}:1: no label (a non-empty string in labels.top)",
        "counts": "error: 2 --name, 1 --train and 1 --test: give each task its name, training split and test split",
        "name twice": "error: --name t: given 2 times; each task has a name of its own",
        "id with a tab": f"error: {test}:1: id \"c\\td\" is empty or holds whitespace or a control character",
    }[case]
    assert not (tmp_path / "data").exists() or os.listdir(tmp_path / "data") == []


def test_01_hf_to_02_classify_to_05_scores_each_task(tiny_model, tmp_path):
    """The thesis's path on local files: a document task and a pair task from CSV files through 01 hf, one data
    directory from 02 classify, and 05's head on the tiny model's vectors scores both."""
    texts = corpus_text(11, 48)
    for split, rows in (("train", range(0, 32)), ("test", range(32, 48))):
        (tmp_path / f"docs_{split}.csv").write_text("text,label\n" + "".join(
            f"{WORDS[i % 2]} {texts[i]},{('tiede', 'taide')[i % 2]}\n" for i in rows))
        (tmp_path / f"{split}_cite.csv").write_text("".join(  # as Zhou et al. 2020 publish them: no header
            f"{i % 2},{texts[i]},{texts[(i + 1) % 48]}\n" for i in rows))
        run_main("01_extract.py", "hf", "--dataset", tmp_path / f"docs_{split}.csv", "--split", split,
                 "--label-field", "label", "--out", tmp_path / f"docs-{split}")
        run_main("01_extract.py", "hf", "--dataset", tmp_path / f"{split}_cite.csv", "--split", split,
                 "--csv-columns", "label", "text_0", "text_1", "--text-field", "text_0", "text_1",
                 "--label-field", "label", "--out", tmp_path / f"aan-{split}")
    run_main("02_build_graph.py", "classify",
             "--name", "topics", "--train", tmp_path / "docs-train" / "articles.jsonl",
             "--test", tmp_path / "docs-test" / "articles.jsonl",
             "--name", "aan", "--train", tmp_path / "aan-train" / "pairs.jsonl",
             "--test", tmp_path / "aan-test" / "pairs.jsonl", "--out", tmp_path / "data")
    # a text of the pair set in both splits is one document: 48 distinct texts, 48 topic documents
    assert len(read_jsonl(tmp_path / "data" / "docs.jsonl")) == 96
    printed = run_main("05_evaluate.py", "--data", tmp_path / "data", "--model", f"tiny={tiny_model}", "--task",
                       "classify", "--resamples", "0", "--head-epochs", "2", "--out", tmp_path / "eval").stdout
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())["tiny"]
    assert sorted(metrics) == ["classify.aan", "classify.topics"]
    assert all(sorted(m) == ["acc_10k", "acc_1k", "acc_all"] for m in metrics.values())
    # two epochs of 32 documents: the loss still falls at the last, one note a task (its three heads are one)
    notes = [line for line in printed.splitlines() if line.startswith("note: tiny: classify.")]
    assert [note.split(" (")[0] for note in notes] == [
        f"note: tiny: classify.{task}: the heads of acc_1k, acc_10k, acc_all have not converged"
        for task in ("aan", "topics")]
    assert all(note.endswith("more --head-epochs train it further") for note in notes)
