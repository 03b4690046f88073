"""Key-sentence extraction: sentences, splits, the base-model query, runs, extraction. The pair losses against
sentence-transformers': test_losses.py."""

import json
import os

import numpy as np
import pytest
import torch

from common.extract.sentences import clean, label, split, splitter
from conftest import read_jsonl, run_main, script_error, script_main

def test_split_cuts_at_span_ends_with_offsets_into_the_text():
    text = "We knocked out TP53 in HeLa cells.  The cells (e.g. clone 3) grew.\nFig. 2 shows it."
    sentences = split(text, splitter())
    assert sentences == [("We knocked out TP53 in HeLa cells.", 0, 34), ("The cells (e.g.", 36, 51),
                         ("clone 3) grew.", 52, 66), ("Fig.", 67, 71), ("2 shows it.", 72, 83)]
    assert all(text[s:e] == sentence for sentence, s, e in sentences)


def test_split_reads_a_long_text_a_window_at_a_time_with_the_same_sentences(monkeypatch):
    from common.extract import sentences as module
    text = " ".join(f"Sentence number {i} is here (e.g. this one)." for i in range(40))
    whole = split(text, splitter())
    monkeypatch.setattr(module, "PUNKT_WINDOW", 100)
    assert split(text, splitter()) == whole
    # a sentence longer than the window is cut at the window's last space
    assert split("word " * 50 + "end.", splitter()) == [
        ("word " * 19 + "word", 0, 99), ("word " * 18 + "word", 100, 194), ("word " * 11 + "end.", 195, 254)]


def test_clean_removes_html_and_latex():
    text = ("<p>We knocked out <i>TP53</i> in HeLa cells<sup>1</sup> using CRISPR&ndash;Cas9.</p>"
            "<p>TNF-$\\alpha$ rose \\cite{ref1} in \\textit{vitro}~(\\textbf{Fig.\\ 2}).</p><script>x()</script>")
    assert clean(text) == "We knocked out TP53 in HeLa cells1 using CRISPR–Cas9. TNF-alpha rose in vitro (Fig. 2)."


def test_labels_match_key_sentences_with_whitespace_removed():
    sentences = ["We knocked out TP53.", "It grew.", "Another one."]
    labels, missing = label(sentences, ["We  knocked\nout <i>TP53</i>.", "Not in the text."])
    assert labels == [1, 0, 0] and missing == ["Not in the text."]


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_sentences_cli_labels_and_drops_articles_with_a_missing_key_sentence(tmp_path):
    src = write(tmp_path / "in.jsonl", [
        {"id": "x1", "text": "<p>Intro here.</p><p>We deleted <b>MLKL</b> in L929 cells with CRISPR.</p> End.",
         "key_sentences": ["We deleted MLKL in L929 cells  with CRISPR."]},
        {"id": "x2", "text": "One. Two.", "key_sentences": ["Three."]}])
    proc = run_main("01_extract.py", "sentences", "--input", src, "--out", tmp_path / "out")
    assert read_jsonl(tmp_path / "out" / "sentences.jsonl") == [
        {"id": "x1", "sentences": ["Intro here.", "We deleted MLKL in L929 cells with CRISPR.", "End."],
         "labels": [0, 1, 0]}]
    assert "dropped article x2: key sentence not found: 'Three.'" in proc.stderr
    counts = json.loads((tmp_path / "out" / "manifest.json").read_text())["counts"]
    assert counts == {"articles": 1, "sentences": 3, "key_sentences": 1, "dropped_articles": 1}


def test_bad_sentence_input_is_a_one_line_error(tmp_path):
    src = write(tmp_path / "in.jsonl", [{"id": "x1", "text": "A."}])
    assert script_error("01_extract.py", "sentences", "--input", src, "--out", tmp_path / "out") == \
        f"error: {src}:1: missing field 'key_sentences'"


