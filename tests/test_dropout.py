"""The CPU training path's dropout, attention and word lookup (common/models/dropout.py, Encoder.forward) against
PyTorch's own composite operations: same values, same gradients, same distribution."""


import pytest
import torch
from torch import nn

from common.models import attention as A
from common.models import dropout as D


def test_keep_mask_is_bernoulli_p_scaled_follows_torchs_seed_and_not_the_thread_count():
    torch.manual_seed(7)
    a = D.keep_mask((1000, 1000), 0.1)
    torch.manual_seed(7)
    b = D.keep_mask((1000, 1000), 0.1)
    assert a.dtype == torch.float32 and a.shape == (1000, 1000)
    assert set(a.unique().tolist()) == {0.0, torch.tensor(1 / 0.9, dtype=torch.float32).item()}
    assert torch.equal(a, b)
    assert not torch.equal(a, D.keep_mask((1000, 1000), 0.1))  # the generator moved on
    threads = torch.get_num_threads()
    try:
        masks = []
        for n in (1, 3):  # serial, and a pool of 3 threads over the 4 blocks
            torch.set_num_threads(n)
            torch.manual_seed(7)
            masks.append(D.keep_mask((1000, 1000), 0.1))
        assert torch.equal(masks[0], a) and torch.equal(masks[1], a)
    finally:
        torch.set_num_threads(threads)
    for p in (0.1, 0.5, 0.9):
        frac = (D.keep_mask((1000, 1000), p) == 0).float().mean().item()
        assert abs(frac - p) < 5 * (p * (1 - p) / 1e6) ** 0.5, (p, frac)
    # neighbouring elements are independent, within and across the random streams' blocks: P(both dropped) = p²
    m = D.keep_mask((1_000_000,), 0.5) == 0
    assert 1_000_000 > 3 * D.BLOCK
    assert abs((m[1:] & m[:-1]).float().mean().item() - 0.25) < 5 * (0.25 * 0.75 / 1e6) ** 0.5
    blocks = m[:3 * D.BLOCK].view(3, D.BLOCK).float()
    assert abs((blocks[0] * blocks[1]).mean().item() - 0.25) < 5 * (0.25 * 0.75 / D.BLOCK) ** 0.5


def test_dropout_multiplies_by_the_mask_and_passes_the_gradient_the_same_way():
    x = torch.randn(4, 6, 8, requires_grad=True)
    g = torch.randn(4, 6, 8)
    torch.manual_seed(3)
    y = D.dropout(x, 0.25)
    y.backward(g)
    torch.manual_seed(3)
    keep = D.keep_mask(x.shape, 0.25)
    drop = keep == 0
    assert 0 < drop.sum() < drop.numel()
    assert torch.allclose(y, torch.where(drop, 0.0, x.detach()) / 0.75, rtol=1e-6, atol=0)
    assert torch.equal(y == 0, drop | (x == 0))
    assert torch.allclose(x.grad, torch.where(drop, 0.0, g) / 0.75, rtol=1e-6, atol=0)
    # evaluation, p = 0 and p = 1 are PyTorch's own
    assert torch.equal(D.dropout(x, 0.25, training=False), x)
    assert torch.equal(D.dropout(x, 0.0), x)
    assert torch.equal(D.dropout(x, 1.0), torch.zeros_like(x))


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
    out, weights = A.sdpa_cpu_dropout(_Module(), q, k, v, allowed, dropout=p, scaling=d ** -0.5)
    torch.manual_seed(5)
    keep = D.keep_mask((b, h, n, n), p, torch.float64)
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
        assert torch.autograd.gradcheck(lambda q, k, v: D.DroppedAttention.apply(q, k, v, mask, keep), (q, k, v))


def test_attention_without_dropout_is_sdpa_itself():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    q, k, v = (torch.randn(2, 2, 5, 4) for _ in range(3))
    allowed = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    allowed[1, ..., 3:] = False
    ours, _ = A.sdpa_cpu_dropout(_Module(), q, k, v, allowed, dropout=0.0, scaling=0.5)
    theirs, _ = sdpa_attention_forward(_Module(), q, k, v, allowed, dropout=0.0, scaling=0.5)
    assert torch.equal(ours, theirs)


