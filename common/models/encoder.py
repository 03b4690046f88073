"""Encoders: loading (with a sentence-transformers config where a model has one), pooling, document input,
tokenising once, embedding, and saving in Hugging Face + sentence-transformers form.
"""

import json
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from common.io import InputError

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


def _read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def st_config(name_or_path):
    """What a sentence-transformers model (folder or hub name) says about pooling, normalisation and length (empty
    if it is not one)."""
    name_or_path = str(name_or_path)
    modules_path = model_file(name_or_path, "modules.json")
    if modules_path is None:
        return {}
    modules = _read_json(modules_path)
    found = {"normalize": any(m["type"].rsplit(".", 1)[-1] == "Normalize" for m in modules)}
    for module in modules:
        if module["type"].rsplit(".", 1)[-1] != "Pooling":
            continue
        config_path = model_file(name_or_path, f"{module['path']}/config.json")
        cfg = _read_json(config_path) if config_path else {}
        mode = cfg.get("pooling_mode")
        if mode is None:  # the older key layout
            mode = "cls" if cfg.get("pooling_mode_cls_token") else "mean" if cfg.get(
                "pooling_mode_mean_tokens") else None
        if mode in POOLINGS:
            found["pooling"] = mode
        elif mode is not None:
            print(f"note: {name_or_path} pools by {mode!r}, which is not one of {POOLINGS}; give --pooling")
    sbert = model_file(name_or_path, "sentence_bert_config.json")
    length = _read_json(sbert).get("max_seq_length") if sbert else None
    if length:
        found["max_length"] = int(length)
    return found


class Encoder(nn.Module):
    """A transformer with pooling (and optional L2 normalisation) on top: token ids → one vector per text.

    ``forward`` takes one or several padded groups of sequences (length-sorted sub-batches pad less) and returns
    their embeddings concatenated, in one call, so that a DDP wrapper sees a single forward per step.
    """

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

    def embed(self, input_ids, attention_mask):
        hidden = self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if self.pooling == "cls":
            out = hidden[:, 0]
        else:
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            out = (hidden * mask).sum(dim=1, dtype=torch.float32) / torch.clamp(
                mask.sum(dim=1, dtype=torch.float32), min=1e-9)
            out = out.to(hidden.dtype)
        return F.normalize(out, p=2, dim=1) if self.normalize else out

    def forward(self, groups):
        return torch.cat([self.embed(ids, mask) for ids, mask in groups])


def _load_pretrained(auto_class, name_or_path):
    """``auto_class.from_pretrained``, its failures one line (transformers chains several tracebacks)."""
    try:
        return auto_class.from_pretrained(name_or_path)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"{name_or_path}: cannot be loaded: {first}") from None


def _tokenizer_files(name_or_path, tokenizer):
    """The tokenizer's own files in the model's place; without them transformers builds a tokenizer with a few
    special tokens only, and every text becomes [UNK]."""
    names = {"tokenizer.json", *tokenizer.vocab_files_names.values()}
    found = [n for n in sorted(names) if model_file(name_or_path, n)]
    if not found:
        raise InputError(f"{name_or_path}: has no tokenizer files (any of {', '.join(sorted(names))}): save the "
                         "tokenizer with the model")
    return found


def load_encoder(name_or_path, pooling=None, normalize=None, max_length=None, default_pooling="cls",
                 default_max_length=512, say=print):
    """Model, tokenizer and the settings used: explicit arguments win, then the model's sentence-transformers
    config, then the defaults given. ``say`` prints notes (``accelerator.print`` prints them once). A model that
    cannot be found, or whose tokenizer is not saved beside it, is an InputError."""
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
        "max_length": max_length or st.get("max_length") or default_max_length,
        "st_config": st,
    }
    tokenizer = _load_pretrained(AutoTokenizer, name_or_path)
    _tokenizer_files(name_or_path, tokenizer)
    transformer = _load_pretrained(AutoModel, name_or_path)
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


@torch.no_grad()
def embed(encoder, store, batch_size=64, progress=None, rows=None):
    """Embeddings of every text in ``store`` (or of positions ``rows``), float32 ``[N, d]``, on the encoder's
    device (in bfloat16 autocast on a GPU); batches sorted by length."""
    device = next(encoder.parameters()).device
    encoder.eval()
    rows = np.arange(len(store)) if rows is None else np.asarray(rows)
    order = np.argsort(-store.lengths()[rows], kind="stable")
    out = np.zeros((len(rows), encoder.transformer.config.hidden_size), dtype=np.float32)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        ids, mask = store.pad(rows[idx])
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            out[idx] = encoder.embed(ids.to(device), mask.to(device)).float().cpu().numpy()
        if progress is not None:
            progress.update(len(idx))
    return out


def embed_sharded(encoder, store, batch_size=64, progress=None):
    """``embed`` with the texts cut into one contiguous shard per process (under ``accelerate launch`` or any
    initialised process group) and the shards gathered in order: every process returns all ``[N, d]`` vectors.
    Each text is embedded exactly as one process would embed it (same tokens, no gradient); only the length-sorted
    batch it shares padding with differs, which the attention mask makes irrelevant."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return embed(encoder, store, batch_size, progress)
    world, rank = dist.get_world_size(), dist.get_rank()
    bounds = np.linspace(0, len(store), world + 1).astype(np.int64)
    mine = torch.from_numpy(embed(encoder, store, batch_size, progress, np.arange(bounds[rank], bounds[rank + 1])))
    width = int(np.diff(bounds).max())
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    padded = torch.zeros(width, mine.shape[1], device=device)
    padded[:len(mine)] = mine.to(device)
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return torch.cat([p[:bounds[r + 1] - bounds[r]] for r, p in enumerate(parts)]).cpu().numpy()


