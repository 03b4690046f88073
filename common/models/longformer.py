"""A short encoder (BERT or RoBERTa) turned into a Longformer by the Longformer paper's recipe (Beltagy et al.
2020): the learned position embeddings copied over and over up to the new length (§5), sliding-window attention of
the given width in every layer, and the global-attention projections initialised as copies of the local ones (§3.1).

Longformer numbers positions from ``pad_token_id + 1`` (RoBERTa's convention); a BERT numbers them from 0, so the
tiling starts at that offset and token k still reads the position row it was trained with. On inputs no longer
than half the window every token sees every other, so the converted model computes what the original does.
"""

import os

import torch

from common.io import InputError

# what the recipe maps: BERT-style embeddings and self-attention (query, key, value) in every layer
CONVERTIBLE = ("bert", "roberta", "xlm-roberta", "camembert")


def check_convertible(source):
    """Refuse, from its config alone, a model that is missing or whose architecture the recipe cannot map."""
    from transformers import AutoConfig
    from common.models.loading import check_model_json, load_errors
    if os.path.isdir(source):
        check_model_json(source)
    try:
        config = AutoConfig.from_pretrained(source)
    except load_errors():
        where = "no such model folder" if not os.path.isdir(source) else "not a Hugging Face model folder"
        raise InputError(f"{source}: {where} (nor a model in the local Hugging Face cache)") from None
    if config.model_type not in CONVERTIBLE:
        raise InputError(f"{source}: a {config.model_type} model; convert-long converts {', '.join(CONVERTIBLE)}")


def check_length(source, max_length):
    """Refuse, before anything is converted, a ``max_length`` that holds no text beside the special tokens the
    source's tokenizer adds (``loading.check_room``): the Longformer's position table is made that long."""
    from transformers import AutoTokenizer
    from common.models.loading import check_room, load_pretrained
    check_room(source, load_pretrained(AutoTokenizer, source), max_length)


def convert_to_longformer(source, max_length=4096, window=512):
    """(LongformerModel, tokenizer) built from the model folder or hub name ``source``."""
    from transformers import AutoModel, AutoTokenizer, LongformerConfig, LongformerModel
    from common.models.loading import load_pretrained, load_weights
    tokenizer = load_pretrained(AutoTokenizer, source)
    short, _ = load_weights(AutoModel, source)
    cfg = short.config
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else 0
    # RoBERTa-style models already start at pad + 1; their usable rows are the ones after it
    start = pad + 1 if cfg.model_type in ("roberta", "xlm-roberta", "camembert", "longformer") else 0
    old = short.embeddings.position_embeddings.weight.detach()
    usable = old[start:]
    config = LongformerConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads, intermediate_size=cfg.intermediate_size,
        hidden_act=cfg.hidden_act, hidden_dropout_prob=cfg.hidden_dropout_prob,
        attention_probs_dropout_prob=cfg.attention_probs_dropout_prob, layer_norm_eps=cfg.layer_norm_eps,
        initializer_range=cfg.initializer_range, type_vocab_size=max(2, cfg.type_vocab_size),
        pad_token_id=pad, bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id,
        max_position_embeddings=max_length + pad + 1, attention_window=[window] * cfg.num_hidden_layers)
    long = LongformerModel(config)
    state = {k: v for k, v in short.state_dict().items() if not k.endswith("position_ids")}
    positions = torch.empty(config.max_position_embeddings, cfg.hidden_size)
    positions[:pad + 1] = old[:pad + 1] if start else old[0]
    rows = config.max_position_embeddings - (pad + 1)
    positions[pad + 1:] = usable.repeat(-(-rows // len(usable)), 1)[:rows]
    state["embeddings.position_embeddings.weight"] = positions
    token_types = long.embeddings.token_type_embeddings.weight.detach().clone()
    source_types = state["embeddings.token_type_embeddings.weight"]
    token_types[:len(source_types)] = source_types
    state["embeddings.token_type_embeddings.weight"] = token_types
    for layer in range(cfg.num_hidden_layers):
        prefix = f"encoder.layer.{layer}.attention.self."
        for part in ("query", "key", "value"):
            for kind in ("weight", "bias"):
                state[f"{prefix}{part}_global.{kind}"] = state[f"{prefix}{part}.{kind}"].clone()
    missing, unexpected = long.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing or unexpected:
        raise ValueError(f"{source}: weights that do not map onto a Longformer: missing {missing}, "
                         f"unexpected {unexpected}")
    tokenizer.model_max_length = max_length
    return long, tokenizer
