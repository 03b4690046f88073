"""A Longformer's forward over each batch's own length: what transformers' ``LongformerModel`` computes at the real
tokens, through PyTorch's scaled-dot-product attention, without padding every text to a multiple of the window.

transformers' ``LongformerSelfAttention`` (Beltagy et al. 2020, §3.1): a token attends to every token within
``attention_window // 2`` = w positions of it and to every global token; a global token (``global_attention_mask``
1) attends to every token through the ``query_global``, ``key_global`` and ``value_global`` projections; every other
score uses ``query``, ``key`` and ``value``, those of global keys too. Padding (attention mask 0) is seen by no
token. ``LongformerModel.forward`` pads each batch up to a multiple of the window (saying so in a warning) and runs
the chunked sliding-window product whatever the length; here each padded batch runs at its own width L:

- L ≤ w + 1: every token is within w of every other, so local attention is full attention over the real tokens
  (one SDPA call, a padding mask) — for a short encoder converted by ``longformer.py``, what the short encoder
  computes;
- w + 1 < L ≤ ``BLOCK`` + 2w: one SDPA call over the batch with the band |i − j| ≤ w (and the global keys) as its mask;
- longer: the tokens cut into ``ceil(L / BLOCK)`` blocks of equal size b (chunks sized to the text), each block's
  queries against the b + 2w keys around it, which a view of the key and value rows reads without copying them
  (``_windows``), the band as the mask: b + 2w scores a query where the band needs 2w + 1.

Global tokens add their rows (their keys and values gathered once a layer, appended to every block's) and an SDPA
call of their own over the whole text through the global projections, whose rows replace theirs, as transformers'
do. Attention-probability dropout in training keeps transformers' distribution (each probability kept with
probability 1 − p and scaled by 1 / (1 − p), the global ones too), drawn by SDPA, or by the attention module's
``dropped_attention`` where the CPU layer put one (``cpu.install``). The rest of each layer is the model's
own modules, so gradient checkpointing (``activation_checkpointing_enable``) checkpoints each layer as transformers
does, an int8 copy (``quantize.py``) runs its quantised Linear layers, and the weights and saved folders stay a
standard ``LongformerModel``'s. Padding rows hold finite values, not transformers' (theirs read no attention).
"""

import functools

import torch
import torch.nn.functional as F

# queries per block of the sliding-window attention; measured in docs/benchmarks.md ("Longformer attention")
BLOCK = 128


def is_longformer(transformer):
    return getattr(transformer.config, "model_type", None) == "longformer"


def freeze_global_attention(transformer):
    """A Longformer's global-attention projections (``query_global``, ``key_global``, ``value_global``) left out of
    training, where no token has global attention: they receive no gradient, and DDP on several processes refuses a
    step whose trainable parameters did not all take part (one process trains the same weights: AdamW skips a
    parameter without gradient)."""
    for layer in transformer.encoder.layer:
        attention = layer.attention.self
        for projection in (attention.query_global, attention.key_global, attention.value_global):
            projection.requires_grad_(False)


class Batch:
    """What every layer's attention needs of one padded batch, made once a forward: which tokens are real and which
    global, and, per window and dtype, the additive masks (0 where a query sees a key, the dtype's minimum where
    not: a row that sees nothing, a padding row, stays finite)."""

    def __init__(self, attention_mask, global_attention_mask=None, block=BLOCK):
        self.valid = attention_mask.bool()
        self.block = block
        self.is_global = None
        if global_attention_mask is not None:
            is_global = global_attention_mask.bool() & self.valid  # transformers: attention_mask · (global + 1)
            if bool(is_global.any()):
                self.is_global = is_global
                counts = is_global.sum(1)
                # global token k of row r sits at slot k of its row: slots [B, G], empty ones pointing at token 0
                self.slots = int(counts.max())
                self.filled = torch.arange(self.slots, device=counts.device)[None, :] < counts[:, None]
                rows, columns = is_global.nonzero(as_tuple=True)
                self.global_rows, self.global_columns = rows, columns
                self.slot_index = torch.zeros(self.filled.shape, dtype=torch.long, device=counts.device)
                self.slot_index[self.filled] = columns
        self._plans = {}

    def plan(self, one_sided, dtype):
        key = (one_sided, dtype)
        if key not in self._plans:
            self._plans[key] = _Plan(self, one_sided, dtype)
        return self._plans[key]

    def bias(self, allowed, dtype):
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed,
                                                                                          torch.finfo(dtype).min)


