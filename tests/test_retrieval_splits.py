"""02_build_graph.py retrieval (common/data/retrieval.py): the split by paper, query ids apart from document ids, a
pairs file's equal queries grouped, a query that stands inside its target dropped in every split, and shares that
leave a split empty refused in one line."""

import json

import pytest

from conftest import forget_hashes, paper_articles, read_jsonl, script_main, write_lines

from common.io import InputError


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
    script_main("02_build_graph.py")(["retrieval", "--articles", str(tmp_path / "articles.jsonl"), "--out", str(out),
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
    script_main("02_build_graph.py")(["retrieval", "--articles", str(tmp_path / "articles.jsonl"), "--out", str(out),
                                      "--test", "0.2", "--val", "0.2"])
    assert train not in {p["doc"] for p in read_jsonl(out / "pairs.train.jsonl")}
    assert f"q:{test}" not in {q["qid"] for q in read_jsonl(out / "queries.test.jsonl")}
    assert len(read_jsonl(out / "queries.test.jsonl")) == 11
    assert json.loads((out / "manifest.json").read_text())["counts"]["queries_inside_document"] == 2
    lines = [{"query": "as the", "doc": test}, {"query": "nowhere in it", "doc": test}]
    write_lines(tmp_path / "pairs.jsonl", [json.dumps(x) for x in lines])
    script_main("02_build_graph.py")(["retrieval", "--articles", str(tmp_path / "articles.jsonl"), "--out",
                                      str(tmp_path / "pairs"), "--test", "0.2", "--val", "0.2", "--pairs",
                                      str(tmp_path / "pairs.jsonl")])
    assert read_jsonl(tmp_path / "pairs" / "queries.test.jsonl") == [{"qid": "q:2", "text": "nowhere in it"}]


def test_splits_that_round_down_to_nothing_are_refused_and_an_empty_test_split_is_one_line(tmp_path, tiny_model):
    articles = write_lines(tmp_path / "articles.jsonl", [json.dumps(a) for a in paper_articles(3)])
    with pytest.raises(InputError) as e:
        script_main("02_build_graph.py")(["retrieval", "--articles", str(articles), "--out", str(tmp_path / "d")])
    assert str(e.value) == (f"{articles}: 3 papers leave the val and test split(s) empty (train 3, val 0, test 0); "
                            "give more papers or other shares")
    with pytest.raises(InputError) as e:
        script_main("02_build_graph.py")(["retrieval", "--articles", str(articles), "--out", str(tmp_path / "d"),
                                          "--test", "0.7", "--val", "0.7"])
    assert str(e.value) == "--test 0.7 and --val 0.7: both are shares of all papers and must leave some for " \
                           "training (sum below 1)"
    assert list((tmp_path / "d").iterdir()) == []
    data = tmp_path / "data"
    script_main("02_build_graph.py")(["retrieval", "--articles", str(articles), "--out", str(data), "--test", "0.34",
                                      "--val", "0.34"])
    forget_hashes(data)
    (data / "retrieval.test.qrels").write_text("")
    with pytest.raises(InputError) as e:
        script_main("05_evaluate.py")(["--data", str(data), "--task", "bm25", "--out", str(tmp_path / "eval")])
    assert str(e.value) == f"{data}/retrieval.test.qrels: no test queries (an empty test split); rebuild the data " \
                           "with 02_build_graph.py retrieval from more papers"
