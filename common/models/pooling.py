"""Pooling: one float32 vector per text from a transformer's last hidden states, the first token's (``"cls"``) or the
mean over the text's tokens, whichever form the texts came in: padded rows with their attention mask (``pool``), or
laid end to end in one row, without padding (``pool_packed``; their offsets from ``text_offsets``)."""

import torch
import torch.nn.functional as F

POOLINGS = ("cls", "mean")


def pool(hidden, attention_mask, pooling):
    """Padded states ``[B, L, d]`` with their mask ``[B, L]`` → ``[B, d]``, float32 whatever the states' dtype (a
    half-precision model, or an autocast region that leaves them in half): the mean's sum, the norm and every loss
    after it then keep float32's resolution."""
    if pooling == "cls":
        return hidden[:, 0].float()
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1, dtype=torch.float32) / torch.clamp(mask.sum(dim=1, dtype=torch.float32),
                                                                         min=1e-9)


def pool_packed(hidden, lengths, cu, pooling):
    """Packed states ``[T, d]`` of texts of ``lengths`` (cumulative ``cu``) → ``[n, d]`` float32, as ``pool``."""
    if pooling == "cls":
        return hidden[cu[:-1]].float()
    segment = torch.repeat_interleave(torch.arange(len(lengths), device=hidden.device), lengths,
                                      output_size=hidden.shape[0])
    out = torch.zeros(len(lengths), hidden.shape[-1], dtype=torch.float32, device=hidden.device)
    return out.index_add(0, segment, hidden.float()) / lengths[:, None].float()


def text_offsets(lengths):
    """For texts of ``lengths`` (a 1-D integer tensor) laid end to end: their cumulative lengths ``[n + 1]`` and
    each token's position in its own text ``[T]``, on the lengths' device."""
    cu = F.pad(torch.cumsum(lengths, 0), (1, 0))
    return cu, torch.arange(int(cu[-1]), device=lengths.device) - torch.repeat_interleave(cu[:-1], lengths)
