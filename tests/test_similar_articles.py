"""02_build_graph.py similarity (common/data/similar_articles.py): Ginzburg et al. 2021's WINES and GAMES as they
publish them — a CSV of titles and section lists, a pickled dictionary of similar titles — as the similarity data
05 scores."""

import collections
import csv
import json
import os
import pickle

import pytest

from conftest import corpus_text, read_jsonl, run_main, script_error


def write_articles(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["title", "sections"])
        writer.writerows(rows)
    return path


def write_targets(path, targets):
    gt = collections.defaultdict(dict)  # as SDR pickles it
    for source, similar in targets.items():
        gt[source].update(dict.fromkeys(similar, 1))
    path.write_bytes(pickle.dumps(gt))
    return path


def test_wines_as_published_become_documents_and_similarity_qrels(tmp_path):
    articles = write_articles(tmp_path / "wines.txt", [
        ("Champagne", repr([("", "Sparkling wine from France."), ("History", "Monks, 1690."), ("Empty", "")])),
        ("Moët &amp; Chandon", repr([("", "A house in Épernay.")])),
        ("Cava", repr([("Making", "Traditional method.")]))])
    targets = write_targets(tmp_path / "gt", {"Champagne": ["Moët &amp; Chandon", "Cava", "Prosecco"],
                                             "Prosecco": ["Cava"], "Cava": ["Cava"]})
    run_main("02_build_graph.py", "similarity", "--articles", articles, "--targets", targets, "--out",
             tmp_path / "data")
    assert read_jsonl(tmp_path / "data" / "docs.jsonl") == [
        {"id": "0", "title": "Champagne", "text": "Sparkling wine from France. History Monks, 1690."},
        {"id": "1", "title": "Moët &amp; Chandon", "text": "A house in Épernay."},
        {"id": "2", "title": "Cava", "text": "Making Traditional method."}]
    assert (tmp_path / "data" / "similarity.qrels").read_text() == "0 0 1 1\n0 0 2 1\n"
    assert json.loads((tmp_path / "data" / "manifest.json").read_text())["counts"] == {
        "documents": 3, "sources": 1, "targets": 2, "targets_unknown": 1, "sources_unknown": 1}


def test_05_scores_the_similarity_data(tiny_model, tmp_path):
    texts = corpus_text(13, 20)
    articles = write_articles(tmp_path / "games.txt", [(f"Game {i}", repr([("", t)])) for i, t in enumerate(texts)])
    targets = write_targets(tmp_path / "gt", {f"Game {i}": [f"Game {(i + k) % 20}" for k in (1, 2, 5)]
                                             for i in range(6)})
    run_main("02_build_graph.py", "similarity", "--articles", articles, "--targets", targets, "--out",
             tmp_path / "data")
    run_main("05_evaluate.py", "--data", tmp_path / "data", "--model", f"tiny={tiny_model}", "--task",
             "similarity", "--resamples", "0", "--out", tmp_path / "eval")
    found = json.loads((tmp_path / "eval" / "metrics.json").read_text())["tiny"]["similarity"]
    assert sorted(found) == ["map", "mrr"] and 0 < found["map"] <= 1 and 0 < found["mrr"] <= 1


class Hostile:
    def __reduce__(self):
        return os.system, ("true",)


@pytest.mark.parametrize("case", ["code in the pickle", "not a dictionary", "sections", "fields", "repeated title",
                                  "no source found"])
def test_bad_inputs_are_one_line_and_nothing_is_written(tmp_path, case):
    articles = write_articles(tmp_path / "wines.txt", [("A", repr([("", "text a")])), ("B", repr([("", "text b")]))])
    targets = write_targets(tmp_path / "gt", {"A": ["B"]})
    if case == "code in the pickle":
        targets.write_bytes(pickle.dumps({"A": Hostile()}))
    elif case == "not a dictionary":
        targets.write_bytes(pickle.dumps(["A", "B"]))
    elif case == "sections":
        write_articles(articles, [("A", "__import__('os')")])
    elif case == "fields":
        write_articles(articles, [("A", "[]", "extra")])
    elif case == "repeated title":
        write_articles(articles, [("A", "[]"), ("A", "[]")])
    else:
        write_targets(targets, {"Z": ["A"]})
    error = script_error("02_build_graph.py", "similarity", "--articles", articles, "--targets", targets, "--out",
                         tmp_path / "data")
    assert error == {
        "code in the pickle": f"error: {targets}: not a pickled dictionary of similar articles (posix.system is not "
                              "a dictionary)",
        "not a dictionary": f"error: {targets}: expected a dictionary from a title to a dictionary keyed by similar "
                            "titles",
        "sections": f"error: {articles}:2: field 'sections' is not a Python literal list of (title, text) pairs",
        "fields": f"error: {articles}:2: expected two fields, title and sections (found 3)",
        "repeated title": f"error: {articles}:3: title \"A\" repeats an earlier article's",
        "no source found": "error: no source of the similar articles names an article of the table (their titles "
                           "differ)",
    }[case]
    assert not (tmp_path / "data").exists() or os.listdir(tmp_path / "data") == []
