"""Encoders: loading (with a sentence-transformers config where a model has one), pooling, document input,
tokenising once, embedding, and saving in Hugging Face + sentence-transformers form.
"""

import contextlib
import os
import re

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from common.io import InputError, read_json
from common.models.batching import length_batches, token_budget
from common.models.attention import ATTENTION
from common.models import packing, sliding_window
from common.models.threads import Threads

POOLINGS = ("cls", "mean")


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


def st_config(name_or_path):
    """What a sentence-transformers model (folder or hub name) says about pooling, normalisation and length (empty
    if it is not one); a file of its configuration that is damaged is one line naming it."""
    name_or_path = str(name_or_path)
    modules_path = model_file(name_or_path, "modules.json")
    if modules_path is None:
        return {}
    modules = read_json(modules_path, list)
    if not all(isinstance(m, dict) and isinstance(m.get("type"), str) and isinstance(m.get("path", ""), str)
               for m in modules):
        raise InputError(f"{modules_path}: a module without a \"type\" or \"path\" string; save the model again")
    found = {"normalize": any(m["type"].rsplit(".", 1)[-1] == "Normalize" for m in modules)}
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
    if length:
        found["max_length"] = length
    return found


class Encoder(nn.Module):
    """A transformer with pooling (and optional L2 normalisation) on top: token ids → one vector per text.

    ``forward`` takes one or several padded groups of sequences (length-sorted sub-batches pad less) and returns
    their embeddings concatenated, in one call, so that a DDP wrapper sees a single forward per step.
    """

    bf16 = False  # embed under bfloat16 autocast on a CPU (precision.encoder_for's bf16 view sets it)

    def __init__(self, transformer, pooling="cls", normalize=False):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}")
        self.transformer = transformer
        self.pooling = pooling
        self.normalize = normalize
        # A model's own pooler (BERT's dense + tanh over [CLS]) is not our pooling: it gets no gradient, which
        # DDP would reject, so it is frozen and saved as it was loaded.
        for name, param in transformer.named_parameters():
            if name.startswith("pooler."):
                param.requires_grad_(False)

    def pool(self, hidden, attention_mask):
        """float32 vectors whatever the states' dtype (a half-precision model, or an autocast region that leaves
        them in half): the mean's sum, the norm and every loss after it then keep float32's resolution."""
        if self.pooling == "cls":
            out = hidden[:, 0].float()
        else:
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            out = (hidden * mask).sum(dim=1, dtype=torch.float32) / torch.clamp(
                mask.sum(dim=1, dtype=torch.float32), min=1e-9)
        return F.normalize(out, p=2, dim=1) if self.normalize else out

    def embed(self, input_ids, attention_mask):
        if sliding_window.is_longformer(self.transformer):  # at the batch's own length, not a multiple of the window
            hidden = sliding_window.hidden_states(self.transformer, input_ids, attention_mask)
        else:
            hidden = self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.pool(hidden, attention_mask)

    def embed_packed(self, input_ids, lengths):
        """Embeddings of texts laid end to end in one row, without padding: ``input_ids`` ``[T]``, ``lengths``
        ``[n]`` summing to T. Needs an attention that reads variable-length sequences from their cumulative
        lengths (flash attention on a GPU)."""
        cu, positions = packing.offsets(lengths)
        flash_cu, longest = cu.to(torch.int32), int(lengths.max())
        hidden = self.transformer(input_ids=input_ids[None], position_ids=positions[None], cu_seq_lens_q=flash_cu,
                                  cu_seq_lens_k=flash_cu, max_length_q=longest,
                                  max_length_k=longest).last_hidden_state[0]
        out = packing.pool(hidden, lengths, cu, self.pooling)
        return F.normalize(out, p=2, dim=1) if self.normalize else out

    @property
    def dimension(self):
        return self.transformer.config.hidden_size

    def forward(self, groups):
        words = self.transformer.get_input_embeddings()
        known = self.transformer.config.model_type in WORD_LOOKUP_TYPES and type(words) is nn.Embedding
        # Training: the word vectors of every group are looked up at once, so that their gradient is one
        # [vocabulary, d] tensor a step, not one a group (_WordLookup)
        lookup = (known and torch.is_grad_enabled() and words.weight.requires_grad and words.max_norm is None
                  and not words.scale_grad_by_freq and not words.sparse)
        if (known and self.transformer.config._attn_implementation == ATTENTION and words.weight.device.type == "cpu"
                and not getattr(self.transformer.config, "is_decoder", False)):
            # a model prepared for CPU training (attention.fast_dropout): every group's texts in one packed row
            # (packing.py), with or without gradient and in evaluation too, so that a forward replayed under the
            # same random state (GradCache) draws the same dropout masks
            lengths = torch.cat([mask.sum(1) for _, mask in groups])
            ids = torch.cat([ids[mask.bool()] for ids, mask in groups])
            plan = packing.Packing(lengths.numpy())
            vectors = _WordLookup.apply(ids, words.weight, words, self) if lookup else words(ids)
            hidden = self.transformer(inputs_embeds=vectors[None], position_ids=plan.positions[None],
                                      packing=plan).last_hidden_state[0]
            out = packing.pool(hidden, plan.lengths, plan.cu, self.pooling)
            return F.normalize(out, p=2, dim=1) if self.normalize else out
        if not lookup:
            return torch.cat([self.embed(ids, mask) for ids, mask in groups])
        vectors = _WordLookup.apply(torch.cat([ids.reshape(-1) for ids, _ in groups]), words.weight, words, self)
        out, start = [], 0
        for ids, mask in groups:
            embeds = vectors[start:start + ids.numel()].view(*ids.shape, -1)
            start += ids.numel()
            hidden = self.transformer(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
            out.append(self.pool(hidden, mask))
        return torch.cat(out)


# Architectures whose positions count from the first token whatever the token ids, so that ``inputs_embeds`` gives
# what ``input_ids`` gives (tests/test_dropout.py). RoBERTa-style models number positions by skipping padding ids,
# which a text can hold, and keep the ordinary path.
WORD_LOOKUP_TYPES = ("bert", "distilbert", "electra")


class _WordLookup(torch.autograd.Function):
    """``F.embedding`` whose weight gradient, on a CPU, is summed into a ``[vocabulary, d]`` buffer the encoder keeps
    between steps. PyTorch's own backward allocates and zeroes a new tensor of that size each time (47 MB for a
    BERT vocabulary at d = 384); in the profile of a triplet step on two cores that zeroing took 57–70 ms a lookup,
    where zeroing the kept buffer and summing into it take under 3 ms. Autograd takes the returned tensor as the
    parameter's ``.grad`` where there is none yet; where there is one (gradient accumulation), the ordinary
    backward runs, so that the buffer is never written while it is a live gradient."""

    @staticmethod
    def forward(ctx, ids, weight, embedding, owner):
        ctx.save_for_backward(ids)
        ctx.embedding, ctx.owner = embedding, owner
        return nn.functional.embedding(ids, weight, embedding.padding_idx)

    @staticmethod
    def backward(ctx, grad):
        ids, = ctx.saved_tensors
        weight, padding = ctx.embedding.weight, ctx.embedding.padding_idx
        if grad.device.type != "cpu" or weight.grad is not None:
            return None, torch.ops.aten.embedding_backward(grad, ids, weight.shape[0], -1 if padding is None
                                                           else padding, False, False), None, None
        buffer = getattr(ctx.owner, "_word_grad", None)
        if buffer is None or buffer.shape != weight.shape or buffer.dtype != grad.dtype:
            buffer = ctx.owner._word_grad = torch.empty(weight.shape, dtype=grad.dtype)
        rows, grad = ids.reshape(-1), grad.reshape(-1, grad.shape[-1])
        if padding is not None:
            grad = grad.masked_fill((rows == padding)[:, None], 0)
        buffer.zero_().index_add_(0, rows, grad)
        return None, buffer.view_as(buffer), None, None


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


def load_encoder(name_or_path, pooling=None, normalize=None, max_length=None, default_pooling="cls", say=print):
    """Model, tokenizer and the settings used: explicit arguments win, then the model's sentence-transformers
    config, then ``default_pooling`` and ``DEFAULT_MAX_LENGTH`` (said through ``say``: ``accelerator.print`` prints
    once). A model that cannot be found, or whose tokenizer is not saved beside it, is an InputError."""
    from transformers import AutoModel, AutoTokenizer
    name_or_path = str(name_or_path)
    if model_file(name_or_path, "config.json") is None:
        raise InputError(f"{name_or_path}: no model there (no config.json)" if os.path.isdir(name_or_path) else
                         f"{name_or_path}: no such model folder, nor a model of that name in the local Hugging Face "
                         "cache")
    st = st_config(name_or_path)
    settings = {
        "pooling": pooling or st.get("pooling") or default_pooling,
        "normalize": st.get("normalize", False) if normalize is None else normalize,
        "max_length": max_length or st.get("max_length") or DEFAULT_MAX_LENGTH,
        "st_config": st,
    }
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
    return Encoder(transformer, settings["pooling"], settings["normalize"]), tokenizer, settings


def document_text(title, text, sep_token):
    """SPECTER's input: ``title + sep_token + text`` (for BERT: ``[CLS] title [SEP] text [SEP]``)."""
    return f"{title}{sep_token}{text}"


def default_device():
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _packed_attention(transformer):
    """Whether this model can read unpadded (variable-length) batches here: flash attention on a GPU, for an
    architecture transformers offers it for."""
    from transformers.utils import is_flash_attn_2_available
    return (transformer.device.type == "cuda" and getattr(transformer, "_supports_flash_attn", False)
            and is_flash_attn_2_available())


@contextlib.contextmanager
def _attention(transformer, implementation):
    before = transformer.config._attn_implementation
    if implementation == before:
        yield
        return
    transformer.set_attn_implementation(implementation)
    try:
        yield
    finally:
        transformer.set_attn_implementation(before)


@torch.inference_mode()
def embed(encoder, store, batch_size=64, batch_tokens=None, progress=None, rows=None, out=None):
    """Embeddings of every text in ``store`` (or of positions ``rows``), float32 ``[N, d]``, in the store's order.

    The texts are sorted by token length once and cut by ``length_batches`` (``batch_tokens`` None: the device's
    default budget, ``batching.BATCH_TOKENS``; 0: ``batch_size`` alone). Each batch's rows are written into
    ``out`` as soon as they are computed, so ``out`` may be a memory-mapped NPY (``vectors.open_npy``) and the vectors
    are never held whole in memory; without it a new array is returned. On a GPU the encoder runs in bfloat16 and,
    where flash attention is installed, on unpadded batches. On a CPU it runs in bfloat16 autocast where the encoder
    is ``precision.encoder_for``'s bf16 view (``encoder.bf16``), each batch with every thread torch has unless
    ``threads.Threads`` sees the cores shared and finds fewer faster."""
    device = next(encoder.parameters()).device
    encoder.eval()
    rows = np.arange(len(store)) if rows is None else np.asarray(rows)
    if out is None:
        out = np.zeros((len(rows), encoder.dimension), dtype=np.float32)
    packed = _packed_attention(encoder.transformer)
    with _attention(encoder.transformer, "flash_attention_2" if packed else
                    encoder.transformer.config._attn_implementation), \
            torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda" or encoder.bf16), \
            Threads(active=device.type == "cpu") as threads:
        for idx in length_batches(store.lengths()[rows], batch_size, token_budget(batch_tokens, device.type)):
            if packed:
                ids, lengths = store.packed(rows[idx])
                vectors = encoder.embed_packed(ids.to(device), lengths.to(device))
            else:
                ids, mask = store.pad(rows[idx])
                with threads.batch(ids.numel()):
                    vectors = encoder.embed(ids.to(device), mask.to(device))
            out[idx] = vectors.float().cpu().numpy()
            if progress is not None:
                progress.update(len(idx))
    return out


def embed_sharded(encoder, store, batch_size=64, batch_tokens=None, progress=None, out=None, block=4096,
                  collect=True):
    """``embed`` with the texts cut into one contiguous shard per process (under ``accelerate launch`` or any
    initialised process group) and the shards gathered in order, ``block`` rows of each at a time, into ``out`` (or
    a new array) on every process; with ``collect=False`` this process takes part in the gathering but keeps
    nothing and returns None (a process that only helps need not hold every vector). Each text is embedded exactly
    as one process would embed it (same tokens, no gradient); only the length-sorted batch it shares padding with
    differs, which the attention mask makes irrelevant."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return embed(encoder, store, batch_size, batch_tokens, progress, out=out)
    world, rank = dist.get_world_size(), dist.get_rank()
    bounds = np.linspace(0, len(store), world + 1).astype(np.int64)
    sizes = np.diff(bounds)
    mine = embed(encoder, store, batch_size, batch_tokens, progress, np.arange(bounds[rank], bounds[rank + 1]))
    if out is None and collect:
        out = np.zeros((len(store), mine.shape[1]), dtype=np.float32)
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    for start in range(0, int(sizes.max()), block):
        padded = torch.zeros(min(block, int(sizes.max()) - start), mine.shape[1], device=device)
        part = torch.from_numpy(mine[start:start + len(padded)])
        padded[:len(part)] = part.to(device)
        parts = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(parts, padded)
        if not collect:
            continue
        for r, p in enumerate(parts):
            n = int(np.clip(sizes[r] - start, 0, len(padded)))
            out[bounds[r] + start:bounds[r] + start + n] = p[:n].cpu().numpy()
    return out if collect else None
