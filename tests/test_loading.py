"""Loading a model (common/models/loading.py): a model that cannot be found or loaded whole, damaged weights,
tokenizer and configuration files, weights stored as integers, missing or misshapen weights: one line naming the
file, in every loader; a half-precision checkpoint loaded as float32, a pre-training checkpoint's extras in silence;
the one default pooling and length where neither a flag nor the model gives them."""

import json
import shutil

import pytest
import torch

from common.io import InputError
from common.models.loading import load_encoder
from common.models.saving import save_model
from conftest import SHORT_TRAIN, script_error, short_teachers


@pytest.mark.parametrize("case", ["no-such-folder", "no-such-hub-name", "empty-folder", "no-tokenizer", "no-weights"])
def test_a_model_that_cannot_be_loaded_whole_is_one_line(tiny_model, tmp_path, case):
    import shutil
    from common.io import InputError
    if case == "no-such-folder":
        path = str(tmp_path / "none")
        expected = f"{path}: no such model folder, nor a model of that name in the local Hugging Face cache"
    elif case == "no-such-hub-name":
        path = "nobody/no-model"
        expected = f"{path}: no such model folder, nor a model of that name in the local Hugging Face cache"
    elif case == "empty-folder":
        path = str(tmp_path)
        expected = f"{path}: no model there (no config.json)"
    else:
        path = str(tmp_path / "model")
        shutil.copytree(tiny_model, path)
        if case == "no-tokenizer":  # transformers would build a 5-token tokenizer: every text all [UNK]
            for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
                (tmp_path / "model" / name).unlink()
            expected = f"{path}: has no tokenizer files (any of tokenizer.json, vocab.txt): save the tokenizer with " \
                       "the model"
        else:
            (tmp_path / "model" / "model.safetensors").unlink()
            expected = f"{path}: cannot be loaded: "
    with pytest.raises(InputError) as e:
        load_encoder(path)
    assert str(e.value).startswith(expected) and "\n" not in str(e.value)


def test_a_model_without_a_sentence_transformers_config_takes_the_one_default_length_and_says_so(tiny_model, tmp_path):
    """Every caller gets DEFAULT_MAX_LENGTH (128) and [CLS] where nothing else is given, with a note; a flag or the
    model's sentence-transformers config wins silently."""
    from conftest import build_tiny_model
    from common.models.loading import DEFAULT_MAX_LENGTH
    wide = build_tiny_model(tmp_path / "wide", max_position=512)
    notes = []
    _, _, settings = load_encoder(str(wide), say=notes.append)
    assert (DEFAULT_MAX_LENGTH, settings["pooling"], settings["max_length"]) == (128, "cls", 128)
    assert notes == [f"note: {wide}: no flag and no sentence-transformers config gives its pooling or max_length; "
                     "using pooling cls, max_length 128"]
    notes.clear()
    _, _, settings = load_encoder(str(wide), pooling="mean", max_length=200, say=notes.append)
    assert (settings["pooling"], settings["max_length"], notes) == ("mean", 200, [])
    saved = tmp_path / "saved"
    encoder, _, _ = load_encoder(str(wide), pooling="mean", max_length=300, say=notes.append)
    save_model(encoder, load_encoder(str(wide), say=lambda _: None)[1], str(saved), max_length=300)
    notes.clear()
    _, _, settings = load_encoder(str(saved), say=notes.append)
    assert (settings["pooling"], settings["max_length"], notes) == ("mean", 300, [])


# -- damaged files: one line naming the file -----------------------------------------------------------------------

def _damaged(tmp_path, tiny_model, damage):
    import shutil
    folder = tmp_path / "model"
    shutil.copytree(tiny_model, folder)
    damage(folder)
    return folder


def _int8(folder):
    from safetensors.torch import load_file, save_file
    import torch
    weights = load_file(folder / "model.safetensors")
    save_file({k: (v * 100).to(torch.int8) for k, v in weights.items()}, folder / "model.safetensors",
              metadata={"format": "pt"})


def _sentence_transformers(folder):
    """The modules.json a sentence-transformers model has, so that its other files are read."""
    (folder / "modules.json").write_text(json.dumps(
        [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]))


def _without(key):
    def damage(folder):
        tokenizer = json.loads((folder / "tokenizer.json").read_text())
        (folder / "tokenizer.json").write_text(json.dumps({k: v for k, v in tokenizer.items() if k != key}))
    return damage


