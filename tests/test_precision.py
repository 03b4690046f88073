"""Precision: every loss computes in float32 whatever precision its inputs come in (half-precision embeddings from a
GPU's autocast, or a model loaded in bfloat16), pooled vectors are float32, and a run says which precision it
trains under."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from conftest import run_script
from common.train import losses
from common.distill.softcca import SoftCCA
from common.distill.structural import structural_loss

HALF = (torch.bfloat16, torch.float16)


def halves(*shape, n=3, seed=0):
    """``n`` random tensors in bfloat16 (exactly representable in float16 too after the cast below)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g).to(torch.bfloat16) for _ in range(n)]


def cos(u, v):
    return (u * v).sum(-1) / (u.norm(dim=-1) * v.norm(dim=-1))


def check(got, expected):
    """A loss on half-precision inputs is the float32 loss of the same (up-cast) values: float32 and within
    float32 rounding, where a half-precision computation would be off by about 1e-2 (bfloat16's 8 bits)."""
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", HALF)
def test_triplet_margin_of_half_embeddings_is_the_float32_margin(dtype):
    q, p, n = (x.to(dtype) for x in halves(16, 64))
    qf, pf, nf = q.float(), p.float(), n.float()

    def distance(a, b):  # torch's pairwise_distance adds its epsilon to the difference
        return (a - b + 1e-6).pow(2).sum(-1).sqrt()
    check(losses.triplet_margin(q, p, n, 1.0), F.relu(distance(qf, pf) - distance(qf, nf) + 1.0))


@pytest.mark.parametrize("dtype", HALF)
def test_cosine_losses_of_half_embeddings_are_the_float32_losses(dtype):
    u, v = (x.to(dtype) for x in halves(16, 64, n=2))
    labels = torch.tensor([0, 1] * 8)
    d = 1 - cos(u.float(), v.float())
    check(losses.contrastive_cosine(u, v, labels, 0.5),
          0.5 * (labels * d.pow(2) + (1 - labels) * F.relu(0.5 - d).pow(2)))
    check(losses.cosine_mse(u, v, labels), (cos(u.float(), v.float()) - labels).pow(2))


@pytest.mark.parametrize("dtype", HALF)
def test_mnrl_of_half_embeddings_is_the_float32_cross_entropy(dtype):
    q, d = (x.to(dtype) for x in halves(8, 32, n=2))
    scores = 20 * cos(q.float()[:, None, :], d.float()[None, :, :])
    check(losses.multiple_negatives_ranking(q, d), torch.logsumexp(scores, 1) - scores.diagonal())


@pytest.mark.parametrize("dtype", HALF)
def test_masked_lm_of_half_logits_is_the_float32_cross_entropy(dtype):
    logits, = (x.to(dtype) for x in halves(12, 50, n=1))
    labels = torch.arange(12) * 4
    up = logits.float()
    check(losses.masked_lm(logits, labels), torch.logsumexp(up, 1) - up[torch.arange(12), labels])


@pytest.mark.parametrize("dtype", HALF)
def test_structural_losses_of_half_embeddings_are_the_float32_losses(dtype):
    y, t = (x.to(dtype) for x in halves(6, 32, n=2))
    mask = torch.tensor([True, True, False, True, True, True])
    yf, tf = y.float(), t.float()
    expected = torch.where(mask, 1 - cos(yf, tf), torch.zeros(6))
    check(structural_loss(y, t, mask, "cos"), expected)
    k = yf[mask][:, None, :] - tf[mask][None, :, :]
    pairs = k.pow(2).mean(-1)
    kept = pairs.diagonal() - (pairs.sum(1) - pairs.diagonal()) / 4
    check(structural_loss(y, t, mask, "mm-mse", 1.0), torch.zeros(6).masked_scatter(mask, kept))


@pytest.mark.parametrize("dtype", HALF)
def test_softcca_of_half_projections_is_the_float32_loss(dtype):
    z_s, z_c = (x.to(dtype) for x in halves(8, 6, n=2))
    got = SoftCCA(6)(z_s, z_c)
    expected = SoftCCA(6)(z_s.float(), z_c.float())
    check(got, expected)
    # its L2 part, independently: the per-document mean squared difference
    sdl = SoftCCA(6, delta=0.0)(z_s, z_c)
    check(sdl, (z_s.float() - z_c.float()).pow(2).mean(1))


def test_losses_leave_autocast_and_compute_in_float32():
    q, p, n = (x.float() for x in halves(16, 64))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = losses.triplet_margin(q, p, n)
        scores = losses.multiple_negatives_ranking(q, p)
    check(inside, losses.triplet_margin(q, p, n))
    check(scores, losses.multiple_negatives_ranking(q, p))


def test_a_half_precision_model_pools_float32_vectors(tiny_model):
    from transformers import AutoModel
    from common.models.encoder import Encoder
    ids = torch.tensor([[2, 40, 41, 42, 3], [2, 50, 3, 0, 0]])
    mask = (ids > 0).long()
    for pooling in ("cls", "mean"):
        half = Encoder(AutoModel.from_pretrained(tiny_model).to(torch.bfloat16).eval(), pooling, normalize=True)
        with torch.no_grad():
            got = half.embed(ids, mask)
            hidden = half.transformer(input_ids=ids, attention_mask=mask).last_hidden_state.float()
        assert got.dtype == torch.float32
        pooled = hidden[:, 0] if pooling == "cls" else (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        torch.testing.assert_close(got, pooled / pooled.norm(dim=1, keepdim=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode, expected", [
    ("no", "precision: fp32 on cpu"),
    ("bf16", "precision: bf16 mixed precision on cpu (autocast; weights, optimizer state, pooled vectors and "
             "losses in float32)"),
    ("fp16", "precision: fp16 mixed precision on cpu (autocast, dynamic loss scaling; weights, optimizer state, "
             "pooled vectors and losses in float32)"),
])
def test_the_precision_line_names_what_accelerate_resolved(mode, expected):
    from common.models.precision import training_line as precision_line
    assert precision_line(SimpleNamespace(device=torch.device("cpu"), mixed_precision=mode)) == expected


def test_a_training_run_says_its_precision_at_start(tiny_model, tiny_data, tmp_path):
    proc = run_script("03_train.py", "--objective", "triplet", "--data", tiny_data, "--model", tiny_model,
                      "--out", tmp_path / "run", "--max-steps", "1", "--batch-size", "4", "--checkpoint-every", "0")
    assert proc.stdout.count("precision: fp32 on cpu\n") == 1
