"""The CPU's speed work, one layer beside the model: ``install(model)`` puts it into a loaded model, and training calls
it on a CPU only (a GPU runs the model as transformers wrote it). Every change computes what the model computes
(tests/test_cpu.py holds each to PyTorch's or transformers' own), faster on a CPU:

- dropout: ``nn.Dropout`` becomes ``Dropout``, the same Bernoulli(p) mask drawn from NumPy's SFC64 in blocks over
  torch's threads, not PyTorch's ``bernoulli_``;
- attention dropout: where SDPA would leave its fused kernel for the composite one, ``DroppedAttention`` (softmax,
  mask and backward written out), through the attention function ``ATTENTION``; a Longformer's too
  (``dropped_attention``);
- ``Encoder.forward`` (each padded group through the transformer) becomes ``PackedEncoder``'s: every group's texts
  laid end to end in one row (``Packing``), their word vectors looked up once (``WordLookup``);
- ``MaskedLM.forward`` (logits at every position) becomes ``MaskedPositionsLM``'s: the last layer's queries,
  feed-forward block and vocabulary projection at the masked positions only.

Why each is faster, with its figures: docs/benchmarks.md ("CPU dropout", "Packed rows", "One word lookup a step",
"Masked-LM training"). Embedding's thread count on a CPU is ``common/models/threads.py``.

Reproducibility: each dropout mask is seeded with one draw from PyTorch's global generator, and each block of
``BLOCK`` elements has its own stream from that seed and the block's number, so a run's masks follow from
``torch.manual_seed``, resume with the checkpointed RNG state like PyTorch's own, and do not depend on the number of
threads. A float mask costs 4 bytes an element to keep for the backward pass where PyTorch's own keeps 1.
"""

import concurrent.futures
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from common.models.encoder import Encoder, pool_packed, text_offsets
from common.models.masked_lm import IGNORE, MaskedLM, Predictions


def install(model):
    """Put the CPU's speed work into ``model`` (an ``Encoder``, a ``MaskedLM`` or any module holding them), in
    place; returns it. Saved folders stay what transformers saves: plain SDPA attention, ``nn.Dropout``'s
    configuration."""
    _register_attention()
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Dropout:
                setattr(module, name, Dropout(child.p, child.inplace).train(child.training))
    for module in model.modules():  # outermost first: setting a model sets the models inside it
        if getattr(module, "_supports_attention_backend", False) and \
                getattr(getattr(module, "config", None), "_attn_implementation", None) == "sdpa":
            module.set_attn_implementation(ATTENTION)
        if type(module).__name__ == "LongformerSelfAttention":
            module.dropped_attention = dropped_attention  # common/models/sliding_window.py calls it
    encoders = [model] if isinstance(model, Encoder) else [m for m in model.modules() if isinstance(m, Encoder)]
    for encoder in encoders:
        if type(encoder) is Encoder and packs(encoder.transformer):
            encoder.__class__ = PackedEncoder
    if type(model) is MaskedLM and _bert_last_layer(model.mlm.base_model):
        model.__class__ = MaskedPositionsLM
    return model


# -- dropout ----------------------------------------------------------------------------------------------------

BLOCK = 1 << 18  # elements per random stream (and per task of the thread pool)
_pool = None


def _forget_pool():
    """A forked child inherits the pool object but not its threads; it builds its own."""
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool)


def _fill(out, seed, block, cut, scale):
    """``out`` (a block) ← ``scale`` where the block's random bits are >= ``cut``, else 0."""
    bits = np.random.SFC64([seed, block]).random_raw((len(out) + 1) // 2).view(np.int32)[:len(out)]
    np.multiply(np.greater_equal(bits, cut), out.dtype.type(scale), out=out)


def keep_mask(shape, p, dtype=torch.float32):
    """A tensor of ``shape`` and ``dtype`` (float64 drawn as such; other dtypes from a float32 mask): each element 0
    (dropped) with probability p (to 2⁻³²), independently, else 1 / (1 - p). Applying a float mask is one
    vectorised multiplication, where PyTorch's operations on a boolean mask (``where``, ``masked_fill_``) are
    slower."""
    global _pool
    n = int(np.prod(shape, dtype=np.int64))
    seed = int(torch.randint(0, 2 ** 62, (), dtype=torch.int64))
    # bits are uniform on [-2^31, 2^31): P(bits < cut) = round(p * 2^32) / 2^32
    cut, scale = round(p * 2 ** 32) - 2 ** 31, 1.0 / (1.0 - p)
    out = np.empty(n, dtype=np.float64 if dtype == torch.float64 else np.float32)
    tasks = [(out[start:start + BLOCK], seed, i, cut, scale) for i, start in enumerate(range(0, n, BLOCK))]
    threads = torch.get_num_threads()
    if len(tasks) > 1 and threads > 1:
        if _pool is None or _pool._max_workers != threads:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="dropout")
        list(_pool.map(lambda task: _fill(*task), tasks))  # NumPy releases the GIL in both steps
    else:
        for task in tasks:
            _fill(*task)
    return torch.from_numpy(out).view(shape).to(dtype)


