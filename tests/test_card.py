"""Model cards (README.md) in every saved model folder (common/models/card.py, run_card.py): what they say and how
they load, a damaged card of the start model, text from outside escaped in a card and in report.md's links to the
cards. Loading a model's weights: test_loading.py."""

import json
import os
import re
import shutil

import numpy as np
import pytest
import torch
from huggingface_hub import ModelCard, ModelCardData

from common.io import InputError
from common.markdown import escape
from common.models import card
from common.models.inference import embed
from common.models.loading import load_encoder
from common.models.tokens import TokenStore
from conftest import SHORT_TRAIN, corpus_text, read_jsonl, script_error, script_main, st_losses, train_in_process


def _with_card(folder, base_model):
    """A user's model folder whose own card declares the hub model it was made from."""
    ModelCard(f"---\n{ModelCardData(base_model=base_model).to_yaml()}\n---\n\n# A model\n").save(folder / "README.md")
    return folder


def _data_in(language, tiny_data, tmp_path):
    """A copy of the data directory whose manifest records the source language (as 02 passes 01's on)."""
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    manifest = json.loads((data / "manifest.json").read_text())
    (data / "manifest.json").write_text(json.dumps({**manifest, "language": language}))
    return data


def _train(objective, data, model, out, *extra):
    argv = ["--objective", objective, "--data", str(data), "--model", str(model), "--out", str(out), "--log-every",
            "1", "--checkpoint-every", "0", *map(str, extra)]
    return train_in_process(argv)


def _code(text, language="python"):
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def test_a_triplet_run_writes_a_card_in_every_model_folder_that_model_card_reads_back(tiny_model, tiny_data, tmp_path):
    base = _with_card(tmp_path / "base", "bert-base-uncased")
    shutil.copytree(tiny_model, base, dirs_exist_ok=True)
    data = _data_in("fi", tiny_data, tmp_path)
    out = tmp_path / "run"
    _train("triplet", data, base, out, "--max-length", "32", "--batch-size", "16", "--epochs", "2", "--eval-every",
           "5", "--save-epochs")
    log = read_jsonl(out / "log.jsonl")
    for folder in ("model", "epoch_1", "epoch_2"):
        loaded = ModelCard.load(out / folder / "README.md")
        assert loaded.data.to_dict() == {
            "base_model": "bert-base-uncased", "language": "fi", "library_name": "sentence-transformers",
            "pipeline_tag": "sentence-similarity",
            "tags": ["sentence-transformers", "feature-extraction", "sentence-similarity", "docembed", "specter",
                     "triplet", "loss:TripletLoss"]}
        assert ModelCardData(**loaded.data.to_dict()).to_dict() == loaded.data.to_dict()
    text = ModelCard.load(out / "epoch_1" / "README.md").text
    first_epoch = [r for r in log if "lr" not in r and r["epoch"] <= 1]
    assert f"for {first_epoch[-1]['step']} optimizer steps (epoch 1)" in text
    rows = re.findall(r"^\| (\d+) \| [\d.]+ \| ([\d.]+) \| (←?) \|$", text, re.M)
    assert rows == [(str(r["step"]), f"{r['val_loss']:.4g}", "←" if r is first_epoch[-1] else "")
                    for r in first_epoch]
    text = ModelCard.load(out / "model" / "README.md").text
    manifest = json.loads((data / "manifest.json").read_text())
    (articles, sha), = manifest["inputs"].items()
    assert f"| {escape(os.path.basename(articles))} | {sha} |" in text
    assert "written by 02\\_build\\_graph.py links" in text
    assert f"model of 32 dimensions, from {escape(base.parent.name)}/base, fine-tuned with SPECTER's objective " \
           "(Cohan et al. 2020)" in text
    assert "| `--margin` | 1 |" in text and "| pooling | cls: the [CLS] token's last hidden state |" in text
    assert str(tmp_path) not in text.split("## Usage")[0]  # no path of this machine above the loading snippets
    assert "| parameters | 29,920 |" in text and "| maximum length | 32 tokens |" in text
    assert text.count("```bibtex") == 2 and "{SPECTER}: Document-level Representation Learning" in text


