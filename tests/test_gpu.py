"""On a CUDA device (``pytest -m gpu``; skipped without one): every objective and 04 train a few steps under fp16
and bf16 mixed precision with a finite, falling loss and a saved model that holds the trained float32 weights; a run
resumed on the GPU ends where the uninterrupted one does; 05's GPU vectors (bf16 autocast) stay close to the CPU's
float32 ones."""

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import ENV, read_jsonl, run_script

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

PRECISIONS = ("fp16", "bf16")
STEPS = ["--max-steps", "12", "--lr", "5e-4", "--warmup", "0", "--log-every", "1", "--eval-every", "0",
         "--checkpoint-every", "6"]


def in_precision(precision):
    return dict(ENV, ACCELERATE_MIXED_PRECISION=precision)


def train(script, args, precision):
    import subprocess
    import sys
    from conftest import ROOT
    proc = subprocess.run([sys.executable, f"{ROOT}/{script}", *map(str, args)], cwd=ROOT,
                          env=in_precision(precision), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def training_losses(run):
    return [r["loss"] for r in read_jsonl(run / "log.jsonl") if "loss" in r]


def check_run(run, proc, precision):
    """Said its precision, a finite loss that fell, and RUN/model holds the last checkpoint's float32 weights."""
    assert f"precision: {precision} mixed precision on cuda" in proc.stdout
    values = training_losses(run)
    assert len(values) == 12 and np.isfinite(values).all()
    assert np.mean(values[-3:]) < np.mean(values[:3])
    saved = load_file(str(run / "model" / "model.safetensors"))
    checkpoint = load_file(str(run / "checkpoints" / "step_12" / "model.safetensors"))
    for key, value in saved.items():
        trained = next(checkpoint[k] for k in checkpoint if k.endswith(key))
        assert value.dtype == torch.float32 and torch.equal(value, trained), key


@pytest.fixture(scope="module")
def arxiv_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("arxiv")
    run_script("01_extract.py", "arxiv", "--input", "data/arxiv-sample-1000.json.gz", "--out", root / "arxiv")
    run_script("02_build_graph.py", "retrieval", "--articles", root / "arxiv" / "articles.jsonl", "--out",
               root / "data")
    return root / "data"


@pytest.fixture(scope="module")
def keysent_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("keysent")
    run_script("01_extract.py", "sentences", "--input", "data/keysent-demo.jsonl", "--out", root)
    run_script("02_build_graph.py", "sentences", "--sentences", root / "sentences.jsonl", "--out", root / "data")
    return root / "data"


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("objective", ["triplet", "contrastive", "cosine", "mnrl", "mlm", "mlm-nsp"])
def test_each_objective_trains_under_mixed_precision_on_the_gpu(objective, precision, tiny_model, tiny_data,
                                                                arxiv_data, keysent_data, tmp_path):
    data = {"triplet": tiny_data, "contrastive": keysent_data, "cosine": keysent_data}.get(objective, arxiv_data)
    extra = {"mnrl": ["--batch-size", "16", "--max-length", "64"], "mlm": ["--max-length", "64"],
             "mlm-nsp": ["--max-length", "64", "--nsp"],
             "triplet": ["--batch-size", "8"]}.get(objective, ["--batch-size", "16"])
    run = tmp_path / "run"
    proc = train("03_train.py", ["--objective", objective.split("-")[0], "--data", data, "--model", tiny_model,
                                 "--out", run, *STEPS, *extra], precision)
    check_run(run, proc, precision)


@pytest.fixture(scope="module")
def distill_inputs(tiny_model, tiny_data, tmp_path_factory):
    """The tiny model as a Longformer and random teacher vectors (both losses on: every other document is short
    enough for the structural one)."""
    from common.data.docs_jsonl import Documents
    from common.outdir.folders import Outputs
    root = tmp_path_factory.mktemp("distill")
    run_script("04_distill.py", "convert-long", "--model", tiny_model, "--out", root / "student", "--max-length", "128",
               "--window", "16")
    ids = Documents(tiny_data).ids
    rng = np.random.default_rng(0)
    vectors = {"sbert": rng.standard_normal((len(ids), 32)).astype(np.float32),
               "pv": rng.standard_normal((len(ids), 16)).astype(np.float32),
               "lengths": np.where(np.arange(len(ids)) % 2 == 0, 10, 500).astype(np.int64)}
    with Outputs(root / "teach") as out:
        for name, array in vectors.items():
            with out.open(f"{name}.npy", "wb") as f:
                np.save(f, array)
            with out.open(f"{name}.ids.txt") as f:
                f.writelines(f"{i}\n" for i in ids)
    return root


@pytest.mark.parametrize("precision", PRECISIONS)
def test_distillation_trains_under_mixed_precision_on_the_gpu(precision, tiny_data, distill_inputs, tmp_path):
    run = tmp_path / "run"
    proc = train("04_distill.py", ["train", "--data", tiny_data, "--teachers", distill_inputs / "teach", "--model",
                                   distill_inputs / "student", "--out", run, "--preset", "cosine-masked",
                                   "--student-projection", "32(relu)x16", "--max-structural-length", "100",
                                   "--batch-size", "4", "--grad-accum", "1", "--max-length", "128",
                                   "--gradient-checkpointing", *STEPS], precision)
    check_run(run, proc, precision)


# On a GPU, resuming need not be bit-identical: the embedding's backward and some reductions add with atomics, in
# an order that may vary from run to run, so two uninterrupted runs may already differ in the last bits. The
# tolerance allows for that noise after 12 steps at lr 5e-4 (float32 master weights within 1e-4, losses within 1e-3
# relative); it is a bound chosen ahead of a device run, not a measured spread.
@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_run_resumed_on_the_gpu_ends_where_the_uninterrupted_one_does(precision, tiny_model, tiny_data, tmp_path):
    args = ["--objective", "triplet", "--data", tiny_data, "--model", tiny_model, "--batch-size", "8", *STEPS]
    whole = tmp_path / "whole"
    train("03_train.py", [*args, "--out", whole], precision)
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copy(whole / "run.json", resumed / "run.json")
    shutil.copytree(whole / "checkpoints" / "step_6", resumed / "checkpoints" / "step_6")
    with open(resumed / "log.jsonl", "w", encoding="utf-8") as f:
        lines = json.load(open(whole / "checkpoints" / "step_6" / "trainer_state.json"))["log_lines"]
        f.writelines(json.dumps(r) + "\n" for r in read_jsonl(whole / "log.jsonl")[:lines])
    proc = train("03_train.py", [*args, "--out", resumed], precision)
    assert "resuming from" in proc.stdout
    a, b = (load_file(str(run / "model" / "model.safetensors")) for run in (whole, resumed))
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=1e-4)
    np.testing.assert_allclose(training_losses(resumed), training_losses(whole), rtol=1e-3)


def test_gpu_vectors_of_05_stay_close_to_the_cpu_float32_ones(tiny_model, tiny_data):
    """``embed`` on the GPU runs under bf16 autocast (05's default there) and returns float32; against the CPU's
    float32 vectors of the same texts every cosine is at least 0.995 and their mean at least 0.999 (bfloat16 keeps
    8 significant bits in each product; pooling, normalising and the vectors written are float32)."""
    from common.data.docs_jsonl import Documents
    from common.models.inference import embed
    from common.models.loading import load_encoder
    from common.models.tokens import TokenStore
    encoder, tokenizer, settings = load_encoder(tiny_model, pooling="cls", max_length=64, say=lambda *a: None)
    store = TokenStore(tokenizer, Documents(tiny_data).inputs(tokenizer.sep_token), settings["max_length"])
    cpu = embed(encoder, store)
    gpu = embed(encoder.cuda(), store)
    assert gpu.dtype == np.float32
    cosines = (cpu * gpu).sum(1) / np.linalg.norm(cpu, axis=1) / np.linalg.norm(gpu, axis=1)
    assert cosines.min() >= 0.995 and cosines.mean() >= 0.999