def dropout(x, p, training=True):
    """``torch.nn.functional.dropout`` with the mask drawn by ``keep_mask``."""
    if not training or not 0 < p < 1:
        return nn.functional.dropout(x, p, training)
    return x * keep_mask(x.shape, p, x.dtype)


class Dropout(nn.Dropout):
    """``nn.Dropout`` (same ``p``, same place in the model) whose mask comes from ``keep_mask``."""

    def forward(self, x):
        if self.inplace:
            return super().forward(x)
        return dropout(x, self.p, self.training)


class DroppedAttention(torch.autograd.Function):
    """softmax(q kᵀ + bias) ⊙ keep, times v, with its backward written out. q, k, v are ``[B, H, L, d]``, q already
    scaled by the attention's own scale; ``bias`` is an additive mask that broadcasts to ``[B, H, L, L]`` (or None);
    ``keep`` is ``[B, H, L, L]`` from ``keep_mask`` (0 or 1 / (1 - p)).

    The probabilities P and the dropped ones D = P ⊙ keep are kept; the backward needs no mask: with G = grad · vᵀ
    and T = G ⊙ D, the scores' gradient P ⊙ (G ⊙ keep − rowsum(G ⊙ keep ⊙ P)) is T − P ⊙ rowsum(T), done in place
    on T."""

    @staticmethod
    def forward(ctx, q, k, v, bias, keep):
        b, h, n, d = q.shape
        q, k, v = (t.reshape(b * h, t.shape[-2], d) for t in (q, k, v))
        probs = torch.bmm(q, k.transpose(1, 2))
        if bias is not None:
            probs.view(b, h, n, -1).add_(bias)
        probs = torch.softmax(probs, dim=-1)
        dropped = probs * keep.reshape(probs.shape)
        ctx.save_for_backward(q, k, v, probs, dropped)
        ctx.shape = (b, h)
        return torch.bmm(dropped, v).view(b, h, n, d)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, probs, dropped = ctx.saved_tensors
        b, h = ctx.shape
        grad = grad.reshape(b * h, grad.shape[-2], grad.shape[-1])
        # Dᵀ · grad as (gradᵀ · D)ᵀ: only the [L, d] operands are transposed
        grad_v = torch.bmm(grad.transpose(1, 2), dropped).transpose(1, 2)
        scores = torch.bmm(grad, v.transpose(1, 2)).mul_(dropped)
        scores.addcmul_(probs, scores.sum(-1, keepdim=True), value=-1.0)
        grad_q = torch.bmm(scores, k)
        grad_k = torch.bmm(q.transpose(1, 2), scores).transpose(1, 2)
        return (grad_q.view(b, h, *grad_q.shape[1:]), grad_k.view(b, h, *grad_k.shape[1:]),
                grad_v.view(b, h, *grad_v.shape[1:]), None, None)


