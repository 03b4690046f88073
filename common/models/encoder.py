"""The encoder: a transformer with pooling (and optional L2 normalisation) on top, token ids → one vector per text;
and the text it reads for a document (SPECTER's title + separator + abstract).

Loading one is ``loading.py``, embedding a corpus with one ``inference.py``, saving one ``saving.py``; the faster
paths its ``forward`` takes to the same vectors (packed rows, one word lookup, a Longformer's windows) are
``fast_forward.py``.
"""

import torch
import torch.nn.functional as F
from torch import nn

from common.models import fast_forward

POOLINGS = ("cls", "mean")


class Encoder(nn.Module):
    """A transformer with pooling (and optional L2 normalisation) on top: token ids → one vector per text.

    ``embed`` is what it computes: one padded batch through the transformer, its last hidden states pooled.
    ``forward`` takes one or several padded groups of sequences (length-sorted sub-batches pad less) and returns
    their embeddings concatenated, in one call, so that a DDP wrapper sees a single forward per step: each group's
    ``embed``, or the same vectors by a faster path where ``fast_forward`` has one.
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

    @property
    def dimension(self):
        return self.transformer.config.hidden_size

    def pool(self, hidden, attention_mask):
        """float32 vectors whatever the states' dtype (a half-precision model, or an autocast region that leaves
        them in half): the mean's sum, the norm and every loss after it then keep float32's resolution."""
        if self.pooling == "cls":
            out = hidden[:, 0].float()
        else:
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            out = (hidden * mask).sum(dim=1, dtype=torch.float32) / torch.clamp(
                mask.sum(dim=1, dtype=torch.float32), min=1e-9)
        return self.normalized(out)

    def normalized(self, vectors):
        return F.normalize(vectors, p=2, dim=1) if self.normalize else vectors

    def embed(self, input_ids, attention_mask):
        """Embeddings ``[B, d]`` of one padded batch ``input_ids``, ``attention_mask`` ``[B, L]``."""
        return self.pool(fast_forward.hidden_states(self.transformer, input_ids, attention_mask), attention_mask)

    def embed_packed(self, input_ids, lengths):
        """``embed``'s vectors of texts laid end to end without padding (``fast_forward.embed_packed``)."""
        return fast_forward.embed_packed(self, input_ids, lengths)

    def forward(self, groups):
        """Embeddings of padded groups ``[(input_ids, attention_mask), …]``, concatenated."""
        vectors = fast_forward.forward(self, groups)
        return torch.cat([self.embed(ids, mask) for ids, mask in groups]) if vectors is None else vectors


def document_text(title, text, sep_token):
    """SPECTER's input: ``title + sep_token + text`` (for BERT: ``[CLS] title [SEP] text [SEP]``)."""
    return f"{title}{sep_token}{text}"