LOADING = {
    "an empty model.safetensors": (lambda f: (f / "model.safetensors").write_bytes(b""), "model.safetensors",
                                   "not a complete safetensors file (Error while deserializing header: header too "
                                   "small); save the model again"),
    "a truncated model.safetensors": (lambda f: (f / "model.safetensors").write_bytes(
        (f / "model.safetensors").read_bytes()[:-100]), "model.safetensors",
        "not a complete safetensors file (Error while deserializing header: incomplete metadata, file not fully "
        "covered); save the model again"),
    "a header that is not JSON": (lambda f: (f / "model.safetensors").write_bytes(b"\x04" + b"\0" * 7 + b"{{{{"),
                                  "model.safetensors", "not a complete safetensors file (Error while deserializing "
                                  "header: invalid JSON in header: key must be a string at line 1 column 2); save "
                                  "the model again"),
    "weights stored as int8": (_int8, "model.safetensors",
                               "weight embeddings.LayerNorm.bias is stored as I8, not as floats (a quantised "
                               "checkpoint this project does not load); give the model's float weights"),
    "a tokenizer.json of {}": (lambda f: (f / "tokenizer.json").write_text("{}"), "tokenizer.json",
                               "not a complete tokenizer (no \"added_tokens\" list); save the tokenizer again"),
    "a tokenizer.json without added_tokens": (_without("added_tokens"), "tokenizer.json",
                                              "not a complete tokenizer (no \"added_tokens\" list); save the "
                                              "tokenizer again"),
    "a tokenizer.json without its model": (_without("model"), "tokenizer.json",
                                           "not a complete tokenizer (Model missing. at line 1 column"),
    "a tokenizer.json that is a list": (lambda f: (f / "tokenizer.json").write_text("[]"), "tokenizer.json",
                                        "not a JSON object"),
    "a modules.json of numbers": (lambda f: (f / "modules.json").write_text("[1, 2]"), "modules.json",
                                  "a module without a \"type\" or \"path\" string; save the model again"),
    "a config.json that is a list": (lambda f: (f / "config.json").write_text("[]"), "config.json",
                                     "not a JSON object"),
    "a tokenizer_config.json that is a list": (lambda f: (f / "tokenizer_config.json").write_text("[]"),
                                               "tokenizer_config.json", "not a JSON object"),
    "a model_max_length of text": (lambda f: (f / "tokenizer_config.json").write_text(json.dumps(
        {**json.loads((f / "tokenizer_config.json").read_text()), "model_max_length": "long"})),
        "tokenizer_config.json", "model_max_length 'long' is not a number; save the tokenizer again"),
    "a sentence_bert_config.json of text": (lambda f: (_sentence_transformers(f), (f / "sentence_bert_config.json")
                                                        .write_text('{"max_seq_length": "long"}')),
                                            "sentence_bert_config.json",
        "max_seq_length 'long' is not a positive whole number; save the model again"),
}


def test_a_configuration_value_of_the_wrong_type_is_one_line(tmp_path, tiny_model):
    from common.models.loading import load_encoder
    folder = _damaged(tmp_path, tiny_model, lambda f: (f / "config.json").write_text(json.dumps(
        {**json.loads((f / "config.json").read_text()), "hidden_size": "wide"})))
    with pytest.raises(InputError) as e:
        load_encoder(str(folder), say=lambda text: None)
    assert str(e.value).startswith(f"{folder}: cannot be loaded: Validation error for field 'hidden_size'")


@pytest.mark.parametrize("name", list(LOADING))
def test_a_damaged_model_is_one_line_naming_its_file(name, tmp_path, tiny_model):
    from common.models.loading import load_encoder
    damage, file, message = LOADING[name]
    folder = _damaged(tmp_path, tiny_model, damage)
    with pytest.raises(InputError) as e:
        load_encoder(str(folder), say=lambda text: None)
    assert str(e.value).startswith(f"{folder / file}: {message}"), str(e.value)


@pytest.mark.parametrize("script", ["03 --model", "04 convert-long --model", "04 teachers --teacher",
                                    "05 --model", "03 mlm --model"])
def test_every_loader_refuses_truncated_weights_and_an_incomplete_tokenizer_in_one_line(script, tmp_path, tiny_data,
                                                                                       tiny_model):
    for damage, file in ((LOADING["a truncated model.safetensors"][0], "model.safetensors"),
                         (_without("added_tokens"), "tokenizer.json")):
        shutil.rmtree(tmp_path / "model", ignore_errors=True)
        folder = _damaged(tmp_path, tiny_model, damage)
        command = {"03 --model": ("03_train.py", ["--data", tiny_data, "--model", folder, *SHORT_TRAIN]),
                   "03 mlm --model": ("03_train.py", ["--objective", "mlm", "--data", tiny_data, "--model", folder,
                                                      "--max-steps", "1", "--cache-dir", tmp_path / "cache"]),
                   "04 convert-long --model": ("04_distill.py", ["convert-long", "--model", folder]),
                   "04 teachers --teacher": ("04_distill.py", short_teachers(tiny_data, folder)),
                   "05 --model": ("05_evaluate.py", ["--data", tiny_data, "--model", f"m={folder}"])}[script]
        error = script_error(command[0], *command[1], "--out", tmp_path / f"out-{file}")
        assert error.startswith(f"error: {folder / file}: not a complete "), error


# -- weights checked key by key ------------------------------------------------------------------------------------

def test_integer_buffers_load_and_integer_weights_are_refused(tmp_path, tiny_model):
    """BERT's position_ids are integers in the model too (older checkpoints store them): they pass; a weight the
    model computes with as a float, stored as an integer, does not."""
    import torch
    from safetensors.torch import load_file, save_file

    from common.models.loading import load_encoder
    folder = _damaged(tmp_path, tiny_model, lambda f: None)
    weights = load_file(folder / "model.safetensors")
    save_file({**weights, "embeddings.position_ids": torch.arange(64)[None]}, folder / "model.safetensors",
              metadata={"format": "pt"})
    encoder, _, _ = load_encoder(str(folder), say=lambda text: None)
    assert torch.equal(encoder.transformer.embeddings.word_embeddings.weight,
                       weights["embeddings.word_embeddings.weight"])
    save_file({**weights, "pooler.dense.weight": weights["pooler.dense.weight"].to(torch.int32)},
              folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(InputError, match=r"weight pooler\.dense\.weight is stored as I32, not as floats"):
        load_encoder(str(folder), say=lambda text: None)


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