def dropped_attention(q, k, v, mask, p):
    """softmax(q kᵀ / √d + mask) v with attention-probability dropout p, for a Longformer's attention
    (``sliding_window``); q, k, v ``[N, heads, rows, d]``. Under bf16 autocast SDPA runs, as transformers'."""
    if not 0 < p < 1 or torch.is_autocast_enabled("cpu"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
    keep = keep_mask((*q.shape[:-1], k.shape[-2]), p, q.dtype)
    return DroppedAttention.apply(q * q.shape[-1] ** -0.5, k, v, mask, keep)


# -- attention --------------------------------------------------------------------------------------------------

ATTENTION = "sdpa_cpu_dropout"  # transformers' attention-interface name of ``sdpa_cpu_dropout``


def sdpa_cpu_dropout(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                     **kwargs):
    """transformers' SDPA attention, except where it would drop attention probabilities: there softmax(q kᵀ ·
    scale + mask) is dropped with ``keep_mask`` and multiplied by v (``DroppedAttention``). With a ``packing``
    keyword (a ``Packing``), the packed texts' attention (``packed_attention``)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    packing = kwargs.pop("packing", None)
    if packing is not None:
        return packed_attention(query, key, value, packing, dropout,
                                scaling if scaling is not None else query.shape[-1] ** -0.5)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", False)
    if (not 0 < dropout < 1 or causal or kwargs.get("position_bias") is not None
            or key.shape[1] != query.shape[1] or torch.is_autocast_enabled("cpu")):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    bias = None
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            bias = torch.zeros(attention_mask.shape, dtype=query.dtype).masked_fill_(
                ~attention_mask, torch.finfo(query.dtype).min)
        else:
            bias = attention_mask[..., :key.shape[-2]].to(query.dtype)
    keep = keep_mask((*query.shape[:-1], key.shape[-2]), dropout, query.dtype)
    out = DroppedAttention.apply(query * scale, key, value, bias, keep)
    return out.transpose(1, 2).contiguous(), None


def _register_attention():
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    AttentionInterface.register(ATTENTION, sdpa_cpu_dropout)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, sdpa_mask)


# -- packed rows ------------------------------------------------------------------------------------------------
# Every layer but attention works token by token, so on the packed row its matrix products, GELU, layer norms and
# dropout see only real tokens. On the demo's triplets (all-MiniLM-L6-v2, 128 tokens, batches of 16 in file order)
# three padded length groups hold 12.8 % more tokens than the texts; six hold 6.1 % more. Attention runs per bucket
# of texts: a bucket of unequal lengths is padded, with an additive mask, and only its real rows are kept.

# a bucket's fixed cost, in attention scores per head: runs of texts merge into one padded bucket where their
# padding costs less than this. One 128-token text's scores (chosen by measurement: docs/benchmarks.md, "Defaults")
BUCKET_COST = 16384


def plan_buckets(lengths, bucket_cost=BUCKET_COST):
    """Cut texts (in packed order) into contiguous runs minimising Σ (texts · longest²) + ``bucket_cost`` a run: the
    attention work of each padded run plus a fixed cost for each. Returns the cut points ``[0, …, n]``; of equal
    costs, the shortest last run."""
    lengths = np.asarray(lengths, dtype=np.float64)
    n = len(lengths)
    best, back = np.zeros(n + 1), np.zeros(n + 1, dtype=np.int64)
    for last in range(1, n + 1):
        # runs first..last-1 for first = last-1 down to 0: their longest text is a running maximum
        longest = np.maximum.accumulate(lengths[last - 1::-1])
        cost = best[last - 1::-1] + np.arange(1, last + 1) * longest * longest + bucket_cost
        i = int(np.argmin(cost))
        best[last], back[last] = cost[i], last - 1 - i
    cuts = [n]
    while cuts[-1]:
        cuts.append(int(back[cuts[-1]]))
    return cuts[::-1]


class Packing:
    """Texts of ``lengths`` laid end to end: their positions and attention buckets.

    The buckets' padded tokens are laid end to end too (``index`` gathers them from the packed row, and ``keep``
    takes the real ones back), so that each attention layer costs three gathers (q, k, v) and one take whatever the
    number of buckets; where no bucket pads, both are None and the buckets are views of the packed row. The plan
    travels to the attention function as the ``packing`` keyword, which transformers' layers pass through."""

    def __init__(self, lengths, bucket_cost=BUCKET_COST):
        lengths = np.asarray(lengths, dtype=np.int64)
        if not len(lengths) or lengths.min() < 1:
            raise ValueError("packing needs at least one text, each of at least one token")
        self.lengths = torch.from_numpy(lengths)
        self.cu, self.positions = text_offsets(self.lengths)
        cu = self.cu.numpy()
        cuts = plan_buckets(lengths, bucket_cost)
        self.shapes, index, valid = [], [], []
        for first, last in zip(cuts[:-1], cuts[1:]):
            longest = int(lengths[first:last].max())
            self.shapes.append((last - first, longest))
            step = np.arange(longest)
            ok = step[None, :] < lengths[first:last, None]
            index.append(np.where(ok, cu[first:last, None] + step[None, :], 0).reshape(-1))
            valid.append(ok)
        self.index = self.keep = None
        self._valid, self._bias = valid, {}
        if not all(v.all() for v in valid):
            self.index = torch.from_numpy(np.concatenate(index))
            self.keep = torch.from_numpy(np.flatnonzero(np.concatenate([v.reshape(-1) for v in valid])))

    def masks(self, dtype):
        """Each bucket's additive mask ``[texts, 1, 1, L]`` (0 for a token, the dtype's minimum for padding), or
        None where it has no padding."""
        if dtype not in self._bias:
            self._bias[dtype] = [None if v.all() else torch.zeros(v.shape, dtype=dtype).masked_fill_(
                torch.from_numpy(~v), torch.finfo(dtype).min)[:, None, None, :] for v in self._valid]
        return self._bias[dtype]

    def take(self, tokens):
        """Packed ``[T, heads, d]`` → each bucket's ``[texts, heads, L, d]``."""
        if self.index is not None:
            tokens = tokens.index_select(0, self.index)
        parts = tokens.split([n * length for n, length in self.shapes])
        return [p.view(n, length, *tokens.shape[1:]).transpose(1, 2) for p, (n, length) in zip(parts, self.shapes)]

    def put(self, outs):
        """Each bucket's ``[texts, heads, L, d]`` → the packed row's ``[T, heads, d]``."""
        out = torch.cat([o.transpose(1, 2).reshape(-1, o.shape[1], o.shape[3]) for o in outs])
        return out if self.keep is None else out.index_select(0, self.keep)


