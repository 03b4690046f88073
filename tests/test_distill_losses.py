"""Distillation's losses (common/distill/) against independent computations: the structural losses
(``structural.py``) by hand, their λ/mask weighting (``combine``), SoftCCA (``softcca.py``) against NumPy over
several steps and on two processes against one, its projection heads, and each loss computed in float32 from
half-precision inputs."""

import re

import numpy as np
import pytest
import torch

from test_losses import HALF, check, cos, halves

from common.io import InputError
from common.train.objectives.distill import combine
from common.distill.softcca import SoftCCA, projection
from common.distill.structural import structural_loss


# -- structural_loss -----------------------------------------------------------------------------------------------

Y = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])


T = torch.tensor([[1.0, 1.0], [0.0, 1.0], [2.0, 0.0]])


ALL = torch.tensor([True, True, True])


def test_cos_and_mse_compare_each_document_with_its_own_teacher_vector():
    r2 = 2 ** 0.5
    assert structural_loss(Y, T, ALL, "cos").tolist() == pytest.approx([1 - 1 / r2, 0.0, 1 - 1 / r2])
    assert structural_loss(Y, T, ALL, "mse").tolist() == pytest.approx([0.5, 0.5, 1.0])


def test_max_margin_subtracts_gamma_times_the_mean_distance_to_the_other_teacher_vectors():
    mse = lambda a, b: float(((np.array(a) - np.array(b)) ** 2).mean())  # noqa: E731
    y, t = Y.tolist(), T.tolist()
    expected = [mse(y[i], t[i]) - 0.5 * np.mean([mse(y[i], t[j]) for j in range(3) if j != i]) for i in range(3)]
    assert structural_loss(Y, T, ALL, "mm-mse", gamma=0.5).tolist() == pytest.approx(expected)
    cos = lambda a, b: 1 - float(np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b))  # noqa: E731
    expected = [cos(y[i], t[i]) - 1.5 * np.mean([cos(y[i], t[j]) for j in range(3) if j != i]) for i in range(3)]
    assert structural_loss(Y, T, ALL, "mm-cos", gamma=1.5).tolist() == pytest.approx(expected)


def test_max_margin_mse_at_gamma_one_is_linear_in_the_student_vector():
    torch.manual_seed(0)
    y, t = torch.randn(5, 4), torch.randn(5, 4)
    others = (t.sum(0) - t) / 4
    # the quadratic terms cancel: (‖t_i‖² − mean_j ‖t_j‖²)/d − 2·y·(t_i − mean_j t_j)/d
    expected = ((t ** 2).sum(1) - ((t ** 2).sum(1).sum() - (t ** 2).sum(1)) / 4 - 2 * (y * (t - others)).sum(1)) / 4
    torch.testing.assert_close(structural_loss(y, t, torch.ones(5, dtype=torch.bool), "mm-mse"), expected)


def test_masked_documents_get_no_structural_loss_and_are_no_ones_negative():
    mask = torch.tensor([True, False, True])
    base = structural_loss(Y, T, mask, "mm-mse")
    moved = T.clone()
    moved[1] = 100.0
    assert base[1] == 0 and torch.equal(structural_loss(Y, moved, mask, "mm-mse"), base)
    kept = torch.tensor([True, False, True])
    torch.testing.assert_close(base[kept], structural_loss(Y[kept], T[kept], torch.ones(2, dtype=torch.bool),
                                                           "mm-mse"))
    alone = torch.tensor([False, True, False])  # one kept document: no negatives
    assert structural_loss(Y, T, alone, "mm-mse").tolist() == pytest.approx([0.0, 0.5, 0.0])


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


# -- combine: the structural and contextual losses weighted --------------------------------------------------------

def test_lambda_weights_short_documents_and_long_ones_learn_only_from_the_contextual_loss():
    s, c, mask = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 20.0, 30.0]), torch.tensor([True, False, True])
    assert combine(s, c, mask, 0.5).tolist() == [5.5, 20.0, 16.5]
    assert combine(s, c, mask, 0.5, no_weighting=True).tolist() == [11.0, 20.0, 33.0]
    assert combine(s, None, mask, 1.0).tolist() == [1.0, 2.0, 3.0]


def test_lambda_zero_sends_gradient_only_through_the_contextual_loss():
    torch.manual_seed(0)
    y = torch.randn(4, 3, requires_grad=True)
    t, context = torch.randn(4, 3), torch.randn(4, 3)
    head = SoftCCA(3)
    loss = combine(structural_loss(y, t, torch.ones(4, dtype=torch.bool), "cos"), head(y, context),
                   torch.ones(4, dtype=torch.bool), 0.0).mean()
    (grad,) = torch.autograd.grad(loss, y)
    (only_contextual,) = torch.autograd.grad(SoftCCA(3)(y, context).mean(), y)
    torch.testing.assert_close(grad, only_contextual)


# -- SoftCCA and its projection heads ------------------------------------------------------------------------------

