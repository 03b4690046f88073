"""Training forwards on packed texts (common/models/packing.py): the bucket plan, attention of each text over its
own tokens, and the encoder's packed forward against its per-group forward."""

import pytest
import torch

from common.models import attention as A
from common.models import dropout as D
from common.models import packing as P


def test_buckets_minimise_padded_attention_plus_a_cost_a_bucket():
    lengths = [2, 3, 3, 8, 9]
    # cost 10: {2,3,3} 3·9+10 = 37 beats {2},{3,3} 42; {8},{9} 165 beats {8,9} 172
    assert P.plan_buckets(lengths, 10) == [0, 3, 4, 5]
    # cost 1000: one bucket, 5·81+1000 = 1405, beats the best split, {2,3,3},{8,9} (1027+1162 = 2189)
    assert P.plan_buckets(lengths, 1000) == [0, 5]
    assert P.plan_buckets([4], 0) == [0, 1]


def test_packing_positions_segments_and_the_gather_of_padded_buckets():
    packing = P.Packing([2, 3, 3, 8, 9], bucket_cost=10)
    assert packing.positions.tolist() == [0, 1, 0, 1, 2, 0, 1, 2] + list(range(8)) + list(range(9))
    # each text's mean pools its own tokens: here the mean of its token numbers
    means = P.pool(torch.arange(25.0)[:, None], packing.lengths, packing.cu, "mean")
    assert means[:, 0].tolist() == [0.5, 3.0, 6.0, 11.5, 20.0]
    assert P.pool(torch.arange(25.0)[:, None], packing.lengths, packing.cu, "cls")[:, 0].tolist() == [0, 2, 5, 8, 16]
    assert packing.shapes == [(3, 3), (1, 8), (1, 9)]
    # the first bucket pads text 0 to 3 tokens (its padding slot reads token 0); the others are views
    assert packing.index.tolist() == [0, 1, 0, 2, 3, 4, 5, 6, 7] + list(range(8, 25))
    assert packing.keep.tolist() == [0, 1] + list(range(3, 26))
    first, second, third = packing.masks(torch.float32)
    assert second is None and third is None
    assert first[:, 0, 0].tolist() == [[0, 0, torch.finfo(torch.float32).min], [0, 0, 0], [0, 0, 0]]
    tokens = torch.arange(25.0)[:, None, None].expand(25, 2, 1)
    parts = packing.take(tokens)
    assert [tuple(p.shape) for p in parts] == [(3, 2, 3, 1), (1, 2, 8, 1), (1, 2, 9, 1)]
    assert parts[0][:, 0, :, 0].tolist() == [[0, 1, 0], [2, 3, 4], [5, 6, 7]]
    assert torch.equal(packing.put(parts), tokens)
    # texts of one length need no gather at all
    same = P.Packing([4, 4, 4], bucket_cost=10)
    assert same.index is None and same.keep is None and same.masks(torch.float32) == [None]
    with pytest.raises(ValueError):
        P.Packing([3, 0])


def reference(q, k, v, lengths, scale, keeps=None):
    """Each text's attention over its own tokens, one text at a time: softmax(q kᵀ · scale) ⊙ keep, times v."""
    outs, start = [], 0
    for i, n in enumerate(lengths):
        qi, ki, vi = (t[0, :, start:start + n] for t in (q, k, v))
        probs = torch.softmax(qi @ ki.transpose(-1, -2) * scale, dim=-1)
        if keeps is not None:
            probs = probs * keeps[i]
        outs.append((probs @ vi).transpose(0, 1))
        start += n
    return torch.cat(outs)[None]


