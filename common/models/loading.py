"""Loading a model: an ``Encoder`` with its pooling and length (``load_encoder``; the model's sentence-transformers
settings: ``st_config``), any transformers class's weights checked key by key (``load_weights``), a tokenizer or
configuration (``load_pretrained``), and the checks of a model's files that come first (its JSON files,
``tokenizer.json``, the safetensors headers), each of whose failures is one line naming the file. A model is a
folder or a hub name read from the local Hugging Face cache (``model_file``).
"""

import contextlib
import os
import re

import torch

from common.io import InputError, read_json
from common.models.encoder import POOLINGS, Encoder


def model_file(name_or_path, filename):
    """A file of a model folder, or of a hub model as ``SentenceTransformer(name)`` resolves it (through the local
    Hugging Face cache; offline, from the cache alone). None where the model has no such file."""
    if os.path.isdir(name_or_path):
        path = os.path.join(name_or_path, filename)
        return path if os.path.isfile(path) else None
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, HFValidationError, LocalEntryNotFoundError
    try:
        return hf_hub_download(name_or_path, filename)
    except (EntryNotFoundError, LocalEntryNotFoundError, HFValidationError):
        return None


# sentence-transformers' similarity functions (``SimilarityFunction``), as a model's config names them
SIMILARITIES = ("cosine", "dot", "euclidean", "manhattan")
# the modules of a sentence-transformers model that this project's Encoder computes (Transformer, Pooling, Normalize)
ENCODER_MODULES = ("Transformer", "Pooling", "Normalize")


def st_config(name_or_path):
    """What a sentence-transformers model (folder or hub name) says about pooling, normalisation and length, how its
    vectors are compared (``similarity``: ``config_sentence_transformers.json``'s ``similarity_fn_name``, where it
    names one), its ``prompts`` and ``default_prompt_name``, and the modules after its pooling that the project's
    ``Encoder`` does not compute (``left_out``: a Dense layer, by their folders); empty if it is not one. A file of
    its configuration that is damaged is one line naming it."""
    name_or_path = str(name_or_path)
    modules_path = model_file(name_or_path, "modules.json")
    if modules_path is None:
        return {}
    modules = read_json(modules_path, list)
    if not all(isinstance(m, dict) and isinstance(m.get("type"), str) and isinstance(m.get("path", ""), str)
               for m in modules):
        raise InputError(f"{modules_path}: a module without a \"type\" or \"path\" string; save the model again")
    kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
    found = {"normalize": "Normalize" in kinds}
    left_out = [f"{kind} ({m.get('path') or m.get('name', '')})" for kind, m in zip(kinds, modules)
                if kind not in ENCODER_MODULES]
    if left_out:
        found["left_out"] = left_out
    for module in modules:
        if module["type"].rsplit(".", 1)[-1] != "Pooling":
            continue
        config_path = model_file(name_or_path, f"{module.get('path', '')}/config.json")
        cfg = read_json(config_path) if config_path else {}
        mode = cfg.get("pooling_mode")
        if mode is None:  # the older key layout
            mode = "cls" if cfg.get("pooling_mode_cls_token") else "mean" if cfg.get(
                "pooling_mode_mean_tokens") else None
        if mode in POOLINGS:
            found["pooling"] = mode
        elif mode is not None:
            print(f"note: {name_or_path} pools by {mode!r}, which is not one of {POOLINGS}; give --pooling")
    sbert = model_file(name_or_path, "sentence_bert_config.json")
    length = read_json(sbert).get("max_seq_length") if sbert else None
    if length is not None and (not isinstance(length, int) or isinstance(length, bool) or length < 1):
        raise InputError(f"{sbert}: max_seq_length {length!r} is not a positive whole number; save the model again")
    if length is None and sbert and "Transformer" in kinds:
        length = _tokenizer_length(name_or_path)
    if length:
        found["max_length"] = length
    return {**found, **_compared(model_file(name_or_path, "config_sentence_transformers.json"))}


def _tokenizer_length(name_or_path):
    """The length sentence-transformers 6 reads a model at when its ``sentence_bert_config.json`` names none (the
    form it saves in): the tokenizer's ``model_max_length``, where that is a limit (a whole number below 100,000;
    tokenizers without one say 10^30); None otherwise."""
    path = model_file(name_or_path, "tokenizer_config.json")
    length = read_json(path).get("model_max_length") if path else None
    return length if type(length) is int and 0 < length < 100_000 else None


