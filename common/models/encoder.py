"""The encoder: a transformer with pooling (and optional L2 normalisation) on top, token ids → one vector per text;
and the text it reads for a document (SPECTER's title + separator + abstract).

Loading one is ``loading.py``, embedding a corpus with one ``inference.py``, saving one ``saving.py``. On a CPU,
training replaces its ``forward`` with a faster way to the same vectors (``cpu_packing.PackedEncoder``).
"""

import torch
import torch.nn.functional as F
from torch import nn

from common.models import sliding_window

POOLINGS = ("cls", "mean")
# Architectures that read a 4-D attention mask as it is. Given the 2-D padding mask, transformers first asks whether
# the batch pads at all (``mask.all()``), a read of a device value that makes the host wait for a GPU before it can
# queue the forward; the boolean mask it would build for SDPA, given instead, computes the same without that wait
# (tests/test_sync.py; bit for bit on a CPU).
MASK_AS_IS = ("bert", "roberta", "xlm-roberta", "camembert", "distilbert", "electra")


def model_mask(transformer, attention_mask):
    """The padding mask ``[B, L]`` as ``transformer`` should be given it: for SDPA on an architecture of
    ``MASK_AS_IS``, the ``[B, 1, 1, L]`` boolean mask SDPA reads; else as it is."""
    config = transformer.config
    if getattr(config, "model_type", None) in MASK_AS_IS and \
            getattr(config, "_attn_implementation", None) in ("sdpa", "sdpa_cpu_dropout"):
        return attention_mask[:, None, None, :].bool()
    return attention_mask


class Encoder(nn.Module):
    """A transformer with pooling (and optional L2 normalisation) on top: token ids → one vector per text.

    ``embed`` is what it computes: one padded batch through the transformer, its last hidden states pooled.
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
        # DDP would reject, so it is frozen and saved as it was loaded; so are a Longformer's global-attention
        # projections, since ``embed`` gives no token global attention.
        for name, param in transformer.named_parameters():
            if name.startswith("pooler."):
                param.requires_grad_(False)
        if sliding_window.is_longformer(transformer):
            sliding_window.freeze_global_attention(transformer)

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
        if sliding_window.is_longformer(self.transformer):  # at the batch's own length, not a multiple of its window
            hidden = sliding_window.hidden_states(self.transformer, input_ids, attention_mask)
        else:
            hidden = self.transformer(input_ids=input_ids,
                                      attention_mask=model_mask(self.transformer, attention_mask)).last_hidden_state
        return self.pool(hidden, attention_mask)

    def embed_packed(self, input_ids, lengths):
        """``embed``'s vectors of texts laid end to end in one row, without padding: ``input_ids`` ``[T]`` on the
        model's device, ``lengths`` ``[n]`` summing to T, on the host (the sizes are read there, not from the
        device). Needs an attention that reads variable-length sequences from their cumulative lengths (flash
        attention on a GPU)."""
        cu, positions = text_offsets(lengths)
        longest, device = int(lengths.max()), input_ids.device
        cu, positions, lengths = (t.to(device, non_blocking=True) for t in (cu, positions, lengths))
        flash_cu = cu.to(torch.int32)
        hidden = self.transformer(input_ids=input_ids[None], position_ids=positions[None], cu_seq_lens_q=flash_cu,
                                  cu_seq_lens_k=flash_cu, max_length_q=longest,
                                  max_length_k=longest).last_hidden_state[0]
        return self.normalized(pool_packed(hidden, lengths, cu, self.pooling))

    def forward(self, groups):
        """Embeddings of padded groups ``[(input_ids, attention_mask), …]``, concatenated."""
        return torch.cat([self.embed(ids, mask) for ids, mask in groups])


def text_offsets(lengths):
    """For texts of ``lengths`` (a 1-D integer tensor) laid end to end: their cumulative lengths ``[n + 1]`` and
    each token's position in its own text ``[T]``, on the lengths' device."""
    cu = F.pad(torch.cumsum(lengths, 0), (1, 0))
    return cu, torch.arange(int(cu[-1]), device=lengths.device) - torch.repeat_interleave(cu[:-1], lengths)


def pool_packed(hidden, lengths, cu, pooling):
    """One float32 vector per text from packed ``[T, d]`` states: the first token's (``"cls"``), or the mean over the
    text (summed in float32), as ``Encoder.pool``."""
    if pooling == "cls":
        return hidden[cu[:-1]].float()
    segment = torch.repeat_interleave(torch.arange(len(lengths), device=hidden.device), lengths,
                                      output_size=hidden.shape[0])
    out = torch.zeros(len(lengths), hidden.shape[-1], dtype=torch.float32, device=hidden.device)
    return out.index_add(0, segment, hidden.float()) / lengths[:, None].float()


def document_text(title, text, sep_token):
    """SPECTER's input: ``title + sep_token + text`` (for BERT: ``[CLS] title [SEP] text [SEP]``)."""
    return f"{title}{sep_token}{text}"


def checkpoint_activations(transformer):
    """``--gradient-checkpointing``: recompute ``transformer``'s activations in the backward pass (less memory, the
    same gradient), non-reentrant."""
    if hasattr(transformer, "activation_checkpointing_enable"):  # the name since transformers 5.23
        transformer.activation_checkpointing_enable({"use_reentrant": False})
    else:
        transformer.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