@pytest.mark.parametrize("p", [0.0, 0.3])
def test_packed_attention_is_each_texts_own_attention_in_value_and_gradient(p, monkeypatch):
    lengths, h, d = [2, 3, 3, 8, 9], 2, 4
    packing = P.Packing(lengths, bucket_cost=10)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, h, sum(lengths), d, dtype=torch.float64, requires_grad=True) for _ in range(3))
    masks = []
    keep_mask = D.keep_mask
    monkeypatch.setattr(P, "keep_mask", lambda *a: masks.append(keep_mask(*a)) or masks[-1])
    out, weights = P.packed_attention(q, k, v, packing, p, d ** -0.5)
    assert weights is None and out.shape == (1, sum(lengths), h, d)
    keeps = None
    if p:
        # the mask of text i is its row of its bucket's mask, over its own tokens
        assert [tuple(m.shape) for m in masks] == [(3, h, 3, 3), (1, h, 8, 8), (1, h, 9, 9)]
        rows = [(0, 0), (0, 1), (0, 2), (1, 0), (2, 0)]
        keeps = [masks[b][r, :, :n, :n] for (b, r), n in zip(rows, lengths)]
        assert all((m == 0).any() for m in masks)
    else:
        assert not masks
    expected = reference(q, k, v, lengths, d ** -0.5, keeps)
    assert torch.allclose(out, expected, rtol=0, atol=1e-12)
    g = torch.randn_like(out)
    for ours, theirs in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(expected, (q, k, v), g)):
        assert torch.allclose(ours, theirs, rtol=0, atol=1e-12)


def tiny(kind, pooling):
    from transformers import BertConfig, BertModel, DistilBertConfig, DistilBertModel, ElectraConfig, ElectraModel
    from common.models.encoder import Encoder
    torch.manual_seed(0)
    if kind == "distilbert":
        config = DistilBertConfig(vocab_size=50, dim=16, n_layers=2, n_heads=2, hidden_dim=32, dropout=0.1,
                                  attention_dropout=0.1, max_position_embeddings=32)
        return Encoder(DistilBertModel(config), pooling)
    common = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                  max_position_embeddings=32)
    if kind == "electra":
        return Encoder(ElectraModel(ElectraConfig(embedding_size=8, **common)), pooling)
    return Encoder(BertModel(BertConfig(**common)), pooling)


def groups():
    torch.manual_seed(1)
    out = []
    for rows, width, lengths in ((3, 9, (4, 6, 9)), (2, 5, (5, 5)), (1, 3, (3,))):
        ids = torch.randint(2, 50, (rows, width))
        mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
        out.append((ids.masked_fill(mask == 0, 0), mask))
    return out


@pytest.mark.parametrize("kind", ["bert", "distilbert", "electra"])
@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_the_packed_training_forward_gives_the_per_group_embeddings_and_gradients(kind, pooling, monkeypatch):
    encoder = A.fast_dropout(tiny(kind, pooling)).train()
    assert encoder.transformer.config._attn_implementation == A.ATTENTION
    for m in encoder.modules():  # dropout off: both paths are then deterministic
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    batch, weights = groups(), torch.randn(6, 16)
    expected = torch.cat([encoder.embed(ids, mask) for ids, mask in batch])
    (expected * weights).sum().backward()
    reference = {name: p.grad.clone() for name, p in encoder.named_parameters() if p.grad is not None}
    encoder.zero_grad(set_to_none=True)
    plans = []
    init = P.Packing.__init__
    monkeypatch.setattr(P.Packing, "__init__", lambda self, *a, **k: plans.append(self) or init(self, *a, **k))
    out = encoder(batch)
    assert len(plans) == 1 and plans[0].lengths.tolist() == [4, 6, 9, 5, 5, 3]
    assert torch.allclose(out, expected, rtol=0, atol=1e-5)
    (out * weights).sum().backward()
    assert set(reference) == {n for n, p in encoder.named_parameters() if p.grad is not None}
    for name, p in encoder.named_parameters():
        if name in reference:
            assert torch.allclose(p.grad, reference[name], rtol=1e-4, atol=1e-5), name


def test_packed_training_with_dropout_repeats_under_a_seed_with_or_without_gradient():
    """GradCache embeds a chunk without gradient, then again with gradient under the same random state: both
    forwards must take the packed path and draw the same masks."""
    encoder = A.fast_dropout(tiny("bert", "mean")).train()
    batch = groups()
    torch.manual_seed(3)
    a = encoder(batch)
    torch.manual_seed(3)
    assert torch.equal(encoder(batch), a)
    torch.manual_seed(3)
    with torch.no_grad():
        assert torch.allclose(encoder(batch), a, rtol=0, atol=1e-6)
        assert not torch.allclose(encoder(batch), a)  # the next masks differ
        assert not torch.allclose(encoder.eval()(batch), a)
