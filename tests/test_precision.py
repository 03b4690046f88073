"""Precision (common/models/precision.py): a model loaded in bfloat16 pools float32 vectors, a loss wrapped in
``in_fp32`` computes in float32 under autocast, and a run says which precision it trains under. Each loss computing
in float32 from half-precision inputs: test_losses.py and test_distill_losses.py."""

from types import SimpleNamespace

import pytest
import torch

from conftest import run_main
from common.models.precision import in_fp32


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


def test_in_fp32_computes_a_loss_head_in_float32_under_bf16_autocast():
    @in_fp32
    def logsumexp(x):
        return torch.logsumexp(x @ x.T * 20, dim=1)

    x = torch.randn(16, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = logsumexp(x.bfloat16())
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, torch.logsumexp(x.bfloat16().float() @ x.bfloat16().float().T * 20, dim=1))


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
    proc = run_main("03_train.py", "--objective", "triplet", "--data", tiny_data, "--model", tiny_model,
                    "--out", tmp_path / "run", "--max-steps", "1", "--batch-size", "4", "--checkpoint-every", "0")
    assert proc.stdout.count("precision: fp32 on cpu\n") == 1
