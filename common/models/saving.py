"""Saving a trained encoder in Hugging Face + sentence-transformers form, and reading what a run recorded."""

import json
import os
import shutil

from common.io import InputError
from common.outdir.folders import create, private_dir, put_written
from common.outdir.written import entries

INFO = "docembed.json"
ST_CONFIG = "config_sentence_transformers.json"  # how sentence-transformers compares the vectors, with its prompts
CARD = "README.md"  # the model card, as the hub and sentence-transformers name it


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


def save_model(encoder, tokenizer, path, max_length, info=None, extra=None, card=None, similarity=None,
               prompts=None):
    """Hugging Face ``save_pretrained`` + tokenizer + sentence-transformers files, so that both
    ``AutoModel.from_pretrained(path)`` and ``SentenceTransformer(path)`` load it with the pooling, normalisation
    and length it was trained with, and compare its vectors by ``similarity`` (``config_sentence_transformers.json``'s
    ``similarity_fn_name``, as its objective declares it; None: sentence-transformers' default, cosine), with the
    start model's ``prompts`` (``st_config``'s ``prompts`` and ``default_prompt_name``) kept. ``extra(folder)``
    may add files (an objective's heads); ``card``, a ``huggingface_hub.ModelCard`` (``common/models/card.py``), is
    written as ``README.md``. Written to a private folder beside it (``folders.private_dir``: in the run folder, for
    RUN/model and RUN/epoch_K) and moved into place: whole where the folder held only the files this save writes,
    else file by file, so that a file it does not write (a user's notes) stays (``folders.put_written``); a folder
    that is not a model saved here is never replaced. A model folder that is a command's whole ``--out`` is saved
    with ``save_model_files`` instead."""
    check_replaceable(path)
    parent, name = os.path.split(os.path.abspath(path))
    private = private_dir(parent)
    try:
        staged = os.path.join(private, name)
        _save(encoder, tokenizer, staged, max_length, info, extra, card, similarity, prompts)
        written = entries(staged)
        put_written(staged, path, written, written)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def save_model_files(outputs, encoder, tokenizer, max_length, info=None, extra=None, card=None, similarity=None,
                     prompts=None):
    """``save_model``'s files as the files of ``outputs`` (a ``folders.Outputs`` whose folder is the model folder):
    made in its private folder, inside the model folder, and committed with its manifest."""
    staged = outputs.scratch("model")
    _save(encoder, tokenizer, staged, max_length, info, extra, card, similarity, prompts)
    for name in sorted(os.listdir(staged)):
        os.replace(os.path.join(staged, name), outputs.tmp_path(name))


def _save_tokenizer(tokenizer, folder):
    """``tokenizer.save_pretrained(folder)`` without the truncation and padding its last call left in a fast
    tokenizer's backend (tokenizer.json records them), so that a folder does not depend on what was tokenised last:
    a run resumed on cached token ids saves the tokenizer.json of one that tokenised. transformers and
    sentence-transformers set both on every call."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        tokenizer.save_pretrained(folder)
        return
    truncation, padding = backend.truncation, backend.padding
    backend.no_truncation()
    backend.no_padding()
    try:
        tokenizer.save_pretrained(folder)
    finally:
        if truncation is not None:
            backend.enable_truncation(**truncation)
        if padding is not None:
            backend.enable_padding(**padding)


def _save(encoder, tokenizer, tmp, max_length, info, extra, card, similarity, prompts):
    from common.models.loading import quiet_transformers
    with quiet_transformers(warnings=True):  # no progress bar for each file written
        encoder.transformer.save_pretrained(tmp)
        _save_tokenizer(tokenizer, tmp)
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
    _dump(os.path.join(tmp, ST_CONFIG), st_model_config(similarity, prompts))
    _dump(os.path.join(tmp, INFO), {"pooling": encoder.pooling, "normalize": encoder.normalize,
                                               "max_length": int(max_length), **(info or {})})
    if extra is not None:
        with quiet_transformers(warnings=True):
            extra(tmp)
    if card is not None:
        with create(os.path.join(tmp, CARD)) as f:
            f.write(str(card))


def st_model_config(similarity, prompts=None):
    """``config_sentence_transformers.json`` as sentence-transformers writes it: the versions that saved the model,
    the prompts (``{"prompts": {...}, "default_prompt_name": ...}``, a start model's, else none), and the
    similarity its vectors are compared by (None: sentence-transformers' default, cosine)."""
    import sentence_transformers
    import torch
    import transformers
    prompts = prompts or {}
    return {"__version__": {"sentence_transformers": sentence_transformers.__version__,
                            "transformers": transformers.__version__, "pytorch": torch.__version__},
            "model_type": "SentenceTransformer", "prompts": dict(prompts.get("prompts") or {}),
            "default_prompt_name": prompts.get("default_prompt_name"), "similarity_fn_name": similarity}


def _dump(path, obj):
    with create(path) as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def drop_tied_copies(models, weights, output_dir):
    """An ``Accelerator.register_save_state_pre_hook``: from each checkpoint's state dict, the names under which a
    transformers model declares a weight tied to another (``all_tied_weights_keys``: a masked-LM decoder and its bias
    are the word embeddings and the head's bias), where they are indeed the same tensor. safetensors stores a tensor
    once, so Accelerate would drop them itself, with a warning on every save that such sharing may be a mistake;
    ``safetensors.torch.load_model``, which ``load_state`` uses, ties them again on loading. Sharing that no model
    declares is left for Accelerate to warn about."""
    for model, state in zip(models, weights):
        for prefix, module in model.named_modules():
            for target, source in (getattr(module, "all_tied_weights_keys", None) or {}).items():
                name, origin = (f"{prefix}.{target}", f"{prefix}.{source}") if prefix else (target, source)
                if name in state and origin in state and state[name].shape == state[origin].shape \
                        and state[name].data_ptr() == state[origin].data_ptr():
                    del state[name]
