"""Saving a trained encoder in Hugging Face + sentence-transformers form, and reading what a run recorded."""

import json
import os
import shutil

from common.io import InputError, create, private_dir

INFO = "docembed.json"


def check_replaceable(path):
    """Refuse a model folder that exists, is not empty and was not saved here (no docembed.json): saving replaces
    the whole folder, and a user's folder must never be what it replaces."""
    if os.path.lexists(path) and not os.path.isdir(path):
        raise InputError(f"{path}: exists and is not a folder")
    if os.path.isdir(path) and os.listdir(path) and not os.path.isfile(os.path.join(path, INFO)):
        raise InputError(f"{path}: not empty and not a model saved by this project (no {INFO}); give a new or "
                         "empty folder")


def read_run_info(path):
    """What this project recorded about a trained model (``docembed.json``), or {} for other models."""
    from common.io import read_json_or_empty
    return read_json_or_empty(os.path.join(path, INFO))


def save_model(encoder, tokenizer, path, max_length, info=None, extra=None):
    """Hugging Face ``save_pretrained`` + tokenizer + sentence-transformers files, so that both
    ``AutoModel.from_pretrained(path)`` and ``SentenceTransformer(path)`` load it with the pooling, normalisation
    and length it was trained with. ``extra(folder)`` may add files (an objective's heads). Written to
    a private folder beside it (``io.private_dir``) and moved into place; a folder that is not a model saved here is
    never replaced."""
    check_replaceable(path)
    parent, name = os.path.split(os.path.abspath(path))
    private = private_dir(parent)
    try:
        _save(encoder, tokenizer, os.path.join(private, name), max_length, info, extra)
        if os.path.lexists(path):
            os.replace(path, os.path.join(private, name + ".old"))  # a link is moved as a link, never followed
        os.replace(os.path.join(private, name), path)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _save(encoder, tokenizer, tmp, max_length, info, extra):
    encoder.transformer.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if encoder.normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
        os.makedirs(os.path.join(tmp, "2_Normalize"), exist_ok=True)
    _dump(os.path.join(tmp, "modules.json"), modules)
    os.makedirs(os.path.join(tmp, "1_Pooling"), exist_ok=True)
    _dump(os.path.join(tmp, "1_Pooling", "config.json"), {
        "word_embedding_dimension": encoder.transformer.config.hidden_size,
        "pooling_mode_cls_token": encoder.pooling == "cls",
        "pooling_mode_mean_tokens": encoder.pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False})
    _dump(os.path.join(tmp, "sentence_bert_config.json"), {"max_seq_length": int(max_length), "do_lower_case": False})
    _dump(os.path.join(tmp, INFO), {"pooling": encoder.pooling, "normalize": encoder.normalize,
                                               "max_length": int(max_length), **(info or {})})
    if extra is not None:
        extra(tmp)


def _dump(path, obj):
    with create(path) as f:
        json.dump(obj, f, indent=2)
        f.write("\n")