def _compared(path):
    """A ``config_sentence_transformers.json``'s similarity, prompts and default prompt name, those it states ({}
    without the file: a model saved before sentence-transformers 3, or before this project wrote one)."""
    if path is None:
        return {}
    config = read_json(path)
    similarity, prompts = config.get("similarity_fn_name"), config.get("prompts") or {}
    default = config.get("default_prompt_name")
    if similarity is not None and similarity not in SIMILARITIES:
        raise InputError(f"{path}: similarity_fn_name {similarity!r} is not one of {', '.join(SIMILARITIES)}")
    if not isinstance(prompts, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in prompts.items()):
        raise InputError(f"{path}: prompts is not an object of prompt names to strings")
    if default is not None and default not in prompts:
        raise InputError(f"{path}: default_prompt_name {default!r} is not one of its prompts")
    found = {"similarity": similarity, "prompts": prompts, "default_prompt_name": default}
    return {key: value for key, value in found.items() if value}


def left_out(st):
    """What embedding with the project's ``Encoder`` leaves out of a sentence-transformers model whose ``st_config``
    is ``st``: the modules after its pooling other than Normalize, and its non-empty prompts (a text is embedded as
    it is); [] where nothing is."""
    prompts = [f"prompt {name!r}" for name, text in sorted((st.get("prompts") or {}).items()) if text]
    return [*st.get("left_out", []), *prompts]


def load_errors():
    """What ``from_pretrained`` raises for files it cannot use: a missing or unreadable file (OSError), a value it
    refuses (ValueError), a configuration value of the wrong type (huggingface_hub's strict dataclasses)."""
    from huggingface_hub.errors import StrictDataclassError
    return OSError, ValueError, StrictDataclassError


# the JSON files transformers reads from a model folder as objects (``tokenizer.json``: ``check_tokenizer_file``)
MODEL_JSON = ("config.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")


def check_model_json(name_or_path):
    """Each of a model's ``MODEL_JSON`` files that it has is a JSON object, or one line naming it (transformers would
    stop on a TypeError or an AttributeError)."""
    for name in MODEL_JSON:
        path = model_file(name_or_path, name)
        if path is not None:
            read_json(path)


def load_pretrained(auto_class, name_or_path):
    """``auto_class.from_pretrained`` (a tokenizer, a configuration), its failures one line (transformers chains
    several tracebacks); the model's JSON files, and a tokenizer's ``tokenizer.json``, are checked first
    (``check_model_json``, ``check_tokenizer_file``)."""
    from transformers import AutoTokenizer
    check_model_json(name_or_path)
    if auto_class is AutoTokenizer:
        check_tokenizer_file(name_or_path)
    try:
        loaded = auto_class.from_pretrained(name_or_path)
    except load_errors() as e:
        raise InputError(f"{name_or_path}: cannot be loaded: {_first_line(e)}") from None
    limit = getattr(loaded, "model_max_length", 0)  # a tokenizer's: every length is compared with it
    if not isinstance(limit, (int, float)) or isinstance(limit, bool):
        raise InputError(f"{model_file(name_or_path, 'tokenizer_config.json') or name_or_path}: model_max_length "
                         f"{limit!r} is not a number; save the tokenizer again")
    return loaded


def check_tokenizer_file(name_or_path):
    """A model's ``tokenizer.json``, where it has one, read by the ``tokenizers`` library as transformers reads it,
    with the fields transformers takes from it beside: a file that is not JSON, or JSON that does not make a
    tokenizer, is one line naming it (transformers would stop on a KeyError or an untyped error)."""
    path = model_file(name_or_path, "tokenizer.json")
    if path is None:
        return
    from tokenizers import Tokenizer
    value = read_json(path)
    if not isinstance(value.get("added_tokens"), list):
        raise InputError(f"{path}: not a complete tokenizer (no \"added_tokens\" list); save the tokenizer again")
    try:
        Tokenizer.from_file(path)
    except Exception as e:  # noqa: BLE001 (tokenizers raises a bare Exception for any file it cannot read)
        raise InputError(f"{path}: not a complete tokenizer ({_first_line(e)}); save the tokenizer again") from None


# safetensors' dtypes that hold floating-point numbers (the rest: integers, booleans)
FLOAT_DTYPES = re.compile(r"B?F\d.*")


