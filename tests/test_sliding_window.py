"""The Longformer at its batches' own length (common/models/sliding_window.py) against transformers'
``LongformerModel``: hidden states and vectors around every boundary of the window, global tokens, 04's training
loss and its gradients, attention dropout's distribution, and no padding to a multiple of the window."""

import copy

import numpy as np
import pytest
import torch

from common.models import sliding_window as S
from common.models.encoder import Encoder, checkpoint_activations
from common.models.inference import embed
from common.models.loading import load_encoder
from common.models.tokens import TokenStore

PAD = 1  # Longformer's (RoBERTa's) padding id


def tiny_longformer(window=8, hidden=32, heads=2, layers=2, max_length=160, dropout=0.0, seed=0):
    """A randomly initialised LongformerModel: its global projections differ from its local ones, so that a test
    sees one used in the other's place."""
    from transformers import LongformerConfig, LongformerModel
    config = LongformerConfig(vocab_size=64, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                              intermediate_size=2 * hidden, attention_window=window, pad_token_id=PAD,
                              max_position_embeddings=max_length + PAD + 1, hidden_dropout_prob=0.0,
                              attention_probs_dropout_prob=dropout)
    torch.manual_seed(seed)
    return LongformerModel(config).eval()


def padded(lengths, seed=0):
    """Random token ids of ``lengths`` padded to the longest, and their attention mask."""
    rng = np.random.default_rng(seed)
    width = max(lengths)
    ids = np.full((len(lengths), width), PAD, dtype=np.int64)
    mask = np.zeros((len(lengths), width), dtype=np.int64)
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(5, 64, n)
        mask[row, :n] = 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