def packed_attention(query, key, value, packing, dropout, scale):
    """Attention of each text over its own tokens, for packed ``[1, heads, T, d]`` q, k, v; returns ``[1, T, heads,
    d]`` as transformers' attention functions do. With 0 < dropout < 1 the probabilities are dropped with
    ``keep_mask`` (``DroppedAttention``); otherwise PyTorch's scaled-dot-product attention runs."""
    qs, ks, vs = (packing.take(t[0].transpose(0, 1)) for t in (query, key, value))  # from [T, heads, d]
    outs = []
    for qb, kb, vb, bias in zip(qs, ks, vs, packing.masks(query.dtype)):
        if 0 < dropout < 1:
            keep = keep_mask((*qb.shape[:-1], kb.shape[-2]), dropout, qb.dtype)
            outs.append(DroppedAttention.apply(qb * scale, kb, vb, bias, keep))
        else:
            outs.append(F.scaled_dot_product_attention(qb, kb, vb, attn_mask=bias, scale=scale))
    return packing.put(outs)[None], None


# Architectures whose positions count from the first token whatever the token ids, so that ``inputs_embeds`` gives
# what ``input_ids`` gives. RoBERTa-style models number positions by skipping padding ids, which a text can hold,
# and keep the model's own forward.
PACKED_TYPES = ("bert", "distilbert", "electra")


def packs(transformer):
    """Whether ``PackedEncoder`` reads this transformer: an architecture of ``PACKED_TYPES`` with its plain word
    embedding and this module's attention, not a decoder."""
    words = transformer.get_input_embeddings()
    return (transformer.config.model_type in PACKED_TYPES and type(words) is nn.Embedding
            and transformer.config._attn_implementation == ATTENTION
            and not getattr(transformer.config, "is_decoder", False))


class WordLookup(torch.autograd.Function):
    """``F.embedding`` whose weight gradient is summed into a ``[vocabulary, d]`` buffer the encoder keeps between
    steps (``_word_grad``), where PyTorch's own backward allocates and zeroes a new tensor of that size each time (47
    MB for a BERT vocabulary at d = 384; docs/wikispecter.md, "One word lookup a step"). Autograd takes the returned
    tensor as the parameter's ``.grad`` where there is none yet; where there is one (gradient accumulation), the
    ordinary backward runs, so that the buffer is never written while it is a live gradient."""

    @staticmethod
    def forward(ctx, ids, weight, embedding, owner):
        ctx.save_for_backward(ids)
        ctx.embedding, ctx.owner = embedding, owner
        return nn.functional.embedding(ids, weight, embedding.padding_idx)

    @staticmethod
    def backward(ctx, grad):
        ids, = ctx.saved_tensors
        weight, padding = ctx.embedding.weight, ctx.embedding.padding_idx
        if weight.grad is not None:
            return None, torch.ops.aten.embedding_backward(grad, ids, weight.shape[0], -1 if padding is None
                                                           else padding, False, False), None, None
        buffer = getattr(ctx.owner, "_word_grad", None)
        if buffer is None or buffer.shape != weight.shape or buffer.dtype != grad.dtype:
            buffer = ctx.owner._word_grad = torch.empty(weight.shape, dtype=grad.dtype)
        rows, grad = ids.reshape(-1), grad.reshape(-1, grad.shape[-1])
        if padding is not None:
            grad = grad.masked_fill((rows == padding)[:, None], 0)
        buffer.zero_().index_add_(0, rows, grad)
        return None, buffer.view_as(buffer), None, None


