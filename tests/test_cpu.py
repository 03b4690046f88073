"""The CPU's speed work (common/models/cpu.py and its mechanisms, cpu_*.py), each piece against PyTorch's or
transformers' own: dropout masks (distribution, seeding, threads, a forked child), the dropped attention (value and
gradient), ``install`` (every dropout module replaced, evaluation unchanged, plain SDPA saved), and the packed rows
with one word lookup (the per-group embeddings and gradients of the texts collate packs). The masked-LM's last layer
at the masked positions is held to BertForMaskedLM in tests/test_masked_lm.py; the thread count a CPU embedding runs
each batch with (common/models/threads.py) in tests/test_threads.py."""

import os
import time

import pytest
import torch
from torch import nn

from common.models import cpu, cpu_attention, cpu_dropout, cpu_packing
from common.models.encoder import Encoder
from common.models.pooling import pool_packed
from common.models.tokens import Packed

def test_keep_mask_is_bernoulli_p_scaled_follows_torchs_seed_and_not_the_thread_count():
    torch.manual_seed(7)
    a = cpu_dropout.keep_mask((1000, 1000), 0.1)
    torch.manual_seed(7)
    b = cpu_dropout.keep_mask((1000, 1000), 0.1)
    assert a.dtype == torch.float32 and a.shape == (1000, 1000)
    assert set(a.unique().tolist()) == {0.0, torch.tensor(1 / 0.9, dtype=torch.float32).item()}
    assert torch.equal(a, b)
    assert not torch.equal(a, cpu_dropout.keep_mask((1000, 1000), 0.1))  # the generator moved on
    threads = torch.get_num_threads()
    try:
        masks = []
        for n in (1, 3):  # serial, and a pool of 3 threads over the 4 blocks
            torch.set_num_threads(n)
            torch.manual_seed(7)
            masks.append(cpu_dropout.keep_mask((1000, 1000), 0.1))
        assert torch.equal(masks[0], a) and torch.equal(masks[1], a)
    finally:
        torch.set_num_threads(threads)
    for p in (0.1, 0.5, 0.9):
        frac = (cpu_dropout.keep_mask((1000, 1000), p) == 0).float().mean().item()
        assert abs(frac - p) < 5 * (p * (1 - p) / 1e6) ** 0.5, (p, frac)
    # neighbouring elements are independent, within and across the random streams' blocks: P(both dropped) = p²
    m = cpu_dropout.keep_mask((1_000_000,), 0.5) == 0
    assert 1_000_000 > 3 * cpu_dropout.BLOCK
    assert abs((m[1:] & m[:-1]).float().mean().item() - 0.25) < 5 * (0.25 * 0.75 / 1e6) ** 0.5
    blocks = m[:3 * cpu_dropout.BLOCK].view(3, cpu_dropout.BLOCK).float()
    assert abs((blocks[0] * blocks[1]).mean().item() - 0.25) < 5 * (0.25 * 0.75 / cpu_dropout.BLOCK) ** 0.5


def test_dropout_multiplies_by_the_mask_and_passes_the_gradient_the_same_way():
    x = torch.randn(4, 6, 8, requires_grad=True)
    g = torch.randn(4, 6, 8)
    torch.manual_seed(3)
    y = cpu_dropout.dropout(x, 0.25)
    y.backward(g)
    torch.manual_seed(3)
    keep = cpu_dropout.keep_mask(x.shape, 0.25)
    drop = keep == 0
    assert 0 < drop.sum() < drop.numel()
    assert torch.allclose(y, torch.where(drop, 0.0, x.detach()) / 0.75, rtol=1e-6, atol=0)
    assert torch.equal(y == 0, drop | (x == 0))
    assert torch.allclose(x.grad, torch.where(drop, 0.0, g) / 0.75, rtol=1e-6, atol=0)
    # evaluation, p = 0 and p = 1 are PyTorch's own
    assert torch.equal(cpu_dropout.dropout(x, 0.25, training=False), x)
    assert torch.equal(cpu_dropout.dropout(x, 0.0), x)
    assert torch.equal(cpu_dropout.dropout(x, 1.0), torch.zeros_like(x))


def reference_attention(q, k, v, allowed, keep, p):
    """softmax(q kᵀ / √d, masked) with the dropped probabilities zeroed and the rest scaled, times v: the
    definition, in plain autograd operations."""
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return (probs.masked_fill(keep == 0, 0) / (1 - p)) @ v