def punkt_tab(root, abbreviations):
    """An English ``punkt_tab`` under ``root`` as NLTK's downloader lays it out, knowing ``abbreviations`` alone."""
    folder = root / "tokenizers" / "punkt_tab" / "english"
    folder.mkdir(parents=True)
    for name in ("collocations.tab", "sent_starters.txt", "ortho_context.tab"):
        (folder / name).write_text("")
    (folder / "abbrev_types.txt").write_text("".join(f"{a}\n" for a in abbreviations))
    return root


@pytest.mark.parametrize("installed", [True, False])
def test_pretrained_english_punkt_splits_with_its_data_and_without_it_is_a_clear_error(tmp_path, monkeypatch,
                                                                                      installed):
    """NLTK looks for its data on ``nltk.data.path`` alone (NLTK_DATA is read into it when nltk is imported): a
    punkt_tab written here, or an empty folder, so that both run wherever the real data is installed or not."""
    import nltk
    data = punkt_tab(tmp_path / "nltk_data", ["e.g", "fig"]) if installed else tmp_path / "empty"
    data.mkdir(exist_ok=True)
    monkeypatch.setattr(nltk.data, "path", [str(data)])
    text = "The cells (e.g. clone 3) grew. Fig. 2 shows it."
    src = write(tmp_path / "in.jsonl", [{"id": "x1", "text": text, "key_sentences": ["Fig. 2 shows it."]}])
    args = ["sentences", "--input", src, "--out", tmp_path / "out", "--splitter", "punkt-english"]
    if not installed:
        assert script_error("01_extract.py", *args) == (
            "error: --splitter punkt-english needs NLTK's punkt_tab data (python -m nltk.downloader punkt_tab); "
            "--splitter punkt needs none")
        assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []
        return
    assert split(text, splitter()) == [("The cells (e.g.", 0, 15), ("clone 3) grew.", 16, 30), ("Fig.", 31, 35),
                                       ("2 shows it.", 36, 47)]  # untrained Punkt: every period ends a sentence
    script_main("01_extract.py")([str(a) for a in args])
    assert read_jsonl(tmp_path / "out" / "sentences.jsonl") == [
        {"id": "x1", "sentences": ["The cells (e.g. clone 3) grew.", "Fig. 2 shows it."], "labels": [0, 1]}]


def test_splits_are_by_article_and_seeded(keysent_data, tmp_path):
    data = keysent_data / "data"
    parts = {p: read_jsonl(data / f"keysent.{p}.jsonl") for p in ("train", "val", "test")}
    ids = {p: {a["id"] for a in rows} for p, rows in parts.items()}
    assert not (ids["train"] & ids["val"]) and not (ids["train"] & ids["test"]) and not (ids["val"] & ids["test"])
    assert len(ids["test"]) == round(0.2 * 24) and len(ids["val"]) == round(0.25 * (24 - len(ids["test"])))
    everything = {a["id"]: a for a in read_jsonl(keysent_data / "sentences.jsonl")}
    assert all(a == everything[a["id"]] for rows in parts.values() for a in rows)
    run_main("02_build_graph.py", "sentences", "--sentences", keysent_data / "sentences.jsonl", "--out",
             tmp_path / "again")
    assert (tmp_path / "again" / "keysent.test.jsonl").read_bytes() == (data / "keysent.test.jsonl").read_bytes()


def test_base_model_query_is_the_mean_training_key_sentence_embedding(tiny_model, keysent_data):
    from common.data.keysent_splits import read_sentences
    from common.eval.keysent import KeySentenceModel
    from common.models.inference import embed
    from common.models.loading import load_encoder
    from common.models.tokens import TokenStore
    train = read_sentences(keysent_data / "data" / "keysent.train.jsonl")
    model = KeySentenceModel(str(tiny_model), train_articles=train)
    encoder, tokenizer, settings = load_encoder(str(tiny_model), default_pooling="mean")
    keys = [s for a in train for s, y in zip(a["sentences"], a["labels"]) if y]
    expected = embed(encoder, TokenStore(tokenizer, keys, settings["max_length"])).mean(0)
    np.testing.assert_allclose(model.query, expected, rtol=1e-5, atol=1e-6)
    assert model.query_from == f"the mean of {len(keys)} training key sentences"