def test_the_cards_usage_code_gives_the_projects_vectors(tiny_model, tiny_data, tmp_path):
    """A reader who copies the card's two snippets gets the vectors 05 computes, in sentence-transformers and in
    plain transformers (mean pooling, normalised: the longest snippet)."""
    out = tmp_path / "run"
    _train("triplet", tiny_data, tiny_model, out, "--max-length", "32", "--batch-size", "16", "--max-steps", "2",
           "--pooling", "mean", "--normalize")
    where = str(out / "model")
    text = ModelCard.load(os.path.join(where, "README.md")).text
    sentence_transformers, plain = _code(text)
    texts = corpus_text(3, 4)
    encoder, tokenizer, _ = load_encoder(where)
    ours = embed(encoder, TokenStore(tokenizer, texts, 32))
    for snippet in (sentence_transformers, plain):
        assert len([line for line in snippet.splitlines() if not line.startswith(("import", "from"))]) <= 5
        scope = {"texts": texts}
        with torch.no_grad():
            exec(snippet, scope)
        np.testing.assert_allclose(np.asarray(scope["embeddings"]), ours, rtol=1e-5, atol=1e-5)


def test_an_mlm_folder_has_a_feature_extraction_card_loads_as_an_encoder_silently_and_checkpoints_quietly(
        tiny_model, tiny_data, tmp_path, capfd, caplog):
    out = tmp_path / "mlm"
    capfd.readouterr()
    _train("mlm", tiny_data, tiny_model, out, "--max-length", "32", "--batch-size", "8", "--max-steps", "4",
           "--checkpoint-every", "2", "--cache-dir", tmp_path / "cache")
    printed = "".join(capfd.readouterr()) + caplog.text
    # transformers' load report of the base (a masked-LM head missing, the pooler left out) and Accelerate's
    # warning about the tied decoder on every checkpoint are gone; the project's own note stays
    assert "LOAD REPORT" not in printed and "Removed shared tensor" not in printed and "tied weights" not in printed
    assert f"note: {tiny_model} has no masked-LM head weights (6 tensors newly initialised)" in printed
    loaded = ModelCard.load(out / "model" / "README.md")
    assert loaded.data.pipeline_tag == "feature-extraction" and "mlm" in loaded.data.tags
    assert "`AutoModelForMaskedLM` loads it with the encoder (`BertForMaskedLM`)" in loaded.text
    assert "{BERT}: Pre-training of Deep Bidirectional Transformers" in loaded.text
    encoder, tokenizer, settings = load_encoder(str(out / "model"))
    assert capfd.readouterr() == ("", "")
    from transformers import AutoModel
    reference = AutoModel.from_pretrained(str(out / "model"))
    for name, tensor in reference.state_dict().items():
        if not name.startswith("pooler."):
            assert torch.equal(tensor, encoder.transformer.state_dict()[name]), name


def test_a_checkpoint_stores_a_tied_weight_once_without_a_warning_and_loads_it_tied(tmp_path, capfd, caplog):
    from accelerate.utils import clean_state_dict_for_safetensors
    from safetensors.torch import load_file, load_model, save_file
    from transformers import BertConfig, BertForMaskedLM
    from common.models.saving import drop_tied_copies
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32)
    torch.manual_seed(0)
    model = BertForMaskedLM(config)
    state = model.state_dict()
    drop_tied_copies([model], [state], str(tmp_path))
    assert sorted(set(model.state_dict()) - set(state)) == ["cls.predictions.decoder.bias",
                                                            "cls.predictions.decoder.weight"]
    save_file(clean_state_dict_for_safetensors(state), tmp_path / "model.safetensors")  # as Accelerate saves
    assert "Removed shared tensor" not in "".join(capfd.readouterr()) + caplog.text
    torch.manual_seed(1)
    again = BertForMaskedLM(config)
    load_model(again, tmp_path / "model.safetensors")  # as Accelerate's load_state loads
    for name, tensor in model.state_dict().items():
        assert torch.equal(again.state_dict()[name], tensor), name
    assert again.cls.predictions.decoder.weight is again.bert.embeddings.word_embeddings.weight
    assert set(load_file(tmp_path / "model.safetensors")) == set(state)
    # sharing that no model declares is left for Accelerate to report
    shared = {"a": torch.ones(3)}
    shared["b"] = shared["a"]
    drop_tied_copies([torch.nn.Linear(1, 1)], [shared], str(tmp_path))
    assert set(shared) == {"a", "b"}