class _Module(nn.Module):
    is_causal = False


def test_attention_with_dropout_equals_the_definition_in_value_and_gradient():
    torch.manual_seed(0)
    b, h, n, d, p = 3, 2, 7, 4, 0.3
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float64, requires_grad=True) for _ in range(3))
    lengths = torch.tensor([7, 4, 2])
    allowed = (torch.arange(n)[None, :] < lengths[:, None])[:, None, None, :].expand(b, 1, n, n)  # padding keys
    torch.manual_seed(5)
    out, weights = cpu_attention.sdpa_cpu_dropout(_Module(), q, k, v, allowed, dropout=p, scaling=d ** -0.5)
    torch.manual_seed(5)
    keep = cpu_dropout.keep_mask((b, h, n, n), p, torch.float64)
    assert weights is None and out.shape == (b, n, h, d)
    expected = reference_attention(q, k, v, allowed, keep, p).transpose(1, 2)
    assert torch.allclose(out, expected, rtol=0, atol=1e-12)
    g = torch.randn_like(out)
    ours = torch.autograd.grad(out, (q, k, v), g)
    theirs = torch.autograd.grad(expected, (q, k, v), g)
    for a, e in zip(ours, theirs):
        assert torch.allclose(a, e, rtol=0, atol=1e-12)
    # the written-out backward against finite differences, with no mask and with an additive one
    bias = torch.zeros(b, 1, 1, n, dtype=torch.float64).masked_fill(~allowed[:, :, :1], torch.finfo(torch.float64).min)
    for mask in (None, bias):
        assert torch.autograd.gradcheck(lambda q, k, v: cpu_attention.DroppedAttention.apply(q, k, v, mask, keep),
                                        (q, k, v))


def test_attention_without_dropout_is_sdpa_itself():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    q, k, v = (torch.randn(2, 2, 5, 4) for _ in range(3))
    allowed = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    allowed[1, ..., 3:] = False
    ours, _ = cpu_attention.sdpa_cpu_dropout(_Module(), q, k, v, allowed, dropout=0.0, scaling=0.5)
    theirs, _ = sdpa_attention_forward(_Module(), q, k, v, allowed, dropout=0.0, scaling=0.5)
    assert torch.equal(ours, theirs)


def test_install_swaps_every_dropout_leaves_evaluation_bit_identical_and_saves_plain_sdpa(tiny_model, tmp_path):
    from transformers import AutoModel
    from common.models.loading import load_encoder
    encoder, tokenizer, _ = load_encoder(tiny_model)
    batch = tokenizer(["Kaupunki maa joki.", "Science physics chemistry biology history war."], padding=True,
                      return_tensors="pt")
    encoder.eval()
    with torch.no_grad():
        before = encoder.embed(batch["input_ids"], batch["attention_mask"])
    assert cpu.install(encoder) is encoder and type(encoder) is Encoder and cpu.packs_rows(encoder)
    assert not [m for m in encoder.modules() if type(m) is nn.Dropout]
    assert sum(isinstance(m, cpu_dropout.Dropout) for m in encoder.modules()) == 1 + 2 * 3  # embeddings + 3 a layer
    assert encoder.transformer.config._attn_implementation == cpu_attention.ATTENTION
    with torch.no_grad():
        assert torch.equal(encoder.embed(batch["input_ids"], batch["attention_mask"]), before)
    encoder.train()
    torch.manual_seed(0)
    a = encoder.embed(batch["input_ids"], batch["attention_mask"])
    torch.manual_seed(0)
    assert torch.equal(encoder.embed(batch["input_ids"], batch["attention_mask"]), a)  # seeded like torch's
    assert not torch.allclose(a, before)
    encoder.transformer.save_pretrained(tmp_path / "saved")
    assert cpu_attention.ATTENTION not in (tmp_path / "saved" / "config.json").read_text()
    assert AutoModel.from_pretrained(tmp_path / "saved").config._attn_implementation == "sdpa"


def tiny_encoder(kind):
    from transformers import BertConfig, BertModel, RobertaConfig, RobertaModel
    torch.manual_seed(0)
    common = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if kind == "bert":
        return Encoder(BertModel(BertConfig(max_position_embeddings=32, **common)), "mean"), 0
    return Encoder(RobertaModel(RobertaConfig(max_position_embeddings=34, pad_token_id=1, **common)), "cls"), 1