@pytest.mark.parametrize("init", ["zero", "random"])
def test_query_token_is_added_with_its_initial_embedding(tiny_model, init):
    from common.train.objectives.keysent import add_query_token
    from common.models.loading import load_encoder
    encoder, tokenizer, _ = load_encoder(str(tiny_model))
    before = encoder.transformer.get_input_embeddings().weight.shape[0]
    add_query_token(encoder, tokenizer, "[QUERY]", init, seed=3)
    weights = encoder.transformer.get_input_embeddings().weight
    assert weights.shape[0] == before + 1 and tokenizer.convert_tokens_to_ids("[QUERY]") == before
    assert tokenizer("[QUERY]")["input_ids"] == [tokenizer.cls_token_id, before, tokenizer.sep_token_id]
    if init == "zero":
        assert torch.count_nonzero(weights[-1]) == 0
    else:
        assert 0.01 < weights[-1].std().item() < 0.04  # BERT's initializer_range 0.02


@pytest.fixture(scope="module")
def keysent_runs(tiny_model, keysent_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    common = ["--data", keysent_data / "data", "--model", tiny_model, "--epochs", "2", "--batch-size", "16",
              "--eval-every", "3", "--max-length", "32"]
    proc = run_main("03_train.py", "--objective", "contrastive", "--out", root / "a", "--seeds", "1", "2", *common)
    assert proc.stdout.count("effective batch 16 = 16 per process × 1 processes × 1 accumulation") == 2
    run_main("03_train.py", "--objective", "cosine", "--out", root / "b", "--seed", "2", "--query-token", "[QUERY]",
             "--query-init", "random", *common)
    return root


def test_seeds_train_one_run_per_seed(keysent_runs):
    manifests = [json.loads((keysent_runs / "a" / f"seed_{k}" / "manifest.json").read_text()) for k in (1, 2)]
    assert [m["seed"] for m in manifests] == [1, 2]
    first, second = ((keysent_runs / "a" / f"seed_{k}" / "model" / "model.safetensors").read_bytes() for k in (1, 2))
    assert first != second


def test_pair_runs_validate_with_four_scores_and_keep_the_best(keysent_runs):
    log = read_jsonl(keysent_runs / "a" / "seed_1" / "log.jsonl")
    validations = [r for r in log if "val_ap_max" in r]
    assert validations and all(r["val_ap_max"] == max(r[f"val_ap_{k}"] for k in
                                                      ("cosine", "manhattan", "euclidean", "dot")) for r in validations)
    best = json.loads((keysent_runs / "a" / "seed_1" / "manifest.json").read_text())["counts"]["best_val_ap_max"]
    assert best == max(r["val_ap_max"] for r in validations)
    info = json.loads((keysent_runs / "b" / "model" / "docembed.json").read_text())
    assert info["objective"] == "cosine" and info["query_token"] == "[QUERY]" and info["query_init"] == "random"


def test_two_sigma_is_the_population_standard_deviation():
    from common.eval.keysent import mean_2sd
    assert mean_2sd([{"arp": 0.5}, {"arp": 0.7}]) == {"arp": pytest.approx(0.6), "arp_2sd": pytest.approx(0.2)}
    assert mean_2sd([{"arp": 0.5}]) == {"arp": 0.5, "arp_2sd": 0.0}


def test_mean_cosine_per_outcome_follows_the_top_r_ranking():
    from common.eval.keysent import outcome_cosines
    scored = [(np.array([0.9, 0.2, 0.5]), np.array([1, 0, 1])), (np.array([0.1, 0.8]), np.array([1, 0]))]
    expected = {"key": 0.5, "other": 0.5, "key_in_top_r": 0.7, "key_missed": 0.1, "other_in_top_r": 0.8,
                "other_below": 0.2}
    assert outcome_cosines(scored) == pytest.approx(expected)


def test_evaluation_reports_runs_as_mean_and_two_sigma_with_the_theses_figures(keysent_runs, keysent_data, tmp_path):
    out = tmp_path / "eval"
    runs = [keysent_runs / "a" / "seed_1", keysent_runs / "a" / "seed_2"]
    run_main("05_evaluate.py", "--data", keysent_data / "data", "--model", f"a1={runs[0] / 'model'}",
             "--model", f"a2={runs[1] / 'model'}", "--runs", *runs, "--out", out)
    metrics = json.loads((out / "metrics.json").read_text())
    a, b, summary = metrics["a1"]["keysent"], metrics["a2"]["keysent"], metrics["runs (n=2)"]["keysent"]
    for key in ("arp", "mse", "pearson"):
        assert summary[key] == pytest.approx((a[key] + b[key]) / 2)
        assert summary[f"{key}_2sd"] == pytest.approx(2 * np.std([a[key], b[key]], ddof=0))
    assert 0 <= a["arp"] <= 1 and set(metrics["a1"]["keysent.cosine"]) == {
        "key", "other", "key_in_top_r", "key_missed", "other_in_top_r", "other_below"}
    report = (out / "report.md").read_text()
    assert "keysent arp_2sd" in report and "| model | key | other | key in top r |" in report
    for figure in ("keysent_threshold.png", "keysent_cosine.png", "keysent_tsne.png", "keysent_validation.png"):
        assert (out / figure).read_bytes()[:4] == b"\x89PNG" and f"]({figure})" in report


def test_extract_writes_top_sentences_with_offsets_and_scores(keysent_runs, tmp_path):
    src = write(tmp_path / "new.jsonl", [
        {"id": "n1", "text": "<p>Genes matter.</p><p>We knocked out <i>BRCA1</i> in MCF10A cells using CRISPR-Cas9."
                             "</p> The cells were sensitive. They grew."},
        {"id": "n2", "text": "Only one sentence here."}])
    run_main("05_evaluate.py", "extract", "--model", keysent_runs / "b" / "model", "--input", src, "--top", "2",
             "--out", tmp_path / "keys.jsonl")
    rows = read_jsonl(tmp_path / "keys.jsonl")
    assert [r["id"] for r in rows] == ["n1", "n2"] and [len(r["key_sentences"]) for r in rows] == [2, 1]
    cleaned = clean(json.loads(src.read_text().splitlines()[0])["text"])
    for k in rows[0]["key_sentences"]:
        assert cleaned[k["start"]:k["end"]] == k["text"] and -1 <= k["score"] <= 1
    assert rows[0]["key_sentences"][0]["score"] >= rows[0]["key_sentences"][1]["score"]
    threshold = rows[0]["key_sentences"][0]["score"] - 1e-9
    run_main("05_evaluate.py", "extract", "--model", keysent_runs / "b" / "model", "--input", src, "--top", "2",
             "--threshold", threshold, "--out", tmp_path / "strict.jsonl")
    strict = read_jsonl(tmp_path / "strict.jsonl")
    assert strict[0]["key_sentences"] == rows[0]["key_sentences"][:1]


def test_extract_with_a_model_not_trained_for_key_sentences_needs_a_query(tiny_model, tmp_path):
    """One line, nothing written (05's exit status for it as a user meets it: test_evaluate.py)."""
    src = write(tmp_path / "new.jsonl", [{"id": "n1", "text": "A sentence."}])
    assert script_error("05_evaluate.py", "extract", "--model", tiny_model, "--input", src, "--out",
                        tmp_path / "k.jsonl").endswith("give --query TEXT")
    assert not (tmp_path / "k.jsonl").exists()


def test_extract_with_a_model_that_does_not_exist_is_a_one_line_error(tmp_path):
    src = write(tmp_path / "new.jsonl", [{"id": "n1", "text": "A sentence."}])
    assert script_error("05_evaluate.py", "extract", "--model", tmp_path / "none", "--input", src, "--out",
                        tmp_path / "k.jsonl") == (f"error: {tmp_path / 'none'}: no such model folder, nor a model of "
                                                  "that name in the local Hugging Face cache")


def test_a_split_too_small_to_hold_articles_is_refused_and_an_empty_test_split_is_one_line(tiny_model, tmp_path):
    sentences = tmp_path / "sentences.jsonl"
    write(sentences, [{"id": f"a{i}", "sentences": ["One.", "Two."], "labels": [1, 0]} for i in range(2)])
    assert script_error("02_build_graph.py", "sentences", "--sentences", sentences, "--out", tmp_path / "d") == (
        f"error: {sentences}: 2 articles leave the val and test split(s) empty (train 2, val 0, test 0); give more "
        "articles or other shares")
    assert not (tmp_path / "d").exists()
    data = tmp_path / "data"
    data.mkdir()
    for part in ("train", "val", "test"):
        (data / f"keysent.{part}.jsonl").write_text("" if part == "test" else sentences.read_text())
    assert script_error("05_evaluate.py", "--data", data, "--model", f"m={tiny_model}", "--out", tmp_path / "eval") == (
        f"error: {data / 'keysent.test.jsonl'}: no articles (an empty test split); rebuild it with 02_build_graph.py "
        "sentences from more articles")


def test_extract_never_writes_over_its_input_or_onto_a_folder(tiny_model, tmp_path):
    articles = tmp_path / "new.jsonl"
    write(articles, [{"id": "a", "text": "One sentence here. Another one there."}])
    before = articles.read_text()
    assert script_error("05_evaluate.py", "extract", "--model", tiny_model, "--input", articles, "--out",
                        articles) == (f"error: --out {articles}: is --input {articles}, which this command reads; give "
                                      "an --out apart from its inputs")
    (tmp_path / "folder").mkdir()
    assert script_error("05_evaluate.py", "extract", "--model", tiny_model, "--input", articles, "--out",
                        tmp_path / "folder") == \
        f"error: {tmp_path / 'folder'}: is a directory; --out names the JSONL file to write"
    assert articles.read_text() == before and sorted(os.listdir(tmp_path)) == ["folder", "new.jsonl"]


def test_a_contrastive_batch_run_in_parts_has_the_loss_and_gradients_of_the_whole_batch(tiny_model, keysent_data):
    from types import SimpleNamespace

    from common.train.objectives.keysent import KEYSENT_QUERY, ContrastiveObjective
    from test_train import part_gradients
    args = SimpleNamespace(model=str(tiny_model), data=str(keysent_data / "data"), pooling="mean", normalize=False,
                           max_length=32, length_groups=2, margin=0.5, query=KEYSENT_QUERY, query_token=None,
                           query_init="zero", seed=0)
    objective = ContrastiveObjective(args, None)
    (whole, grads, sizes), (loss, part_grads, part_sizes) = part_gradients(objective, slice(0, 12), [0, 40])
    assert sizes is None and len(part_sizes) > 2 and sum(part_sizes) == 12
    assert loss == pytest.approx(whole, rel=1e-6)
    for name in grads:  # the query, embedded once per part, has the gradient of its one embedding per batch
        torch.testing.assert_close(part_grads[name], grads[name], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("precision", ["int8", "bf16"])
def test_the_key_sentence_task_refuses_a_lower_precision_it_would_not_use(keysent_data, tiny_model, tmp_path,
                                                                          precision):
    """The key-sentence evaluation embeds in float32 only: --int8 or --bf16 would be recorded for vectors it did not
    make, so it is refused before anything is written."""
    assert script_error("05_evaluate.py", "--data", keysent_data / "data", "--model", f"base={tiny_model}", "--out",
                        tmp_path / "eval", f"--{precision}") == \
        (f"error: --{precision}: the key-sentence task embeds its sentences in float32 only; evaluate it without the "
         "flag")
    assert not (tmp_path / "eval").exists()
