"""A new masked-LM model to pretrain, as ``run_mlm_no_trainer.py`` builds one from scratch: the configuration of
``--config-name`` (a model or folder whose configuration is copied, not its weights) or transformers' default for
``--model-type``, changed by ``--config-overrides`` (``run_mlm.py``'s ``"n_layer=4,hidden_size=256"`` form), with
randomly initialised weights (seeded by the caller), and a tokenizer: ``--tokenizer-name``'s, or a WordPiece
vocabulary learnt from the training texts (``common/models/vocabulary.py``).
"""

import os
import re

import torch

from common import cli
from common.io import InputError, read_json
from common.models.loading import check_model_json, load_errors, load_pretrained
from common.models.masked_lm import check_nsp


def configuration(model_type, config_name, config_overrides):
    """The new model's transformers configuration (a one-line error for one that cannot be loaded or changed)."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    if config_name:
        if os.path.isdir(config_name):
            check_model_json(config_name)
        elif os.path.isfile(config_name):  # a config.json of its own
            read_json(config_name)
        try:
            config = AutoConfig.from_pretrained(config_name)
        except load_errors() as e:
            raise InputError(f"--config-name {config_name}: cannot be loaded: "
                             f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") from None
    elif model_type in CONFIG_MAPPING:
        config = CONFIG_MAPPING[model_type]()
    else:
        raise InputError(f"--model-type {model_type}: not an architecture transformers knows (e.g. bert, "
                         "roberta, electra)")
    if config_overrides:
        if not re.fullmatch(r"\w+=[^,=]+(?:,\w+=[^,=]+)*", config_overrides):
            raise InputError(f"--config-overrides {config_overrides!r}: expected KEY=VALUE,... (e.g. "
                             "num_hidden_layers=4,hidden_size=256)")
        try:
            config.update_from_string(config_overrides)
        except ValueError as e:
            raise InputError(f"--config-overrides {config_overrides!r}: {e}") from None
    return config


def new_model(auto_class, config, tokenizer_name, learn_vocabulary, nsp, say=print):
    """``(model, tokenizer)``: a randomly initialised ``auto_class`` model (a masked LM, or with ``nsp`` a
    pre-training model with a next-sentence head) of ``config``, its vocabulary sized to the tokenizer:
    ``tokenizer_name``'s, else ``learn_vocabulary(length)`` (a tokenizer learnt for texts of at most ``length``
    tokens). A model too large for this machine is refused before it is allocated."""
    from transformers import AutoTokenizer
    if nsp:  # refused before a vocabulary is learnt for it
        with torch.device("meta"):
            check_nsp(auto_class.from_config(config), True, f"a new {config.model_type} model")
    if tokenizer_name:
        tokenizer = load_pretrained(AutoTokenizer, tokenizer_name)
    else:
        tokenizer = learn_vocabulary(getattr(config, "max_position_embeddings", 512))
    if tokenizer.mask_token_id is None:
        raise InputError(f"{tokenizer_name}: its tokenizer has no mask token")
    config.vocab_size = len(tokenizer)
    config.pad_token_id = tokenizer.pad_token_id
    with torch.device("meta"):  # sizes only: a configuration too large for the machine is refused unallocated
        planned = sum(p.numel() for p in auto_class.from_config(config).parameters())
    cli.check_memory(planned * 4 * 4, f"a new {config.model_type} model of {planned:,} parameters")
    model = auto_class.from_config(config)
    sizes = sum(p.numel() for p in model.parameters())
    say(f"new {config.model_type} model ({sizes / 1e6:.1f}M parameters, randomly initialised): "
        f"{getattr(config, 'num_hidden_layers', '?')} layers, hidden size {getattr(config, 'hidden_size', '?')}")
    return model, tokenizer