def test_convert_long_writes_a_longformer_card_with_the_base_model_its_source_declares(tiny_model, tmp_path):
    source = tmp_path / "source"
    shutil.copytree(tiny_model, source)
    _with_card(source, "bert-base-uncased")
    out = tmp_path / "long"
    script_main("04_distill.py")(["convert-long", "--model", str(source), "--out", str(out), "--max-length", "128",
                                  "--window", "16"])
    loaded = ModelCard.load(out / "README.md")
    assert loaded.data.to_dict() == {
        "base_model": "bert-base-uncased", "library_name": "sentence-transformers",
        "pipeline_tag": "feature-extraction",
        "tags": ["sentence-transformers", "feature-extraction", "docembed", "longformer", "long-documents"]}
    assert "| architecture | LongformerModel (longformer, 2 layers) |" in loaded.text
    assert f"`04_distill.py convert-long` from {escape(source.parent.name)}/source (`--max-length 128 --window " \
           "16`:" in loaded.text
    assert "@article{beltagy2020longformer," in loaded.text and "## Training" not in loaded.text


def test_base_model_is_a_hub_name_or_what_a_folders_card_declares(tiny_model, tmp_path):
    assert card.base_model("sentence-transformers/all-MiniLM-L6-v2") == "sentence-transformers/all-MiniLM-L6-v2"
    assert card.base_model("bert-base-uncased") == "bert-base-uncased"
    assert card.base_model(str(tiny_model)) is None  # a folder without a card
    assert card.base_model(str(_with_card(tmp_path, "TurkuNLP/bert-base-finnish-cased-v1"))) == \
        "TurkuNLP/bert-base-finnish-cased-v1"
    assert card.base_model(None) is None


@pytest.mark.parametrize("language,code", [("fi", "fi"), ("en", "en"), ("zh-classical", "zh"), ("simple", None),
                                           (None, None)])
def test_the_cards_language_is_the_iso_code_of_the_dumps_language(language, code):
    assert card.hub_language(language) == code


def test_the_cited_entries_are_sentence_transformers_own_where_it_cites_the_same_paper():
    losses = st_losses()
    assert card.CITATIONS["sbert"] == losses.SoftmaxLoss.citation.fget(None).strip()
    assert card.CITATIONS["hadsell"] == losses.ContrastiveLoss.citation.fget(None).strip()
    assert card.CITATIONS["gradcache"] == losses.CachedMultipleNegativesRankingLoss.citation.fget(None).strip()


def test_report_links_each_models_card_beside_its_row(tmp_path):
    from common.eval import report
    trained = tmp_path / "runs" / "a" / "model"
    trained.mkdir(parents=True)
    (trained / "README.md").write_text("---\nlibrary_name: sentence-transformers\n---\n")
    bare = tmp_path / "bare"
    bare.mkdir()
    models = {"trained": str(trained), "hub": "sentence-transformers/all-MiniLM-L6-v2", "bare": str(bare)}
    cards = report.cards(models, tmp_path / "eval")
    assert cards == {"trained": "[a/model](../runs/a/model/README.md)",
                     "hub": "[sentence-transformers/all-MiniLM-L6-v2]"
                            "(https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2)"}
    metrics = {"trained": {"crossref": {"map": 0.5}}, "hub": {"crossref": {"map": 0.25}},
               "bare": {"crossref": {"map": 0.125}}, "lexical": {"crossref": {"map": 0.1}}}
    assert report.markdown(metrics, cards=cards).splitlines() == [
        "| model | crossref map | card |", "|---|---:|---|",
        f"| trained | 50.00 | {cards['trained']} |", f"| hub | 25.00 | {cards['hub']} |", "| bare | 12.50 | – |",
        "| lexical | 10.00 | – |"]
    assert report.markdown(metrics).splitlines()[0] == "| model | crossref map |"
    assert str(tmp_path) not in report.markdown(metrics, cards=cards)  # read on other machines: no path of this one


def test_a_damaged_manifest_beside_the_corpus_leaves_the_card_without_it_and_the_model_saved(tiny_model, tiny_data,
                                                                                            tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "manifest.json").write_text("[1, 2")
    manifest = json.loads((data / "manifest.json").read_text())
    (data / "manifest.json").write_text(json.dumps({**manifest, "inputs": {str(corpus / "articles.jsonl"): "0" * 64}}))
    out = tmp_path / "run"
    _train("triplet", data, tiny_model, out, "--max-length", "32", "--batch-size", "16", "--max-steps", "1")
    text = ModelCard.load(out / "model" / "README.md").text
    assert f"| articles.jsonl | {'0' * 64} |" in text and "They come from" not in text


# -- a damaged card of the start model: a note, and a card for the new model ---------------------------------------