def _numpy_sdl(z, running, norm, beta, bn_mean, bn_var, training):
    """One SDL step in NumPy: batch norm (batch statistics in training, running ones in evaluation), the running
    covariance and its normaliser, the mean absolute off-diagonal."""
    if training:
        mean, var = z.mean(0), z.var(0)
        bn_mean, bn_var = 0.9 * bn_mean + 0.1 * mean, 0.9 * bn_var + 0.1 * z.var(0, ddof=1)
    else:
        mean, var = bn_mean, bn_var
    zh = (z - mean) / np.sqrt(var + 1e-5)
    phi = beta * running + zh.T @ zh / (len(z) - 1)
    n = beta * norm + 1
    a = np.abs(phi / n)
    sdl = (a.sum() - np.trace(a)) / (a.size - len(a))
    return sdl, (phi, n, bn_mean, bn_var) if training else (running, norm, bn_mean, bn_var)


def test_softcca_equals_numpy_over_steps_and_is_frozen_in_evaluation():
    rng = np.random.default_rng(0)
    head = SoftCCA(3, beta=0.95, delta=0.03)
    state = {side: (np.zeros((3, 3)), 0.0, np.zeros(3), np.ones(3)) for side in ("s", "c")}
    for step in range(4):
        training = step < 3
        head.train(training)
        zs, zc = rng.normal(size=(6, 3)), rng.normal(size=(6, 3)) * 2 + 1
        sdl = {}
        for side, z in (("s", zs), ("c", zc)):
            sdl[side], state[side] = _numpy_sdl(z, *state[side][:2], 0.95, *state[side][2:], training)
        expected = ((zs - zc) ** 2).mean(1) + 0.03 * (sdl["s"] + sdl["c"])
        got = head(torch.tensor(zs, dtype=torch.float32), torch.tensor(zc, dtype=torch.float32))
        np.testing.assert_allclose(got.detach().numpy(), expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(head.student.running.numpy(), state["s"][0], rtol=1e-5, atol=1e-6)
        assert head.student.norm.item() == pytest.approx(state["s"][1])
    assert head.student.norm.item() == pytest.approx(1 + 0.95 + 0.95 ** 2)  # three training steps, not four


def test_sdl_is_zero_for_decorrelated_views():
    z = torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
    head = SoftCCA(2)
    assert head.student(z).item() == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("dtype", HALF)
def test_softcca_of_half_projections_is_the_float32_loss(dtype):
    z_s, z_c = (x.to(dtype) for x in halves(8, 6, n=2))
    got = SoftCCA(6)(z_s, z_c)
    expected = SoftCCA(6)(z_s.float(), z_c.float())
    check(got, expected)
    # its L2 part, independently: the per-document mean squared difference
    sdl = SoftCCA(6, delta=0.0)(z_s, z_c)
    check(sdl, (z_s.float() - z_c.float()).pow(2).mean(1))


def _softcca_worker(rank, world, store, shards, out):
    import os

    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    head = SoftCCA(3)
    losses = [head(zs[rank], zc[rank]) for zs, zc in shards]
    torch.save({"losses": torch.stack(losses), "state": head.state_dict()}, os.path.join(out, f"softcca_{rank}.pt"))
    dist.barrier()  # neither process tears gloo down while the other is still in a collective
    dist.destroy_process_group()
    os._exit(0)  # past the results: skip interpreter teardown, where gloo's threads can abort the process


def test_softcca_on_two_processes_keeps_the_running_statistics_of_the_global_batch(tmp_path):
    torch.manual_seed(0)
    steps = [(torch.randn(8, 3), torch.randn(8, 3)) for _ in range(2)]
    shards = [(zs.chunk(2), zc.chunk(2)) for zs, zc in steps]
    torch.multiprocessing.spawn(_softcca_worker, args=(2, str(tmp_path / "store"), shards, str(tmp_path)), nprocs=2)
    single = SoftCCA(3)
    expected = torch.stack([single(zs, zc) for zs, zc in steps])
    results = [torch.load(tmp_path / f"softcca_{r}.pt") for r in range(2)]
    torch.testing.assert_close(torch.cat([r["losses"] for r in results], dim=1), expected)
    for r in results:
        for key, value in single.state_dict().items():
            torch.testing.assert_close(r["state"][key], value)


def test_projection_specs_build_linear_blocks_with_relu_where_marked():
    module, size = projection("8(relu)x16(relu)x4", 3)
    assert size == 4 and [type(m).__name__ for m in module] == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    assert [m.out_features for m in module if hasattr(m, "out_features")] == [8, 16, 4]
    identity, size = projection("", 7)
    assert size == 7 and isinstance(identity, torch.nn.Identity)


def test_a_projection_larger_than_the_machine_is_refused_before_it_is_allocated():
    from common.distill.softcca import projection
    with pytest.raises(InputError) as e:
        projection("65536x65536x65536", 768)
    assert re.fullmatch(r"projection '65536x65536x65536': needs about [\d,.]+ GiB, more than this machine's "
                        r"[\d,.]+ GiB", str(e.value)), str(e.value)
