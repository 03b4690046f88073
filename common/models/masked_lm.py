"""The masked-LM model that ``--objective mlm`` trains (``MaskedLM``: a transformers masked-LM or pre-training model
with the encoder inside it that the project pools and saves), and what it predicts (``Predictions``).
"""

from typing import NamedTuple, Optional

import torch
from torch import nn

from common.io import InputError
from common.models.encoder import Encoder, model_mask

IGNORE = -100  # the label of a position not to be predicted (transformers' convention, as masking.py writes it)


class Predictions(NamedTuple):
    """What a ``MaskedLM`` predicts for a batch: ``logits`` ``[N, vocabulary]`` at N positions, the ``labels``
    ``[N]`` there (``IGNORE`` where nothing is to be predicted), the batch row of each position ``[N]``, and with
    next-sentence prediction its logits ``relationship`` ``[B, 2]``. The model's own forward predicts every
    position; the CPU's (``cpu_masked_lm.MaskedPositionsLM``) only the masked ones."""
    logits: torch.Tensor
    labels: torch.Tensor
    rows: torch.Tensor
    relationship: Optional[torch.Tensor] = None


class MaskedLM(nn.Module):
    """A masked-LM model; ``encoder`` is the same transformer with pooling (not a registered sub-module: its
    parameters are the model's own, optimised and saved once).

    With ``nsp`` (``mlm`` a ``BertForPreTraining``: ``cls.predictions`` and ``cls.seq_relationship``) the model also
    predicts the next sentence from BERT's pooler over ``[CLS]``, and the pooler, which ``Encoder`` freezes for
    pooling of its own, is trained."""

    def __init__(self, mlm, pooling, normalize, nsp=False):
        super().__init__()
        self.mlm = mlm
        self.nsp = nsp
        self.__dict__["encoder"] = Encoder(mlm.base_model, pooling, normalize)
        heads = getattr(mlm, "cls", getattr(mlm, "lm_head", None))
        self.__dict__["head"] = heads.predictions if nsp else heads
        if nsp:
            mlm.base_model.pooler.requires_grad_(True)

    def forward(self, input_ids, attention_mask, labels, token_type_ids=None):
        """The model's ``Predictions`` at every position of the batch (``labels`` ``[B, L]``, ``IGNORE`` where
        nothing is masked): transformers' forward, as ``run_mlm_no_trainer.py`` runs it."""
        mask = model_mask(self.mlm.base_model, attention_mask)
        if self.nsp:
            out = self.mlm(input_ids=input_ids, attention_mask=mask, token_type_ids=token_type_ids)
            logits, relationship = out.prediction_logits, out.seq_relationship_logits
        else:
            logits, relationship = self.mlm(input_ids=input_ids, attention_mask=mask).logits, None
        rows = torch.arange(len(labels), device=labels.device).repeat_interleave(labels.shape[1])
        return Predictions(logits.flatten(0, 1), labels.flatten(), rows, relationship)


def check_nsp(model, nsp, what):
    """``--nsp`` needs a pre-training model with BERT's pooler and next-sentence head (a one-line error else)."""
    heads = getattr(model, "cls", None)
    if nsp and not (hasattr(heads, "predictions") and hasattr(heads, "seq_relationship")
                    and getattr(model.base_model, "pooler", None) is not None):
        raise InputError(f"--nsp: {what} has no next-sentence-prediction head in transformers "
                         f"({model.config.model_type}'s pre-training model is {type(model).__name__}); BERT's is "
                         "BertForPreTraining")