DAMAGED_CARDS = {
    "YAML that does not parse": b"---\nbase_model: [unclosed\n---\n# A model\n",
    "a list": b"---\n- bert-base-uncased\n---\n",
    "a key that is not a string": b"---\n? [a, b]\n: c\nbase_model: bert-base-uncased\n---\n",
    "a number as key": b"---\n1: a\nbase_model: bert-base-uncased\n---\n",
    "bytes that are not UTF-8": b"---\nbase_model: bert\xff\xfe\n---\n",
    "a base_model of 10 MB": b"---\nbase_model: " + b"a" * (10 << 20) + b"\n---\n",
    "a base_model that is no hub name": b"---\nbase_model: <img src=x onerror=alert(1)>\n---\n",
    "a base_model that is a mapping": b"---\nbase_model: {a: 1}\n---\n",
}


@pytest.mark.parametrize("name", list(DAMAGED_CARDS))
def test_a_damaged_card_of_the_start_model_gives_no_base_model_and_one_note(name, tmp_path):
    from common.models import card
    (tmp_path / "README.md").write_bytes(DAMAGED_CARDS[name])
    notes = []
    assert card.base_model(str(tmp_path), notes.append) is None
    assert len(notes) == 1 and notes[0].startswith(f"note: {tmp_path / 'README.md'}: ") and "\n" not in notes[0]
    assert len(notes[0]) < 300


def test_a_run_and_a_conversion_from_a_model_whose_card_is_damaged_save_their_model_with_a_card(tmp_path, tiny_data,
                                                                                              tiny_model, capsys):
    import shutil

    from huggingface_hub import ModelCard
    model = tmp_path / "start"
    shutil.copytree(tiny_model, model)
    (model / "README.md").write_bytes(DAMAGED_CARDS["a key that is not a string"] + b"\xff")
    script_main("03_train.py")(["--data", str(tiny_data), "--model", str(model), "--out", str(tmp_path / "run"),
                                *SHORT_TRAIN, "--max-steps", "1"])
    script_main("04_distill.py")(["convert-long", "--model", str(model), "--out", str(tmp_path / "long"),
                                  "--max-length", "64", "--window", "16"])
    printed = capsys.readouterr().out
    assert printed.count(f"note: {model / 'README.md'}: its model card cannot be read (UnicodeDecodeError") == 2
    for saved in (tmp_path / "run" / "model", tmp_path / "long"):
        loaded = ModelCard.load(saved / "README.md")
        assert loaded.data.base_model is None and escape(f"{tmp_path.name}/start") in loaded.text


def test_everything_the_final_save_quotes_is_read_before_the_first_step(tmp_path, tiny_data, tiny_model,
                                                                        monkeypatch):
    from common.train.objectives.base import Objective

    def unreadable(self):
        raise InputError("what the card quotes cannot be read")
    monkeypatch.setattr(Objective, "card_facts", unreadable)
    run = tmp_path / "run"
    assert script_error("03_train.py", "--data", tiny_data, "--model", tiny_model, "--out", run, *SHORT_TRAIN) == \
        "error: what the card quotes cannot be read"
    # no step, no checkpoint, log or model: only the run's mark and the documents mapped for the next run (RUN/cache)
    assert not run.exists() or not [p for p in run.iterdir() if p.name not in ("run.json", "cache")]


# -- text from outside in a card and a report: one escaping, one front-matter check --------------------------------

HOSTILE_TEXT = ["a | b", "`code` and ``more``", "two\nlines\r\n# a heading", "<img src=x onerror=alert(1)>",
                "**bold** _it_ [link](https://x) ![i](y) <https://z> &amp; \\ $x$ ~~s~~", "| --- |", "ok"]


CARD_FACTS = {"architecture": "BertModel", "model_type": "bert", "layers": 2, "dimensions": 8, "parameters": 100,
              "pooling": "mean", "normalize": False, "max_length": 32}


def _rendered(markdown):
    """CommonMark with GitHub's tables (markdown-it, the reference implementation's port): the tokens of the body
    after the front matter."""
    from markdown_it import MarkdownIt
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).parse(markdown.split("\n---\n", 1)[-1])


def _cells(tokens):
    """Each table row's cells, as the text a reader sees (the inline tokens' children joined)."""
    rows, row = [], None
    for t in tokens:
        if t.type == "tr_open":
            row = []
        elif t.type == "inline" and row is not None:
            row.append("".join(c.content if c.type != "softbreak" else "\n" for c in t.children))
        elif t.type == "tr_close":
            rows.append(row)
            row = None
    return rows


