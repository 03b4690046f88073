"""The masked-LM model that ``--objective mlm`` trains (``MaskedLM``: a transformers masked-LM or pre-training model
with the encoder inside it that the project pools and saves), and what it predicts (``Predictions``).
"""

from typing import NamedTuple, Optional

import torch
from torch import nn

from common.io import InputError
from common.models.cpu_masked_lm import last_layer_at
from common.models.encoder import Encoder, model_mask

IGNORE = -100  # the label of a position not to be predicted (transformers' convention, as masking.py writes it)


class Predictions(NamedTuple):
    """What a ``MaskedLM`` predicts for a batch: ``logits`` ``[N, vocabulary]`` at N positions, the ``labels``
    ``[N]`` there (``IGNORE`` where nothing is to be predicted), the batch row of each position ``[N]``, and with
    next-sentence prediction its logits ``relationship`` ``[B, 2]``. The model's own forward predicts every
    position; at ``masked_positions`` (the CPU's) only the masked ones."""
    logits: torch.Tensor
    labels: torch.Tensor
    rows: torch.Tensor
    relationship: Optional[torch.Tensor] = None


class MaskedLM(nn.Module):
    """A masked-LM model; ``encoder`` is the same transformer with pooling (not a registered sub-module: its
    parameters are the model's own, optimised and saved once).

    With ``nsp`` (``mlm`` a ``BertForPreTraining``: ``cls.predictions`` and ``cls.seq_relationship``) the model also
    predicts the next sentence from BERT's pooler over ``[CLS]``, and the pooler, which ``Encoder`` freezes for
    pooling of its own, is trained.

    ``masked_positions`` (set where the model is built for a CPU: ``cpu.install``, for a BERT whose last layer
    ``cpu_masked_lm.last_layer_at`` computes) predicts only what its loss reads: every layer but the last through
    the model's own forward, then the last layer at the masked positions (and ``[CLS]`` with next-sentence
    prediction) and the vocabulary projection there alone: on 8 blocks of 256 tokens of all-MiniLM-L6-v2 about a
    tenth of a step's arithmetic is left out (docs/benchmarks.md, "Masked-LM training")."""

    def __init__(self, mlm, pooling, normalize, nsp=False):
        super().__init__()
        self.mlm = mlm
        self.nsp = nsp
        self.masked_positions = False
        self.__dict__["encoder"] = Encoder(mlm.base_model, pooling, normalize)
        heads = getattr(mlm, "cls", getattr(mlm, "lm_head", None))
        self.__dict__["head"] = heads.predictions if nsp else heads
        if nsp:
            mlm.base_model.pooler.requires_grad_(True)

    def forward(self, input_ids, attention_mask, labels, token_type_ids=None):
        """The model's ``Predictions`` for the batch (``labels`` ``[B, L]``, ``IGNORE`` where nothing is masked): at
        every position, transformers' forward as ``run_mlm_no_trainer.py`` runs it, or at the masked positions
        alone (``masked_positions``), in the order of ``masked.nonzero()``."""
        if self.masked_positions:
            return self._at_masked_positions(input_ids, attention_mask, labels, token_type_ids)
        mask = model_mask(self.mlm.base_model, attention_mask)
        if self.nsp:
            out = self.mlm(input_ids=input_ids, attention_mask=mask, token_type_ids=token_type_ids)
            logits, relationship = out.prediction_logits, out.seq_relationship_logits
        else:
            logits, relationship = self.mlm(input_ids=input_ids, attention_mask=mask).logits, None
        rows = torch.arange(len(labels), device=labels.device).repeat_interleave(labels.shape[1])
        return Predictions(logits.flatten(0, 1), labels.flatten(), rows, relationship)

    def _at_masked_positions(self, input_ids, attention_mask, labels, token_type_ids):
        base = self.mlm.base_model
        layers, pooler = base.encoder.layer, getattr(base, "pooler", None)
        masked = labels != IGNORE
        base.encoder.layer = layers[:-1]  # every layer but the last, through the model's own forward
        if self.nsp:
            base.pooler = None  # the pooler reads the last layer's [CLS], not this
        try:
            hidden = base(input_ids=input_ids, attention_mask=attention_mask,
                          **({"token_type_ids": token_type_ids} if self.nsp else {})).last_hidden_state
        finally:
            base.encoder.layer, base.pooler = layers, pooler
        at = masked
        if self.nsp:
            at = masked.clone()
            at[:, 0] = True
        states = last_layer_at(layers[-1], hidden, attention_mask, at)
        rows = at.nonzero(as_tuple=True)[0]
        relationship = None
        if self.nsp:
            first = at.nonzero(as_tuple=True)[1] == 0  # each row's [CLS], first of its row's positions
            relationship = self.mlm.cls.seq_relationship(pooler(states[first][:, None]))
            states, rows = states[masked[at]], rows[masked[at]]
        return Predictions(self.head(states), labels[masked], rows, relationship)


def check_nsp(model, nsp, what):
    """``--nsp`` needs a pre-training model with BERT's pooler and next-sentence head (a one-line error else)."""
    heads = getattr(model, "cls", None)
    if nsp and not (hasattr(heads, "predictions") and hasattr(heads, "seq_relationship")
                    and getattr(model.base_model, "pooler", None) is not None):
        raise InputError(f"--nsp: {what} has no next-sentence-prediction head in transformers "
                         f"({model.config.model_type}'s pre-training model is {type(model).__name__}); BERT's is "
                         "BertForPreTraining")