def test_fast_dropout_swaps_every_dropout_leaves_evaluation_bit_identical_and_saves_plain_sdpa(tiny_model,
                                                                                            tmp_path):
    from transformers import AutoModel
    from common.models.loading import load_encoder
    encoder, tokenizer, _ = load_encoder(tiny_model)
    batch = tokenizer(["Kaupunki maa joki.", "Science physics chemistry biology history war."], padding=True,
                      return_tensors="pt")
    encoder.eval()
    with torch.no_grad():
        before = encoder.embed(batch["input_ids"], batch["attention_mask"])
    A.fast_dropout(encoder)
    assert not [m for m in encoder.modules() if type(m) is nn.Dropout]
    assert sum(isinstance(m, D.Dropout) for m in encoder.modules()) == 1 + 2 * 3  # embeddings + 3 a layer
    assert encoder.transformer.config._attn_implementation == A.ATTENTION
    with torch.no_grad():
        assert torch.equal(encoder.embed(batch["input_ids"], batch["attention_mask"]), before)
    encoder.train()
    torch.manual_seed(0)
    a = encoder.embed(batch["input_ids"], batch["attention_mask"])
    torch.manual_seed(0)
    assert torch.equal(encoder.embed(batch["input_ids"], batch["attention_mask"]), a)  # seeded like torch's
    assert not torch.allclose(a, before)
    encoder.transformer.save_pretrained(tmp_path / "saved")
    assert A.ATTENTION not in (tmp_path / "saved" / "config.json").read_text()
    assert AutoModel.from_pretrained(tmp_path / "saved").config._attn_implementation == "sdpa"


def tiny_encoder(kind):
    from transformers import BertConfig, BertModel, RobertaConfig, RobertaModel
    from common.models.encoder import Encoder
    torch.manual_seed(0)
    common = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if kind == "bert":
        return Encoder(BertModel(BertConfig(max_position_embeddings=32, **common)), "mean"), 0
    return Encoder(RobertaModel(RobertaConfig(max_position_embeddings=34, pad_token_id=1, **common)), "cls"), 1


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
    groups = groups_of(pad)
    weights = torch.randn(5, 16)
    # the definition: each group through the model from its token ids
    expected = torch.cat([encoder.embed(ids, mask) for ids, mask in groups])
    (expected * weights).sum().backward()
    reference = {name: p.grad.clone() for name, p in encoder.named_parameters() if p.grad is not None}
    encoder.zero_grad(set_to_none=True)
    out = encoder(groups)
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
    (encoder(groups) * weights).sum().backward()
    assert torch.equal(words.grad, first) and words.grad.data_ptr() == encoder._word_grad.data_ptr()
    (encoder(groups) * weights).sum().backward()
    assert torch.allclose(words.grad, 2 * first, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind,grad", [("bert", True), ("bert", False), ("roberta", True)])
def test_the_single_lookup_runs_only_with_gradient_and_where_positions_ignore_the_ids(kind, grad, monkeypatch):
    """RoBERTa numbers positions by skipping padding ids (one sits inside the first text here): its groups keep
    the ordinary path, bit for bit, as does any forward without gradient."""
    from common.models import fast_forward as E
    calls = []
    apply = E._WordLookup.apply
    monkeypatch.setattr(E._WordLookup, "apply", lambda *a: calls.append(1) or apply(*a))
    encoder, pad = tiny_encoder(kind)
    groups = groups_of(pad)
    with torch.set_grad_enabled(grad):
        out = encoder(groups)
        expected = torch.cat([encoder.embed(ids, mask) for ids, mask in groups])
    assert len(calls) == int(kind == "bert" and grad)
    if not calls:
        assert torch.equal(out, expected)
    if grad:
        out.sum().backward()
        assert (getattr(encoder, "_word_grad", None) is None) == (not calls)


def test_a_forked_child_draws_masks_with_its_own_threads():
    """A child forked after the parent's pool started inherits the pool object without its threads."""
    import os
    import time
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        D.keep_mask((3 * D.BLOCK,), 0.1)  # the parent's pool exists
        pid = os.fork()
        if pid == 0:
            D.keep_mask((3 * D.BLOCK,), 0.1)
            os._exit(0)
        deadline = time.time() + 30
        while not os.waitpid(pid, os.WNOHANG)[0]:
            if time.time() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                pytest.fail("the forked child hung drawing a mask")
            time.sleep(0.05)
    finally:
        torch.set_num_threads(threads)