def stored_weights(name_or_path):
    """{tensor name: (safetensors dtype, file)} of a model's safetensors weights (``model.safetensors``, or the
    shards its index names), every file's header read by safetensors' own parser, which checks that the file holds
    every byte the header promises: a file that is empty, truncated or not safetensors is one line naming it. A
    model with no safetensors weights gives {} (transformers reads what it has)."""
    from safetensors import SafetensorError, safe_open
    files = []
    single = model_file(name_or_path, "model.safetensors")
    if single is not None:
        files = [single]
    else:
        index = model_file(name_or_path, "model.safetensors.index.json")
        if index is not None:
            shards = read_json(index).get("weight_map")
            if not isinstance(shards, dict) or not all(isinstance(v, str) for v in shards.values()):
                raise InputError(f"{index}: no \"weight_map\" of tensor names to files; save the model again")
            for shard in sorted(set(shards.values())):
                path = model_file(name_or_path, shard)
                if path is None:
                    raise InputError(f"{index}: names {shard}, which the model does not have")
                files.append(path)
    found = {}
    for path in files:
        try:
            with safe_open(path, "pt") as f:
                found.update((key, (f.get_slice(key).get_dtype(), path)) for key in f.keys())
        except (SafetensorError, OSError) as e:
            raise InputError(f"{path}: not a complete safetensors file ({_first_line(e)}); save the model "
                             "again") from None
    return found


def _check_float_weights(model, stored):
    """Refuse a checkpoint that stores, as integers, weights the model computes with as floats (a quantised
    checkpoint): transformers would cast them to float32 without a word, and the model would compute with the
    integers. Integer buffers (BERT's ``position_ids``) are integers in the model too and pass."""
    state, prefix = model.state_dict(), model.base_model_prefix
    for key, (dtype, path) in stored.items():
        if FLOAT_DTYPES.fullmatch(dtype):
            continue
        for name in (key, key.removeprefix(prefix + "."), f"{prefix}.{key}"):
            if name in state and state[name].is_floating_point():
                raise InputError(f"{path}: weight {key} is stored as {dtype}, not as floats (a quantised checkpoint "
                                 "this project does not load); give the model's float weights")


def _first_line(error):
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


@contextlib.contextmanager
def quiet_transformers(warnings=False):
    """transformers' progress bars off inside the block, and with ``warnings=False`` its warnings too (errors still
    show): its load report lists every key a checkpoint holds or lacks, expected or not, in a dozen lines per model;
    ``load_weights`` reports what matters in one line of its own."""
    from transformers.utils import logging
    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    if not warnings:
        logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


def _names(keys, most=6):
    keys = sorted(keys)
    return ", ".join(keys[:most]) + (f" and {len(keys) - most} more" if len(keys) > most else "")


def load_weights(auto_class, name_or_path, say=print):
    """``auto_class.from_pretrained(name_or_path)`` checked key by key, without transformers' load report; returns
    (model, the weights the checkpoint lacked that were newly initialised: a task head's, and BERT's pooler's).

    A checkpoint may hold weights the model has no place for, and lack weights it never uses; both are expected and
    pass silently: a task head (a masked-LM head when an encoder is wanted, BERT's next-sentence head when a masked
    LM is) is left out, and BERT's pooler (dense + tanh over [CLS], which ``Encoder`` does not pool with) may be
    missing, or left out where the model has none (a masked LM). A missing weight of the base model, or one of
    another shape than its config says, is an InputError naming the keys: the model would compute with random
    weights. A weight inside the base model's own modules that it has no place for (a layer more than its config
    says) is one note through ``say``.

    The weights are float32 whatever dtype the checkpoint was saved in: transformers 5 would otherwise load a
    half-precision checkpoint as it is, and training would then run without float32 master weights (mixed
    precision casts per operation under autocast; it never keeps the weights themselves in half precision). The
    weight files are checked first (``stored_weights``), and weights stored as integers where the model has floats
    are refused (``_check_float_weights``)."""
    check_model_json(name_or_path)
    stored = stored_weights(name_or_path)
    try:
        with quiet_transformers():
            model, info = auto_class.from_pretrained(name_or_path, output_loading_info=True,
                                                     ignore_mismatched_sizes=True, dtype=torch.float32)
    except load_errors() as e:
        raise InputError(f"{name_or_path}: cannot be loaded: {_first_line(e)}") from None
    _check_float_weights(model, stored)
    prefix = "" if model.base_model is model else model.base_model_prefix + "."
    base = [k for k in info["missing_keys"] if k.startswith(prefix)]
    lacking = [k for k in base if not k[len(prefix):].startswith("pooler.")]
    if lacking:
        raise InputError(f"{name_or_path}: lacks weights the {type(model).__name__} needs ({_names(lacking)}): not a "
                         "complete checkpoint of this architecture")
    if info["mismatched_keys"]:
        shapes = [f"{key} {list(saved)} where the config needs {list(wanted)}"
                  for key, saved, wanted in sorted(info["mismatched_keys"])]
        raise InputError(f"{name_or_path}: weights of another shape than its config.json says: {_names(shapes, 3)}")
    # named as in the checkpoint: under the base model's prefix where it holds a head too, else without it
    own = {name for name, _ in model.base_model.named_children()}
    stray = [k for k in info["unexpected_keys"] if k.removeprefix(model.base_model_prefix + ".").split(".")[0] in own]
    if stray:
        say(f"note: {name_or_path}: {len(stray)} weights that {type(model).__name__} has no place for are left out "
            f"({_names(stray, 3)})")
    return model, sorted(set(info["missing_keys"]) - set(lacking))


