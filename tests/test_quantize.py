"""int8 embedding on a CPU (common/models/quantize.py): the copy runs through ``embed``, the model given is left as
it was, every Linear layer is replaced, the vectors stay within a stated cosine of float32, and ``mean_cosine``."""

import copy

import numpy as np
import pytest
import torch
from torch import nn

from common.models.inference import embed
from common.models.loading import load_encoder
from common.models.quantize import FullRangeLinear, is_quantized_linear, mean_cosine, quantize_int8
from common.models.tokens import TokenStore


def _store(tokenizer, n=200):
    from conftest import corpus_text
    return TokenStore(tokenizer, corpus_text(5, n), 64)


def _cosines(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_the_int8_copy_runs_through_embed_and_stays_within_the_stated_cosine_of_fp32(tiny_model, pooling):
    encoder, tokenizer, _ = load_encoder(str(tiny_model), pooling=pooling, normalize=False)
    store = _store(tokenizer)
    fp32 = embed(encoder, store, batch_size=16)
    int8 = embed(quantize_int8(encoder), store, batch_size=16)
    assert int8.shape == fp32.shape and int8.dtype == np.float32 and np.isfinite(int8).all()
    assert np.abs(int8 - fp32).max() > 0  # the copy computes in int8: not the float32 model again
    # measured 1 - 2e-8 (mean pooling; the tiny model's Linear layers add little to its embeddings, see below)
    assert mean_cosine(int8, fp32) >= 0.9999
    assert _cosines(int8, fp32).min() >= 0.999


def test_where_the_linear_layers_matter_int8_stays_close_while_dropping_one_layer_does_not(tiny_model):
    """The tiny model's Linear weights ×10, so that its embeddings depend on them: dropping one feed-forward output
    layer then moves the vectors to a mean cosine of 0.70 (measured), while int8 stays above 0.999 (measured
    0.99992 with one scale per row and 8-bit activations, 0.99982 with one scale per tensor and 7 bits)."""
    encoder, tokenizer, _ = load_encoder(str(tiny_model), pooling="mean", normalize=False)
    with torch.no_grad():
        for module in encoder.modules():
            if isinstance(module, nn.Linear):
                module.weight.mul_(10)
    store = _store(tokenizer)
    fp32 = embed(encoder, store)
    dropped = copy.deepcopy(encoder)
    with torch.no_grad():
        dropped.transformer.encoder.layer[1].output.dense.weight.zero_()
    assert mean_cosine(embed(dropped, store), fp32) < 0.9
    for per_channel, full_range in ((True, None), (True, False), (False, False)):
        int8 = embed(quantize_int8(encoder, per_channel=per_channel, full_range=full_range), store)
        assert mean_cosine(int8, fp32) >= 0.999, (per_channel, full_range)


def test_quantising_is_opt_in_the_model_given_is_left_as_it_was(tiny_model):
    encoder, tokenizer, _ = load_encoder(str(tiny_model), pooling="mean")
    encoder.train()
    store = _store(tokenizer, 40)
    before_state = {k: v.clone() for k, v in encoder.state_dict().items()}
    before_types = {name: type(m) for name, m in encoder.named_modules()}
    int8 = quantize_int8(encoder)
    assert int8 is not encoder and encoder.training and not int8.training
    assert {name: type(m) for name, m in encoder.named_modules()} == before_types
    assert not any(is_quantized_linear(m) for m in encoder.modules())
    after = encoder.state_dict()
    assert after.keys() == before_state.keys()
    assert all(torch.equal(after[k], before_state[k]) for k in before_state)
    # nothing is quantised unless asked: loading and embedding give float32 Linear layers and float32 vectors
    again, _, _ = load_encoder(str(tiny_model), pooling="mean")
    assert all(type(m) is nn.Linear for m in again.modules() if isinstance(m, nn.Linear))
    np.testing.assert_array_equal(embed(encoder, store), embed(again, store))


def test_every_linear_layer_becomes_a_dynamic_int8_one_and_nothing_else_changes(tiny_model):
    encoder, _, _ = load_encoder(str(tiny_model), pooling="mean")
    linear = {name for name, m in encoder.named_modules() if isinstance(m, nn.Linear)}
    assert len(linear) == 2 * 6 + 1  # per layer: query, key, value, attention output, intermediate, output; pooler
    int8 = quantize_int8(encoder, full_range=True)
    modules = dict(int8.named_modules())
    assert {name for name, m in modules.items() if is_quantized_linear(m)} == linear
    assert not any(type(m) is nn.Linear for m in modules.values())
    for name in linear:
        layer = modules[name]
        assert type(layer) is FullRangeLinear
        assert layer.weight().dtype == torch.qint8 and layer.weight().qscheme() == torch.per_channel_affine
    assert type(int8.transformer.get_input_embeddings()) is nn.Embedding  # embeddings stay float32
    assert int8.transformer.get_input_embeddings().weight.dtype == torch.float32
    assert (int8.pooling, int8.normalize, int8.dimension) == (encoder.pooling, encoder.normalize, encoder.dimension)
    per_tensor = quantize_int8(encoder, per_channel=False, full_range=False)
    layer = dict(per_tensor.named_modules())["transformer.encoder.layer.0.intermediate.dense"]
    assert type(layer) is not FullRangeLinear and layer.weight().qscheme() == torch.per_tensor_affine


def test_a_model_off_the_cpu_is_a_value_error(tiny_model):
    encoder, _, _ = load_encoder(str(tiny_model), pooling="mean")
    with pytest.raises(ValueError, match="CPU only.*meta"):
        quantize_int8(encoder.to("meta"))  # stands for a GPU here: no memory, no CUDA needed
    with pytest.raises(ValueError, match="no nn.Linear"):
        quantize_int8(nn.Embedding(3, 2))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_model_on_a_gpu_is_a_value_error(tiny_model):
    encoder, _, _ = load_encoder(str(tiny_model), pooling="mean")
    with pytest.raises(ValueError, match="CPU only.*cuda"):
        quantize_int8(encoder.cuda())


def test_mean_cosine_is_the_mean_of_the_row_cosines_in_any_block_size(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.normal(size=(1000, 24)).astype(np.float32)
    b = (a + rng.normal(scale=0.5, size=a.shape)).astype(np.float32)
    x, y = a.astype(np.float64), b.astype(np.float64)  # mean_cosine computes in float64
    direct = float(np.mean(np.sum(x * y, 1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))))
    for block in (1, 7, 999, 1000, 65536):
        assert mean_cosine(a, b, block=block) == pytest.approx(direct, rel=1e-9, abs=1e-12)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    mapped = [np.load(tmp_path / f"{n}.npy", mmap_mode="r") for n in "ab"]
    assert mean_cosine(*mapped, block=64) == pytest.approx(direct, rel=1e-9)
    assert mean_cosine(a, a) == pytest.approx(1.0, abs=1e-12)
    assert mean_cosine(a, -a) == pytest.approx(-1.0, abs=1e-12)
    zero = a.copy()
    zero[0] = 0
    assert mean_cosine(zero, b) == pytest.approx((direct * 1000 - _cosines(x[:1], y[:1])[0]) / 1000, rel=1e-9)
    with pytest.raises(ValueError, match="shapes"):
        mean_cosine(a, b[:10])
    with pytest.raises(ValueError, match="no rows"):
        mean_cosine(a[:0], b[:0])
