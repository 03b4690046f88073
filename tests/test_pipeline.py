"""The whole WikiSpecter pipeline on a small Finnish dump with a tiny model: 01 → 02 → 03 → 05, each script's main in
this process (each script's exit status as a process of its own: its own test file)."""

import json
import random

import numpy as np
import pytest

from conftest import WORDS, corpus_text, read_jsonl, run_main


TOPICS = {"Tiede": "Fysiikka", "Taide": "Maalaustaide", "Maantiede": "Kaupungit"}


def finnish_wiki(n=45, seed=0):
    rng = random.Random(seed)
    names = [f"{WORDS[i % len(WORDS)].capitalize()} {i}" for i in range(n)]
    texts = corpus_text(seed, n)
    pages, page_id = [], 1
    tops = list(TOPICS)
    for i, name in enumerate(names):
        top = tops[i % 3]
        same = [j for j in range(n) if j % 3 == i % 3 and j != i]
        links = " ".join(f"[[{names[j]}]]" for j in rng.sample(same, rng.randint(3, 6)))
        text = (f"{{{{Tietolaatikko|nimi={name}}}}}\n'''{name}''' on {top.lower()}n aihe: {texts[i]} "
                f"Katso myös {links}.<ref>Lähde</ref>\n== Historia ==\nLisää.\n[[Luokka:{TOPICS[top]}]]")
        pages.append((page_id, name, 0, text))
        page_id += 1
    for top, second in TOPICS.items():
        pages.append((page_id, f"Luokka:{top}", 14, "[[Luokka:Yleinen wikiluokitusjärjestelmä]]"))
        pages.append((page_id + 1, f"Luokka:{second}", 14, f"[[Luokka:{top}]]"))
        page_id += 2
    pages.append((page_id, "Ohjaus", 0, f"#OHJAUS [[{names[0]}]]", names[0]))
    return pages


@pytest.mark.slow
def test_dump_to_report_with_a_tiny_model(tmp_path, write_dump, tiny_model):
    dump = write_dump(finnish_wiki(), name="fiwiki.xml.bz2")
    run_main("01_extract.py", "wiki", "--dump", dump, "--out", tmp_path / "wiki", "--workers", "0", "--min-chars", "40")
    articles = read_jsonl(tmp_path / "wiki" / "articles.jsonl")
    assert len(articles) == 45 and all(3 <= len(a["links"]) <= 6 for a in articles)
    assert {a["labels"]["top"] for a in articles} == set(TOPICS)

    data = tmp_path / "data"
    run_main("02_build_graph.py", "--articles", tmp_path / "wiki" / "articles.jsonl", "--out", data,
             "--crossref-min-links", "3", "--crossref-positives", "3", "--crossref-negatives", "10",
             "--topic-min", "5", "--eval-docs", "shared")  # 45 articles: held-out ones would leave no training
    run = tmp_path / "run"
    run_main("03_train.py", "--data", data, "--model", tiny_model, "--out", run, "--pooling", "mean",
             "--max-length", "32", "--batch-size", "8", "--epochs", "1")
    evaluation = tmp_path / "eval"
    proc = run_main("05_evaluate.py", "--data", data, "--model", f"base={tiny_model}", "--model",
                    f"trained={run / 'model'}", "--out", evaluation)

    ids = (evaluation / "trained.ids.txt").read_text().split()
    assert ids == [d["id"] for d in read_jsonl(data / "docs.jsonl")]
    emb = np.load(evaluation / "trained.npy")
    assert emb.shape == (45, 32) and emb.dtype == np.float32
    metrics = json.loads((evaluation / "metrics.json").read_text())
    assert set(metrics) == {"base", "trained", "lexical"}
    for model in ("base", "trained"):
        assert set(metrics[model]) == {"crossref", "topics.top", "topics.second"}
        assert all(0 <= metrics[model]["crossref"][m] <= 1 for m in ("map", "ndcg"))
        assert all(0 <= metrics[model]["topics.top"][m] <= 1 for m in ("f1", "accuracy"))
    report = (evaluation / "report.md").read_text()
    table = report[:report.index("\n\n") + 1]
    assert table.splitlines()[0] == ("| model | crossref map | crossref ndcg | topics.second f1 | "
                                     "topics.second accuracy | topics.top f1 | topics.top accuracy | card |")
    assert [line.split("|")[1].strip() for line in table.splitlines()[2:]] == ["base", "trained", "lexical"]
    assert [line.split("|")[-2].strip() for line in table.splitlines()[2:]] == [
        "–", "[run/model](../run/model/README.md)", "–"]
    # printed, the same table names the card by its folder ("run/model") instead of a link that climbs out of --out
    printed = table.replace("[run/model](../run/model/README.md)", "run/model")
    assert f"{100 * metrics['trained']['crossref']['map']:.2f}" in table and printed in proc.stdout
    for figure in ("token_lengths.png", "confusion_top.png", "labels.png", "tsne_top.png", "tsne_second.png"):
        assert (evaluation / figure).read_bytes()[:4] == b"\x89PNG" and f"]({figure})" in report
    manifest = json.loads((evaluation / "manifest.json").read_text())
    assert manifest["counts"]["crossref_queries"] == len({line.split()[0] for line in
                                                          (data / "crossref.qrels").read_text().splitlines()})