class _Plan:
    """One window's attention layout and masks for a ``Batch``: ``kind`` "full" (mask ``[B, 1, 1, L]`` or None),
    "band" (``[B, 1, L, L]``) or "blocks" (``blocks`` of ``size`` queries, mask ``[B · blocks, 1, size, size + 2w
    (+ G)]``)."""

    def __init__(self, batch, w, dtype):
        valid, is_global = batch.valid, batch.is_global
        n, width = valid.shape
        self.w = w
        if width <= w + 1:
            self.kind = "full"
            self.mask = None if bool(valid.all()) else batch.bias(valid[:, None, None, :], dtype)
            return
        if width <= batch.block + 2 * w:
            self.kind = "band"
            position = torch.arange(width, device=valid.device)
            near = (position[:, None] - position[None, :]).abs() <= w
            allowed = near[None] if is_global is None else near[None] | is_global[:, None, :]
            self.mask = batch.bias((allowed & valid[:, None, :])[:, None], dtype)
            return
        self.kind = "blocks"
        self.blocks = -(-width // batch.block)
        self.size = -(-width // self.blocks)
        size, padded = self.size, self.blocks * self.size
        # the keys of every text laid end to end, w rows more at each end; a window can reach into the next text,
        # whose keys its mask removes
        local = valid if is_global is None else valid & ~is_global  # global keys come once, in their own columns
        local = F.pad(F.pad(local, (0, padded - width)).reshape(-1), (w, w))
        owner = F.pad(torch.arange(n, device=valid.device).repeat_interleave(padded), (w, w), value=-1)
        span = size + 2 * w
        block_owner = torch.arange(n, device=valid.device).repeat_interleave(self.blocks)
        seen = local.unfold(0, span, size) & (owner.unfold(0, span, size) == block_owner[:, None])
        offset = torch.arange(span, device=valid.device)[None, :] - torch.arange(size, device=valid.device)[:, None]
        band = (offset >= 0) & (offset <= 2 * w)
        allowed = band[None] & seen[:, None, :]
        if is_global is not None:
            extra = batch.filled.repeat_interleave(self.blocks, 0)[:, None, :].expand(-1, size, -1)
            allowed = torch.cat([allowed, extra], dim=-1)
        self.mask = batch.bias(allowed[:, None], dtype)


def _heads(x, heads):
    """``[B, L, D]`` → ``[B, heads, L, D / heads]`` (a view)."""
    return x.view(*x.shape[:2], heads, -1).transpose(1, 2)


def _windows(x, plan):
    """Each block's keys (or values) ``[B · blocks, D, size + 2w]`` from ``[B, L, D]``: a view of the rows laid end to
    end once (texts padded to ``blocks · size``, w zero rows at each end), the windows overlapping in memory."""
    w = plan.w
    edge = x.new_zeros(w, x.shape[-1])
    rows = torch.cat([edge, _to_blocks(x, plan).reshape(-1, x.shape[-1]), edge])
    return rows.unfold(0, plan.size + 2 * w, plan.size)


def _to_blocks(x, plan):
    """``[B, L, D]`` padded with zero rows to ``[B, blocks · size, D]`` (itself where nothing is missing)."""
    missing = plan.blocks * plan.size - x.shape[1]
    return F.pad(x, (0, 0, 0, missing)) if missing else x


def _attend(module, q, k, v, mask, p):
    """softmax(q kᵀ / √d + mask) v with attention dropout p; q, k, v ``[N, heads, rows, d]``."""
    dropped = getattr(module, "dropped_attention", None)
    if dropped is not None:
        return dropped(q, k, v, mask, p)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)


def self_attention(module, hidden, batch):
    """``LongformerSelfAttention`` ``module``'s output ``[B, L, D]`` for ``hidden`` ``[B, L, D]``."""
    heads, w = module.num_heads, module.one_sided_attn_window_size
    p = module.dropout if module.training else 0.0
    n, width, dim = hidden.shape
    query, key, value = module.query(hidden), module.key(hidden), module.value(hidden)
    plan = batch.plan(w, query.dtype)
    if plan.kind != "blocks":
        out = _attend(module, _heads(query, heads), _heads(key, heads), _heads(value, heads), plan.mask, p)
        out = out.transpose(1, 2).reshape(n, width, dim)
    else:
        blocks, size = plan.blocks, plan.size
        q = _to_blocks(query, plan).view(n * blocks, size, heads, -1).transpose(1, 2)
        k, v = (_windows(x, plan).view(n * blocks, heads, -1, size + 2 * w).transpose(2, 3) for x in (key, value))
        if batch.is_global is not None:  # every block also reads the global keys, through the local projections
            k, v = (torch.cat([t, _heads(_gather(x, batch), heads).repeat_interleave(blocks, 0)], dim=2)
                    for t, x in ((k, key), (v, value)))
        out = _attend(module, q, k, v, plan.mask, p).transpose(1, 2).reshape(n, blocks * size, dim)[:, :width]
    if batch.is_global is None:
        return out
    # the global tokens' own rows: every real token through the global projections
    q = _heads(module.query_global(_gather(hidden, batch)), heads)
    k, v = _heads(module.key_global(hidden), heads), _heads(module.value_global(hidden), heads)
    rows = _attend(module, q, k, v, batch.bias(batch.valid[:, None, None, :], q.dtype), p)
    rows = rows.transpose(1, 2).reshape(n, batch.slots, dim)[batch.filled]
    return out.index_put((batch.global_rows, batch.global_columns), rows)


def _gather(x, batch):
    """The global tokens' rows of ``x`` ``[B, L, D]`` at their slots, ``[B, G, D]`` (an empty slot: token 0's)."""
    return x.gather(1, batch.slot_index[:, :, None].expand(-1, -1, x.shape[-1]))


def _layer(layer, hidden, batch):
    """``LongformerLayer.forward``'s output with this module's attention."""
    from transformers.pytorch_utils import apply_chunking_to_forward
    attention = layer.attention.output(self_attention(layer.attention.self, hidden, batch), hidden)
    return apply_chunking_to_forward(layer.ff_chunk, layer.chunk_size_feed_forward, layer.seq_len_dim, attention)


def hidden_states(model, input_ids, attention_mask=None, global_attention_mask=None, block=BLOCK):
    """The last hidden states ``[B, L, D]`` of ``LongformerModel`` ``model`` for ``input_ids`` ``[B, L]``: at the
    tokens ``attention_mask`` keeps, ``model(input_ids, attention_mask, global_attention_mask).last_hidden_state``
    (to float32's rounding). Each layer is checkpointed where the model's gradient checkpointing is on, as
    transformers' ``GradientCheckpointingLayer`` does."""
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    batch = Batch(attention_mask, global_attention_mask, block)
    hidden = model.embeddings(input_ids=input_ids)
    for layer in model.encoder.layer:
        if layer.gradient_checkpointing and layer.training and torch.is_grad_enabled():
            hidden = layer._gradient_checkpointing_func(functools.partial(_layer, layer, batch=batch), hidden)
        else:
            hidden = _layer(layer, hidden, batch)
    return hidden