def _tokenizer_files(name_or_path, tokenizer):
    """The tokenizer's own files in the model's place; without them transformers builds a tokenizer with a few
    special tokens only, and every text becomes [UNK]."""
    names = {"tokenizer.json", *tokenizer.vocab_files_names.values()}
    found = [n for n in sorted(names) if model_file(name_or_path, n)]
    if not found:
        raise InputError(f"{name_or_path}: has no tokenizer files (any of {', '.join(sorted(names))}): save the "
                         "tokenizer with the model")
    return found


# The length a model is read at when neither a flag nor its sentence-transformers config gives one, wherever a
# model is loaded: SPECTER's and the WikiSpecter thesis's 128 tokens.
DEFAULT_MAX_LENGTH = 128


def require_model(name_or_path):
    """Refuse, in one line, a folder that holds no model (no config.json), or a name that is neither a folder nor a
    model in the local Hugging Face cache."""
    if model_file(name_or_path, "config.json") is None:
        raise InputError(f"{name_or_path}: no model there (no config.json)" if os.path.isdir(name_or_path) else
                         f"{name_or_path}: no such model folder, nor a model of that name in the local Hugging Face "
                         "cache")


def check_model_files(name_or_path):
    """A model's files checked before a library loads them, each failure one line naming the file (``load_encoder``
    checks them as it loads): the model is there, its JSON files, ``tokenizer.json`` and safetensors headers."""
    require_model(name_or_path)
    check_model_json(name_or_path)
    check_tokenizer_file(name_or_path)
    stored_weights(name_or_path)


def load_encoder(name_or_path, pooling=None, normalize=None, max_length=None, default_pooling="cls", say=print):
    """Model, tokenizer and the settings used: explicit arguments win, then the model's sentence-transformers
    config, then ``default_pooling`` and ``DEFAULT_MAX_LENGTH`` (said through ``say``: a run's main process prints).
    A model that cannot be found, or whose tokenizer is not saved beside it, is an InputError."""
    from transformers import AutoModel, AutoTokenizer
    name_or_path = str(name_or_path)
    require_model(name_or_path)
    st = st_config(name_or_path)
    settings = {
        "pooling": pooling or st.get("pooling") or default_pooling,
        "normalize": st.get("normalize", False) if normalize is None else normalize,
        "max_length": max_length or st.get("max_length") or DEFAULT_MAX_LENGTH,
        "similarity": st.get("similarity"),
        "st_config": st,
    }
    missed = left_out(st)
    if missed:
        say(f"note: {name_or_path}: embedded without its {', '.join(missed)}: the project's encoder is the "
            "transformer, its pooling and normalisation; `05_evaluate.py mteb` embeds it as sentence-transformers "
            "loads it, whole")
    fallen = [key for key, given in (("pooling", pooling), ("max_length", max_length)) if not given and not st.get(key)]
    if fallen:
        say(f"note: {name_or_path}: no flag and no sentence-transformers config gives its {' or '.join(fallen)}; "
            f"using {', '.join(f'{key} {settings[key]}' for key in fallen)}")
    tokenizer = load_pretrained(AutoTokenizer, name_or_path)
    _tokenizer_files(name_or_path, tokenizer)
    # transformers loads PyTorch's fused scaled-dot-product attention by default where the architecture has it
    transformer, _ = load_weights(AutoModel, name_or_path, say)
    limit = tokenizer.model_max_length if tokenizer.model_max_length < 100_000 else getattr(
        transformer.config, "max_position_embeddings", settings["max_length"])
    if settings["max_length"] > limit:
        say(f"note: {name_or_path} takes at most {limit} tokens; using {limit} instead of {settings['max_length']}")
        settings["max_length"] = limit
    check_room(name_or_path, tokenizer, settings["max_length"])
    return Encoder(transformer, settings["pooling"], settings["normalize"]), tokenizer, settings


def check_room(name_or_path, tokenizer, max_length):
    """Refuse a length that holds only the special tokens the tokenizer adds to a text (BERT's [CLS] and [SEP]):
    the text itself would be cut away, and a model whose position table is that short (a Longformer converted to
    it) cannot even read them."""
    special = tokenizer.num_special_tokens_to_add(pair=False)
    if max_length <= special:
        raise InputError(f"{name_or_path}: a length of {max_length} token{'s' * (max_length != 1)} leaves no room "
                         f"for text beside its tokenizer's {special} special tokens; give --max-length "
                         f"{special + 1} or more")