def with_globals(mask):
    """Global attention on every text's first token ([CLS]), on a middle token of the first text, and on a padding
    position (which both implementations leave out)."""
    flags = torch.zeros_like(mask)
    flags[:, 0] = 1
    flags[0, mask[0].sum() // 2] = 1
    if not mask.all():
        flags[mask == 0] = 1
    return flags


def transformers_states(model, ids, mask, flags=None):
    return model(input_ids=ids, attention_mask=mask, global_attention_mask=flags).last_hidden_state


# window 8 (w = 4): at most w + 1 tokens (full attention), w + 2 (one banded call), the window and one more, its
# multiples and one more; block 4 cuts every band case into blocks, BLOCK keeps them in one call
@pytest.mark.parametrize("block", [4, S.BLOCK])
@pytest.mark.parametrize("width", [4, 5, 6, 8, 9, 16, 17, 24, 40, 150])
@pytest.mark.parametrize("global_tokens", [False, True])
def test_hidden_states_equal_transformers_around_every_window_boundary(width, block, global_tokens):
    model = tiny_longformer()
    ids, mask = padded([width, max(1, width - 3), max(1, width // 2), 1], seed=width)
    flags = with_globals(mask) if global_tokens else None
    with torch.no_grad():
        theirs = transformers_states(model, ids, mask, flags)
        ours = S.hidden_states(model, ids, mask, flags, block=block)
    real = mask.bool()
    assert ours.shape == (4, width, 32) and torch.isfinite(ours).all()
    torch.testing.assert_close(ours[real], theirs[real], rtol=0, atol=1e-5)


def test_layers_of_different_windows_each_keep_their_own():
    model = tiny_longformer(window=[8, 16], max_length=64)
    ids, mask = padded([48, 30, 9])
    with torch.no_grad():
        theirs = transformers_states(model, ids, mask, with_globals(mask))
        ours = S.hidden_states(model, ids, mask, with_globals(mask), block=8)
    torch.testing.assert_close(ours[mask.bool()], theirs[mask.bool()], rtol=0, atol=1e-5)


@pytest.mark.parametrize("global_tokens", [False, True])
def test_mean_pooled_vectors_equal_transformers_at_4096_tokens(global_tokens):
    model = tiny_longformer(window=512, hidden=16, max_length=4096)
    ids, mask = padded([4096, 2900, 257])
    flags = with_globals(mask) if global_tokens else None
    encoder = Encoder(model, "mean").eval()
    with torch.no_grad():
        theirs = encoder.pool(transformers_states(model, ids, mask, flags), mask)
        ours = encoder.pool(S.hidden_states(model, ids, mask, flags), mask)
        assert S.Batch(mask).plan(256, torch.float32).kind == "blocks"
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)


def test_a_batch_plans_full_attention_up_to_half_the_window_then_a_band_then_blocks():
    kinds = {width: S.Batch(torch.ones(2, width)).plan(256, torch.float32).kind for width in (256, 257, 258, 640,
                                                                                               641, 4096)}
    assert kinds == {256: "full", 257: "full", 258: "band", 640: "band", 641: "blocks", 4096: "blocks"}
    plan = S.Batch(torch.ones(1, 4096)).plan(256, torch.float32)
    assert (plan.blocks, plan.size, plan.mask.shape) == (32, 128, (32, 1, 128, 640))  # texts not padded up
    odd = S.Batch(torch.ones(1, 1000)).plan(256, torch.float32)
    assert (odd.blocks, odd.size) == (8, 125)  # chunks sized to the text
    assert S.Batch(torch.ones(3, 100)).plan(256, torch.float32).mask is None  # no padding: no mask


def distill_loss(module, groups, index, teacher, contextual, mask):
    """04 train's loss (cosine-masked: L_S on the short documents, SoftCCA to the contextual teacher)."""
    from common.train.objectives.distill import combine
    from common.distill.structural import structural_loss
    y, softcca = module(groups, index, contextual)
    return combine(structural_loss(y, teacher, mask, "cos", 1.0), softcca, mask, 0.5).mean()


@pytest.mark.parametrize("checkpointing", [False, True])
def test_04s_training_loss_and_gradients_equal_transformers(checkpointing, monkeypatch):
    from common.train.objectives.distill import DistillModule
    from common.distill.softcca import SoftCCA, projection
    torch.manual_seed(1)
    head, size = projection("16(relu)x8", 32)
    theirs = DistillModule(Encoder(tiny_longformer(), "mean"), head, projection("8", 5)[0], SoftCCA(size)).train()
    ours = copy.deepcopy(theirs)
    calls = []
    if checkpointing:
        checkpoint_activations(ours.encoder.transformer)  # as 03 --gradient-checkpointing does
        for layer in ours.encoder.transformer.encoder.layer:
            inner = layer._gradient_checkpointing_func
            layer._gradient_checkpointing_func = lambda *a, inner=inner, **k: calls.append(1) or inner(*a, **k)
    groups = [padded(lengths, seed=i) for i, lengths in enumerate([[3, 5, 2], [9, 7], [40, 17, 150]])]
    index = torch.tensor([7, 0, 3, 1, 6, 2, 5, 4])
    teacher, contextual = torch.randn(8, 32), torch.randn(8, 5)
    short = torch.tensor([True, False] * 4)
    loss = distill_loss(ours, groups, index, teacher, contextual, short)
    loss.backward()
    with monkeypatch.context() as patch:
        patch.setattr(S, "is_longformer", lambda transformer: False)  # Encoder.embed calls the model itself
        reference = distill_loss(theirs, groups, index, teacher, contextual, short)
        reference.backward()
    assert len(calls) == (6 if checkpointing else 0)  # every layer of the three groups
    torch.testing.assert_close(loss, reference, rtol=0, atol=1e-6)
    grads = dict(theirs.named_parameters())
    compared = 0
    for name, param in ours.named_parameters():
        if grads[name].grad is None:  # the global projections, which no token uses here
            assert param.grad is None or not param.grad.any(), name
            continue
        torch.testing.assert_close(param.grad, grads[name].grad, rtol=1e-4, atol=1e-5, msg=name)
        compared += 1
    assert compared > 30
    torch.testing.assert_close(ours.softcca.student.running, theirs.softcca.student.running)  # the same state after


def test_gradients_with_global_tokens_equal_transformers():
    model = tiny_longformer().train()
    ours = copy.deepcopy(model)
    ids, mask = padded([150, 60, 7])
    flags = with_globals(mask)
    weights = torch.randn(3, 150, 32)
    (transformers_states(model, ids, mask, flags) * weights * mask[..., None]).sum().backward()
    (S.hidden_states(ours, ids, mask, flags, block=16) * weights * mask[..., None]).sum().backward()
    theirs = dict(model.named_parameters())
    for name, param in ours.named_parameters():
        if name.startswith("pooler."):
            continue
        torch.testing.assert_close(param.grad, theirs[name].grad, rtol=1e-4, atol=1e-4, msg=name)
    assert ours.encoder.layer[0].attention.self.query_global.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("block", [4, S.BLOCK])
def test_attention_dropout_keeps_transformers_distribution(block):
    """Many copies of one text in a batch are as many independent draws: the mean and the spread of every output
    over them match transformers' within sampling error, and differ from evaluation's (dropout is on)."""
    model = tiny_longformer(window=4, hidden=8, layers=1, dropout=0.5).train()
    with torch.no_grad():  # attention outputs large beside the residual, so that their spread shows
        for value in (model.encoder.layer[0].attention.self.value, model.encoder.layer[0].attention.self.value_global):
            value.weight.mul_(50)
    copies = 4000
    ids, mask = padded([11])
    ids, mask = ids.expand(copies, -1), mask.expand(copies, -1)
    flags = with_globals(mask)
    with torch.no_grad():
        torch.manual_seed(0)
        theirs = transformers_states(model, ids, mask, flags)
        ours = S.hidden_states(model, ids, mask, flags, block=block)
        still = transformers_states(model.eval(), ids[:1], mask[:1], flags[:1])[0]
    error = ((theirs.var(0) + ours.var(0)) / copies).sqrt()
    assert ((ours.mean(0) - theirs.mean(0)).abs() < 5 * error).all()
    assert ((ours.std(0) / theirs.std(0) - 1).abs() < 0.1).all()
    assert (ours.std(0) > 0.01).all() and (ours[0] != still).any()


def test_a_converted_short_encoder_still_computes_its_source_on_short_texts(tiny_model):
    from common.models.longformer import convert_to_longformer
    long, tokenizer = convert_to_longformer(str(tiny_model), max_length=256, window=32)
    short, _, _ = load_encoder(str(tiny_model), pooling="mean")
    texts = ["kaupunki maa joki meri vuori metsä järvi saari tie", "kirja", "joki " * 15]
    store = TokenStore(tokenizer, texts, 17)  # at most w + 1 = 17 tokens
    assert store.lengths().max() == 17
    torch.testing.assert_close(torch.from_numpy(embed(Encoder(long, "mean"), store, batch_size=2)),
                               torch.from_numpy(embed(short, store, batch_size=2)), rtol=0, atol=1e-5)


def test_embedding_a_longformer_equals_sentence_transformers_and_pads_nothing_to_the_window(tiny_model, tmp_path,
                                                                                         monkeypatch):
    from sentence_transformers import SentenceTransformer
    from transformers.models.longformer import modeling_longformer

    from common.models.longformer import convert_to_longformer
    from common.models.saving import save_model
    from conftest import corpus_text
    long, tokenizer = convert_to_longformer(str(tiny_model), max_length=512, window=16)
    save_model(Encoder(long, "mean"), tokenizer, str(tmp_path / "long"), max_length=512)
    said = []
    monkeypatch.setattr(modeling_longformer.logger, "warning_once", lambda message, *a: said.append(message))
    texts = corpus_text(5, 12) + [" ".join(corpus_text(6, 30)), "kirja"]  # 3 to 500 tokens
    encoder, tok, settings = load_encoder(str(tmp_path / "long"))
    store = TokenStore(tok, texts, settings["max_length"])
    assert store.lengths().max() > 300 and store.lengths().min() <= 9
    ours = embed(encoder, store, batch_size=4)
    assert said == []
    theirs = SentenceTransformer(str(tmp_path / "long"), device="cpu").encode(texts, batch_size=4)
    assert any("padded to be a multiple of `config.attention_window`" in m for m in said)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)


def test_an_encoder_freezes_exactly_the_parameters_no_gradient_reaches_in_a_longformer_without_global_tokens():
    model = tiny_longformer().train()
    ids, mask = padded([5, 12, 30])
    S.hidden_states(model, ids, mask).sum().backward()
    unused = {name for name, p in model.named_parameters() if p.grad is None}
    assert {name for name in unused if not name.startswith("pooler.")} == {
        f"encoder.layer.{i}.attention.self.{kind}_global.{part}" for i in range(2)
        for kind in ("query", "key", "value") for part in ("weight", "bias")}
    Encoder(model)  # what DDP on several processes needs: every trainable parameter takes part in each step
    assert {name for name, p in model.named_parameters() if not p.requires_grad} == unused
