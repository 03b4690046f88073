"""Model cards (README.md) in every saved model folder, quiet and honest loading, and report.md's links to the
cards."""

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
from conftest import corpus_text, read_jsonl, script_main, st_losses, train_in_process


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


def test_a_folder_missing_an_encoder_weight_is_one_line_naming_it(tiny_model, tmp_path):
    from safetensors.torch import load_file, save_file
    folder = tmp_path / "model"
    shutil.copytree(tiny_model, folder)
    weights = load_file(folder / "model.safetensors")
    del weights["encoder.layer.1.output.dense.weight"]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(InputError) as e:
        load_encoder(str(folder))
    assert str(e.value) == (f"{folder}: lacks weights the BertModel needs (encoder.layer.1.output.dense.weight): "
                            "not a complete checkpoint of this architecture")


def test_a_weight_of_another_shape_than_the_config_says_is_one_line_naming_it(tiny_model, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "intermediate_size": 48}))
    with pytest.raises(InputError) as e:
        load_encoder(str(folder))
    assert str(e.value).startswith(f"{folder}: weights of another shape than its config.json says: "
                                   "encoder.layer.0.intermediate.dense.bias [64] where the config needs [48]")
    assert "\n" not in str(e.value)


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


def test_a_half_precision_checkpoint_loads_as_float32_with_the_same_values(tiny_model, tmp_path):
    from transformers import AutoModel
    folder = tmp_path / "fp16"
    shutil.copytree(tiny_model, folder)
    half = AutoModel.from_pretrained(str(tiny_model)).to(torch.float16)
    half.save_pretrained(str(folder))
    encoder, _, _ = load_encoder(str(folder))
    weights = dict(encoder.transformer.named_parameters())
    assert {p.dtype for p in weights.values()} == {torch.float32}
    for name, p in half.named_parameters():
        assert torch.equal(weights[name], p.float()), name


def test_bert_pretraining_extras_pass_silently_and_a_layer_more_than_the_config_is_one_note(tmp_path):
    """A hub BERT checkpoint (BertForPreTraining: pooler and next-sentence head beside the encoder and masked-LM
    head) starts an encoder and a masked LM without a word; a layer its config does not have is named."""
    from transformers import AutoModel, AutoModelForMaskedLM, BertConfig, BertForPreTraining
    from common.models.loading import load_weights
    folder = tmp_path / "bert"
    torch.manual_seed(0)
    BertForPreTraining(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=32)).save_pretrained(folder)
    notes = []
    for auto_class in (AutoModel, AutoModelForMaskedLM):
        load_weights(auto_class, str(folder), notes.append)
    assert notes == []
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    for auto_class in (AutoModel, AutoModelForMaskedLM):
        load_weights(auto_class, str(folder), notes.append)
    layer = "bert.encoder.layer.1.attention.output"
    assert notes == [f"note: {folder}: 16 weights that {name} has no place for are left out ({layer}.LayerNorm.bias, "
                     f"{layer}.LayerNorm.weight, {layer}.dense.bias and 13 more)"
                     for name in ("BertModel", "BertForMaskedLM")]