def test_text_from_outside_is_itself_in_every_part_of_a_card_and_breaks_nothing():
    from common.models import card
    settings = [(f"flag{i}", text) for i, text in enumerate(HOSTILE_TEXT)]
    huge = "x" * (10 << 20)
    data = {"path": HOSTILE_TEXT[3], "script": HOSTILE_TEXT[0], "command": HOSTILE_TEXT[2], "commit": huge,
            "inputs": {text: text for text in HOSTILE_TEXT}, "counts": {HOSTILE_TEXT[2]: 3},
            "source": {"script": HOSTILE_TEXT[1], "inputs": {huge: huge}, "language": HOSTILE_TEXT[4]}}
    made = str(card.model_card("triplet", HOSTILE_TEXT[3], dict(CARD_FACTS), settings=settings,
                               training={"script": "03_train.py", "steps": 1, "epoch": 1, "processes": 1,
                                         "precision": "no"}, data=data, base=huge, start=huge + "|",
                               language=HOSTILE_TEXT[2]))
    assert len(made) < 32 << 10
    tokens = _rendered(made)
    assert [t.tag for t in tokens if t.type == "heading_open"] == ["h1", "h2", "h2", "h3", "h2", "h2"]
    assert not any(t.type == "html_block" or any(c.type == "html_inline" for c in t.children or ()) for t in tokens)
    rows = _cells(tokens)
    shown = [text.replace("\r", "\\r").replace("\n", "\\n") for text in HOSTILE_TEXT]
    assert [r for r in rows if r[0].startswith("--flag")] == [[f"--flag{i}", s] for i, s in enumerate(shown)]
    files = [os.path.basename(s) for s in shown]  # an input by its file name
    assert [r for r in rows if r[0] in files] == [[f, s if len(s) <= 64 else s[:64] + "…"]
                                                  for f, s in zip(files, shown)]
    assert ["x" * 200 + "…", "x" * 64 + "…"] in rows  # a 10 MB input, cut
    from huggingface_hub import ModelCard
    assert ModelCard(made).data.to_dict().get("base_model") is None and "language" not in ModelCard(made).data.to_dict()
    assert escape("a\u2028b\x85") == "a\\\\u2028b\\\\x85"


@pytest.mark.parametrize("value, kept", [("sentence-transformers/all-MiniLM-L6-v2", True), ("bert-base-uncased", True),
                                         ("a" * 97, False), ("a b", False), ("../x", False), ("a/b/c", False),
                                         ("<img src=x>", False), (["a/b"], False), ({"a": 1}, False), (7, False)])
def test_a_base_model_enters_the_front_matter_only_as_a_hub_name(value, kept):
    from huggingface_hub import ModelCard

    from common.models import card
    made = card.model_card("triplet", "m", dict(CARD_FACTS), base=value)
    assert ModelCard(str(made)).data.base_model == (value if kept else None)


@pytest.mark.parametrize("name", ["a<b>", "c|d", "e]f", "g`h", "i j(k)", "l:m", "n%20o", "p#q"])
def test_a_report_links_the_card_of_a_model_at_any_path_and_keeps_its_table(name, tmp_path):
    import urllib.parse

    from common.eval import report
    model = tmp_path / "runs" / name / "model"
    model.mkdir(parents=True)
    (model / "README.md").write_text("---\nlibrary_name: sentence-transformers\n---\n")
    cards = report.cards({"trained": str(model)}, tmp_path / "eval")
    table = report.markdown({"trained": {"crossref": {"map": 0.5}}}, cards=cards)
    tokens = _rendered(table)
    assert _cells(tokens) == [["model", "crossref map", "card"], ["trained", "50.00", f"{name}/model"]]
    href, = [c.attrs["href"] for t in tokens for c in t.children or () if c.type == "link_open"]
    assert os.path.normpath(tmp_path / "eval" / urllib.parse.unquote(href)) == str(model / "README.md")


def test_the_query_of_a_key_sentence_model_enters_its_cards_note_as_itself():
    """--query of the key-sentence objectives enters its card's settings table and a note."""
    from types import SimpleNamespace

    from common.train.objectives.keysent import ContrastiveObjective
    objective = ContrastiveObjective(SimpleNamespace(query_token=None), None)
    objective.query = HOSTILE_TEXT[3] + HOSTILE_TEXT[0]
    note, = objective.card_details()["notes"]
    tokens = _rendered(note)
    assert not any(c.type == "html_inline" for t in tokens for c in t.children or ())
    assert "".join(c.content for t in tokens for c in t.children or ()) == (
        f"The query it was trained with: {objective.query}. An article's sentences are ranked by their cosine "
        "similarity to the query's embedding.")