def packed(groups):
    """The padded groups' texts as collate lays them out on a CPU (``TokenStore.groups(..., packed=True)``)."""
    return [Packed(ids[mask.bool()], mask.sum(1)) for ids, mask in groups]


def groups_of(pad):
    torch.manual_seed(1)
    out = []
    for rows, width, lengths in ((3, 9, (9, 6, 2)), (2, 5, (5, 3))):
        ids = torch.randint(2, 50, (rows, width))
        mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
        ids[mask == 0] = pad
        ids[0, 1] = pad  # the padding id inside a text gets no gradient either
        out.append((ids, mask))
    return out


def test_training_forward_looks_words_up_once_with_the_per_group_embeddings_and_gradients():
    encoder, pad = tiny_encoder("bert")
    cpu.install(encoder)
    groups = groups_of(pad)
    weights = torch.randn(5, 16)
    # the definition: each group through the model from its token ids
    expected = torch.cat([encoder.embed(ids, mask) for ids, mask in groups])
    (expected * weights).sum().backward()
    reference = {name: p.grad.clone() for name, p in encoder.named_parameters() if p.grad is not None}
    encoder.zero_grad(set_to_none=True)
    out = encoder(packed(groups))
    assert torch.allclose(out, expected, rtol=0, atol=1e-6)
    (out * weights).sum().backward()
    for name, p in encoder.named_parameters():
        if name in reference:
            assert torch.allclose(p.grad, reference[name], rtol=1e-5, atol=1e-5), name
    words = encoder.transformer.get_input_embeddings().weight
    assert words.grad[pad].abs().sum() == 0
    # the kept buffer became the gradient; the next step reuses it, and accumulation adds to it
    assert words.grad.data_ptr() == encoder._word_grad.data_ptr()
    first = words.grad.clone()
    encoder.zero_grad(set_to_none=True)
    (encoder(packed(groups)) * weights).sum().backward()
    assert torch.equal(words.grad, first) and words.grad.data_ptr() == encoder._word_grad.data_ptr()
    (encoder(packed(groups)) * weights).sum().backward()
    assert torch.allclose(words.grad, 2 * first, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind,grad", [("bert", True), ("bert", False), ("roberta", True)])
def test_the_single_lookup_runs_only_with_gradient_and_where_positions_ignore_the_ids(kind, grad, monkeypatch):
    """RoBERTa numbers positions by skipping padding ids (one sits inside the first text here): its texts are not
    packed, and its padded forward is the model's own, bit for bit; a packed forward without gradient looks its
    words up as the model does."""
    calls = []
    apply = cpu_packing.WordLookup.apply
    monkeypatch.setattr(cpu_packing.WordLookup, "apply", lambda *a: calls.append(1) or apply(*a))
    encoder, pad = tiny_encoder(kind)
    cpu.install(encoder)
    assert cpu.packs_rows(encoder) == (kind == "bert")
    groups = groups_of(pad)
    with torch.set_grad_enabled(grad):
        out = encoder(packed(groups) if kind == "bert" else groups)
        expected = torch.cat([encoder.embed(ids, mask) for ids, mask in groups])
    assert len(calls) == int(kind == "bert" and grad)
    if kind == "roberta":
        assert torch.equal(out, expected)
    else:
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
    if grad:
        out.sum().backward()
        assert (getattr(encoder, "_word_grad", None) is None) == (not calls)


def test_a_forked_child_draws_masks_with_its_own_threads():
    """A child forked after the parent's pool started inherits the pool object without its threads; it draws its
    mask and exits 0 (a child that raised would exit 1)."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        cpu_dropout.keep_mask((3 * cpu_dropout.BLOCK,), 0.1)  # the parent's pool exists
        pid = os.fork()
        if pid == 0:
            try:
                size = 3 * cpu_dropout.BLOCK
                os._exit(0 if cpu_dropout.keep_mask((size,), 0.1).shape == (size,) else 3)
            except BaseException:  # noqa: BLE001 (any failure is the child's exit status, not a hang)
                os._exit(1)
        deadline = time.time() + 30
        while not (done := os.waitpid(pid, os.WNOHANG))[0]:
            if time.time() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                pytest.fail("the forked child hung drawing a mask")
            time.sleep(0.05)
        assert os.waitstatus_to_exitcode(done[1]) == 0
    finally:
        torch.set_num_threads(threads)


def test_buckets_minimise_padded_attention_plus_a_cost_a_bucket():
    lengths = [2, 3, 3, 8, 9]
    # cost 10: {2,3,3} 3·9+10 = 37 beats {2},{3,3} 42; {8},{9} 165 beats {8,9} 172
    assert cpu_packing.plan_buckets(lengths, 10) == [0, 3, 4, 5]
    # cost 1000: one bucket, 5·81+1000 = 1405, beats the best split, {2,3,3},{8,9} (1027+1162 = 2189)
    assert cpu_packing.plan_buckets(lengths, 1000) == [0, 5]
    assert cpu_packing.plan_buckets([4], 0) == [0, 1]


def test_packing_positions_segments_and_the_gather_of_padded_buckets():
    packing = cpu_packing.Packing([2, 3, 3, 8, 9], bucket_cost=10)
    assert packing.positions.tolist() == [0, 1, 0, 1, 2, 0, 1, 2] + list(range(8)) + list(range(9))
    # each text's mean pools its own tokens: here the mean of its token numbers
    means = pool_packed(torch.arange(25.0)[:, None], packing.lengths, packing.cu, "mean")
    assert means[:, 0].tolist() == [0.5, 3.0, 6.0, 11.5, 20.0]
    assert pool_packed(torch.arange(25.0)[:, None], packing.lengths, packing.cu, "cls")[:, 0].tolist() == [0, 2, 5, 8, 16]
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
    same = cpu_packing.Packing([4, 4, 4], bucket_cost=10)
    assert same.index is None and same.keep is None and same.masks(torch.float32) == [None]
    with pytest.raises(ValueError):
        cpu_packing.Packing([3, 0])


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
    packing = cpu_packing.Packing(lengths, bucket_cost=10)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, h, sum(lengths), d, dtype=torch.float64, requires_grad=True) for _ in range(3))
    masks = []
    keep_mask = cpu_dropout.keep_mask
    monkeypatch.setattr(cpu_attention, "keep_mask", lambda *a: masks.append(keep_mask(*a)) or masks[-1])
    out, weights = cpu_attention.packed_attention(q, k, v, packing, p, d ** -0.5)
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
    encoder = cpu.install(tiny(kind, pooling)).train()
    assert encoder.transformer.config._attn_implementation == cpu_attention.ATTENTION
    for m in encoder.modules():  # dropout off: both paths are then deterministic
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    batch, weights = groups(), torch.randn(6, 16)
    expected = torch.cat([encoder.embed(ids, mask) for ids, mask in batch])
    (expected * weights).sum().backward()
    reference = {name: p.grad.clone() for name, p in encoder.named_parameters() if p.grad is not None}
    encoder.zero_grad(set_to_none=True)
    plans = []
    init = cpu_packing.Packing.__init__
    monkeypatch.setattr(cpu_packing.Packing, "__init__",
                        lambda self, *a, **k: plans.append(self) or init(self, *a, **k))
    out = encoder(packed(batch))
    assert len(plans) == 1 and plans[0].lengths.tolist() == [4, 6, 9, 5, 5, 3]
    assert torch.allclose(out, expected, rtol=0, atol=1e-5)
    (out * weights).sum().backward()
    assert set(reference) == {n for n, p in encoder.named_parameters() if p.grad is not None}
    for name, p in encoder.named_parameters():
        if name in reference:
            assert torch.allclose(p.grad, reference[name], rtol=1e-4, atol=1e-5), name


def test_a_packed_batch_for_an_encoder_without_the_cpus_attention_is_refused():
    """Texts packed in one row attend to each other unless the attention reads the packing plan: an encoder that
    ``install`` did not reach refuses them rather than mix them."""
    encoder = tiny("bert", "mean")
    with pytest.raises(ValueError) as e:
        encoder(packed(groups()))
    assert str(e.value) == ("texts packed in one row need a bert/distilbert/electra model with the CPU's attention "
                            "(sdpa_cpu_dropout: cpu.install)")


def test_packed_training_with_dropout_repeats_under_a_seed_with_or_without_gradient():
    """GradCache embeds a chunk without gradient, then again with gradient under the same random state: both
    forwards must take the packed path and draw the same masks."""
    encoder = cpu.install(tiny("bert", "mean")).train()
    batch = packed(groups())
    torch.manual_seed(3)
    a = encoder(batch)
    torch.manual_seed(3)
    assert torch.equal(encoder(batch), a)
    torch.manual_seed(3)
    with torch.no_grad():
        assert torch.allclose(encoder(batch), a, rtol=0, atol=1e-6)
        assert not torch.allclose(encoder(batch), a)  # the next masks differ
        assert not torch.allclose(encoder.eval()(batch), a)


# -- transformers' internals: where a release differs, the plain path ---------------------------------------------

def note(*found):
    import transformers
    return (f"note: the CPU's speed layer is left out, the model runs as transformers wrote it (slower; PyTorch's "
            f"dropout masks): transformers {transformers.__version__} differs in what the layer relies on: "
            f"{'; '.join(found)}")


def test_where_transformers_attention_interface_differs_the_encoder_stays_as_transformers_wrote_it(tiny_model,
                                                                                                   monkeypatch):
    """SDPA's attention function gone from where transformers kept it: one note, no module swapped, and a training
    forward (dropout on) draws what the model's own forward draws under the same seed."""
    import copy

    import transformers.integrations.sdpa_attention
    from common.models.loading import load_encoder
    encoder, tokenizer, _ = load_encoder(tiny_model)
    plain = copy.deepcopy(encoder)
    monkeypatch.delattr(transformers.integrations.sdpa_attention, "sdpa_attention_forward")
    notes = []
    assert cpu.install(encoder, say=notes.append) is encoder and not cpu.packs_rows(encoder)
    assert notes == [note("transformers.integrations.sdpa_attention.sdpa_attention_forward")]
    assert not [m for m in encoder.modules() if isinstance(m, cpu_dropout.Dropout)]
    assert encoder.transformer.config._attn_implementation == "sdpa"
    groups = [tokenizer(texts, padding=True, return_tensors="pt") for texts in
              (["Kaupunki maa joki.", "Science physics chemistry biology history war."], ["Metsä järvi saari."])]
    groups = [(batch["input_ids"], batch["attention_mask"]) for batch in groups]
    encoder.train(), plain.train()
    torch.manual_seed(0)
    ours = encoder(groups)
    torch.manual_seed(0)
    assert torch.equal(ours, plain(groups))


def test_a_bert_masked_lm_whose_last_layer_lacks_a_part_stays_a_masked_lm_with_the_same_logits(tiny_model):
    """A BERT self-attention without an attribute that ``last_layer_at`` reads (transformers 4.56's has no
    ``scaling``; here ``num_attention_heads``, which the layer's own forward does not read, is taken away): the last
    layer at the masked positions cannot be computed, so the model keeps its own forward; one note, and a training
    step's logits under a seed are the plain model's."""
    import copy

    from transformers import BertForMaskedLM
    from common.models.masked_lm import MaskedLM
    from common.train.masking import IGNORE
    torch.manual_seed(0)
    model = MaskedLM(BertForMaskedLM.from_pretrained(tiny_model), "mean", False)
    del model.mlm.base_model.encoder.layer[-1].attention.self.num_attention_heads
    plain = copy.deepcopy(model)
    notes = []
    assert cpu.install(model, say=notes.append) is model and not model.masked_positions
    assert notes == [note("BertLayer.attention.self.num_attention_heads")]
    ids = torch.randint(5, model.mlm.config.vocab_size, (3, 24))
    labels = torch.where(torch.rand(3, 24) < 0.3, ids, torch.full_like(ids, IGNORE))
    model.train(), plain.train()
    torch.manual_seed(1)
    ours = model(ids, torch.ones_like(ids), labels)
    torch.manual_seed(1)
    assert torch.equal(ours.logits, plain(ids, torch.ones_like(ids), labels).logits)


def test_a_module_that_hands_the_attention_mask_down_without_keywords_is_a_difference(monkeypatch):
    """The packing plan reaches the attention function as a keyword beside the mask: a layer whose forward takes no
    ``**kwargs`` (as transformers wrote BERT's before its attention interface) would drop it, and each packed text
    would attend to every other."""
    from transformers.models.bert import modeling_bert
    encoder, _ = tiny_encoder("bert")
    assert cpu.differences(encoder) == []
    forward = modeling_bert.BertLayer.forward

    def without_keywords(self, hidden_states, attention_mask=None):
        return forward(self, hidden_states, attention_mask)
    monkeypatch.setattr(modeling_bert.BertLayer, "forward", without_keywords)
    assert cpu.differences(encoder) == ["BertLayer.forward(**kwargs)"]
    notes = []
    assert not cpu.packs_rows(cpu.install(encoder, say=notes.append)) and notes == [note("BertLayer.forward(**kwargs)")]
