"""The encoder: a transformer with pooling (and optional L2 normalisation) on top, token ids → one vector per text;
and the text it reads for a document (SPECTER's title + separator + abstract).

Loading one is ``loading.py``, embedding a corpus with one ``inference.py``, saving one ``saving.py``. Its forward
reads a batch in either form ``collate`` makes it: padded groups, or on a CPU its texts laid end to end
(``tokens.Packed``, through ``cpu_packing``'s plan and word lookup).
"""

import torch
import torch.nn.functional as F
from torch import nn

from common.models import sliding_window
from common.models.cpu_attention import ATTENTION
from common.models.cpu_packing import PACKED_TYPES, Packing, WordLookup, packs
from common.models.pooling import POOLINGS, pool, pool_packed, text_offsets
from common.models.tokens import Packed
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
    ``forward`` takes a batch as ``collate`` makes it, in one call, so that a DDP wrapper sees a single forward per
    step: padded groups of sequences (length-sorted sub-batches pad less), each through ``embed``, or on a CPU the
    texts laid end to end in one row (``embed_row``).
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
        return self.normalized(pool(hidden, attention_mask, self.pooling))

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

    def embed_row(self, groups):
        """``embed``'s vectors of the texts of packed groups (``Packed``, in order) laid end to end in one row, with
        or without gradient and in evaluation too, so that a forward replayed under the same random state
        (GradCache) draws the same dropout masks. Every layer but attention works token by token and sees only real
        tokens; attention runs per bucket of texts (``cpu_packing.Packing``, the plan the CPU's attention function
        reads as its ``packing`` keyword); positions count from each text's first token, so the model sees what it
        sees padded. With gradient the row's word vectors are looked up once (``cpu_packing.WordLookup``)."""
        transformer = self.transformer
        if not packs(transformer):
            raise ValueError(f"texts packed in one row need a {'/'.join(PACKED_TYPES)} model with the CPU's attention "
                             f"({ATTENTION}: cpu.install)")
        words = transformer.get_input_embeddings()
        plan = Packing(torch.cat([group.lengths for group in groups]).numpy())
        ids = torch.cat([group.ids for group in groups])
        lookup = (torch.is_grad_enabled() and words.weight.requires_grad and words.max_norm is None
                  and not words.scale_grad_by_freq and not words.sparse)
        vectors = WordLookup.apply(ids, words.weight, words, self) if lookup else words(ids)
        hidden = transformer(inputs_embeds=vectors[None], position_ids=plan.positions[None],
                             packing=plan).last_hidden_state[0]
        return self.normalized(pool_packed(hidden, plan.lengths, plan.cu, self.pooling))

    def forward(self, groups):
        """Embeddings of a batch's groups, concatenated: padded ``(input_ids, attention_mask)`` pairs each through
        ``embed``, or ``Packed`` texts together through ``embed_row``."""
        if isinstance(groups[0], Packed):
            return self.embed_row(groups)
        return torch.cat([self.embed(ids, mask) for ids, mask in groups])


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