class PackedEncoder(Encoder):
    """An ``Encoder`` whose ``forward`` lays the texts of every group end to end in one packed row, with or without
    gradient and in evaluation too, so that a forward replayed under the same random state (GradCache) draws the
    same dropout masks; with gradient, the row's word vectors are looked up once (``WordLookup``). Positions count
    from each text's first token, so the model sees what it sees padded."""

    def forward(self, groups):
        transformer = self.transformer
        words = transformer.get_input_embeddings()
        lengths = torch.cat([mask.sum(1) for _, mask in groups])
        ids = torch.cat([ids[mask.bool()] for ids, mask in groups])
        plan = Packing(lengths.numpy())
        lookup = (torch.is_grad_enabled() and words.weight.requires_grad and words.max_norm is None
                  and not words.scale_grad_by_freq and not words.sparse)
        vectors = WordLookup.apply(ids, words.weight, words, self) if lookup else words(ids)
        hidden = transformer(inputs_embeds=vectors[None], position_ids=plan.positions[None],
                             packing=plan).last_hidden_state[0]
        return self.normalized(pool_packed(hidden, plan.lengths, plan.cu, self.pooling))


# -- the masked-LM's last layer at the masked positions ---------------------------------------------------------

def _bert_last_layer(base):
    """Whether ``last_layer_at`` computes this model's last layer: a BERT layer (BERT, MiniLM, …) with absolute
    positions, no cross-attention, and an attention this module can call."""
    config, layers = base.config, getattr(getattr(base, "encoder", None), "layer", None)
    return (layers is not None and len(layers) > 1 and type(layers[-1]).__name__ == "BertLayer"
            and getattr(config, "position_embedding_type", "absolute") == "absolute"
            and not config.is_decoder and not getattr(config, "add_cross_attention", False)
            and config._attn_implementation in ("sdpa", ATTENTION, "eager"))


def last_layer_at(layer, hidden, attention_mask, masked):
    """A ``BertLayer``'s output at the ``masked`` positions only (``[M, d]``, in the order of ``masked.nonzero()``):
    keys and values from every position of ``hidden`` ``[B, L, d]``, queries from the masked ones, padded per row
    to the row's most; then the attention output, residual and LayerNorm, and the feed-forward block, on the masked
    positions alone. Dropout as the layer's own (attention probabilities through ``sdpa_cpu_dropout``). The layer's
    sub-modules are called directly, not the layer itself, so hooks on the layer (and any wrapping of it: gradient
    checkpointing, FSDP) do not apply to it."""
    attention = layer.attention.self
    batch, length, _ = hidden.shape
    heads, size = attention.num_attention_heads, attention.attention_head_size
    rows, cols = masked.nonzero(as_tuple=True)
    slots = (torch.cumsum(masked, 1) - 1)[rows, cols]  # each masked position's place among its row's
    picked = hidden[rows, cols]
    projected = attention.query(picked)  # under autocast in its dtype, not the hidden states'
    # at least one query slot: a batch with nothing masked still runs every parameter (DDP keeps in step)
    query = projected.new_zeros(batch, max(1, int(masked.sum(1).max())), heads * size).index_put(
        (rows, slots), projected)
    query = query.view(batch, -1, heads, size).transpose(1, 2)
    key = attention.key(hidden).view(batch, length, heads, size).transpose(1, 2)
    value = attention.value(hidden).view(batch, length, heads, size).transpose(1, 2)
    # padding as a boolean mask (True: attend), which the attention function turns into its additive bias
    keep = None if attention_mask is None or bool(attention_mask.all()) else attention_mask[:, None, None, :].bool()
    context, _ = sdpa_cpu_dropout(attention, query, key, value, keep,
                                  dropout=attention.dropout.p if attention.training else 0.0,
                                  scaling=attention.scaling, is_causal=False)
    context = context.reshape(batch, -1, heads * size)[rows, slots]
    attended = layer.attention.output(context, picked)
    return layer.output(layer.intermediate(attended), attended)


class MaskedPositionsLM(MaskedLM):
    """A BERT ``MaskedLM`` that computes only what its loss reads: every layer but the last through the model's own
    forward, then the last layer at the masked positions (and ``[CLS]`` with next-sentence prediction) with
    ``last_layer_at``, and the vocabulary projection there alone: on 8 blocks of 256 tokens of all-MiniLM-L6-v2
    about a tenth of a step's arithmetic is left out (docs/benchmarks.md, "Masked-LM training"). Its predictions
    are the masked positions', in the order of ``masked.nonzero()``."""

    def forward(self, input_ids, attention_mask, labels, token_type_ids=None):
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
