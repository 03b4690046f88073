"""The training loop every objective shares (03_train.py's train): a registered objective's head and buffers,
schedules, gradient checkpointing, length buckets and their sampler, the differentiable all-gather, and 03's checks
of its command line before anything loads. The run folder (resume, logs, checkpoints): test_run_folder.py."""

import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import ENV, ROOT, read_jsonl, script_module, unfinish

from common.io import InputError
from common.train.batches import BucketBatchSampler

def test_a_registered_objective_trains_its_head_and_buffers_resumes_bit_identically_and_saves_them(
        toy, toy_run, tiny_model, tiny_data, tmp_path):
    ref, counts = toy_run
    assert counts["steps"] == 20  # 42 rows, batch 4, drop_last: 10 full batches an epoch, 2 epochs
    heads = load_file(str(ref / "model" / "heads.safetensors"))
    assert set(heads) == {"head.weight", "head.bias", "running_mean"} and heads["running_mean"].abs().sum() > 0
    early = load_file(str(ref / "checkpoints" / "step_5" / "model.safetensors"))  # the whole module, head included
    assert not torch.equal(early["head.weight"], heads["head.weight"])  # the optimizer moved the head
    from huggingface_hub import ModelCard
    card = ModelCard.load(str(ref / "model" / "README.md"))  # the objective's own card prose
    assert card.data.tags[-1] == "loss:CrossEntropyLoss" and "# ref/model: toy classification objective" in card.text

    out = tmp_path / "run"
    shutil.copytree(ref, out)
    unfinish(out)
    for step in (15, 20):
        shutil.rmtree(out / "checkpoints" / f"step_{step}")
    toy(tiny_data, tiny_model, out)  # resumes from step 10
    for name in ("heads.safetensors", "model.safetensors"):
        a, b = load_file(str(ref / "model" / name)), load_file(str(out / "model" / name))
        assert all(torch.equal(a[k], b[k]) for k in a)
    def log(run):
        return [{k: v for k, v in r.items() if k != "steps_per_s"} for r in read_jsonl(run / "log.jsonl")]
    assert log(out) == log(ref)


def test_cosine_schedule_warms_up_then_follows_half_a_cosine(toy, tiny_model, tiny_data, tmp_path):
    toy(tiny_data, tiny_model, tmp_path / "run", "--schedule", "cosine", "--checkpoint-every", "0", "--epochs", "1",
        "--warmup", "2")
    lrs = [r["lr"] for r in read_jsonl(tmp_path / "run" / "log.jsonl") if "lr" in r]
    total, warmup = 10, 2
    for step, lr in enumerate(lrs, start=1):
        progress = (step - warmup) / (total - warmup)
        expected = step / warmup if step < warmup else 0.5 * (1 + math.cos(math.pi * progress))
        assert lr == pytest.approx(1e-3 * expected, rel=1e-9, abs=1e-15)


def test_gradient_checkpointing_changes_memory_not_the_result(toy, tiny_model, tiny_data, tmp_path):
    toy(tiny_data, tiny_model, tmp_path / "a", "--max-steps", "4", "--checkpoint-every", "0")
    toy(tiny_data, tiny_model, tmp_path / "b", "--max-steps", "4", "--checkpoint-every", "0",
        "--gradient-checkpointing")
    a, b = load_file(str(tmp_path / "a" / "model" / "model.safetensors")), \
        load_file(str(tmp_path / "b" / "model" / "model.safetensors"))
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)


def test_length_buckets_train_full_epochs(toy, tiny_model, tiny_data, tmp_path):
    counts = toy(tiny_data, tiny_model, tmp_path / "run", "--length-buckets", "3", "--checkpoint-every", "0",
                 "--epochs", "1")
    assert counts["steps"] == 10


def test_bucket_sampler_sorts_within_windows_covers_every_row_and_depends_on_seed_and_epoch():
    lengths = np.random.default_rng(0).integers(1, 500, size=103)
    sampler = BucketBatchSampler(lengths, batch_size=8, window=4, seed=7, drop_last=False)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 13
    assert sorted(i for b in batches for i in b) == list(range(103))
    order = np.random.default_rng([7, 0]).permutation(103)
    windows = [set(order[s:s + 32].tolist()) for s in range(0, 103, 32)]
    for b in batches:  # every batch comes from one window, longest first
        assert any(set(b) <= w for w in windows)
        assert list(lengths[b]) == sorted(lengths[b], reverse=True)
    assert batches == list(sampler)
    sampler.epoch = 1
    assert batches != list(sampler)
    dropped = BucketBatchSampler(lengths, batch_size=8, window=4, seed=7, drop_last=True)
    assert len(list(dropped)) == len(dropped) == 12 and all(len(b) == 8 for b in dropped)


def _gather_worker(rank, world, store, shards, out):
    import torch.distributed as dist

    from common.train.distributed import all_gather_with_grad
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    queries = shards[rank][0].clone().requires_grad_(True)
    docs = shards[rank][1].clone().requires_grad_(True)
    all_docs = all_gather_with_grad(docs)
    labels = torch.arange(len(queries)) + rank * len(queries)
    torch.nn.functional.cross_entropy(queries @ all_docs.T, labels).backward()
    torch.save({"q": queries.grad, "d": docs.grad}, os.path.join(out, f"grad_{rank}.pt"))
    dist.barrier()  # neither process tears gloo down while the other is still in a collective
    dist.destroy_process_group()
    os._exit(0)  # past the results: skip interpreter teardown, where gloo's threads can abort the process


def test_all_gather_with_grad_on_two_processes_equals_one_process_holding_both_shards(tmp_path):
    torch.manual_seed(0)
    queries, docs = torch.randn(6, 5), torch.randn(6, 5)
    shards = [(queries[:3], docs[:3]), (queries[3:], docs[3:])]
    # a file store rather than a TCP port: no race with other tests for a free port
    torch.multiprocessing.spawn(_gather_worker, args=(2, str(tmp_path / "store"), shards, str(tmp_path)), nprocs=2)
    q, d = queries.clone().requires_grad_(True), docs.clone().requires_grad_(True)
    torch.nn.functional.cross_entropy(q @ d.T, torch.arange(6)).backward()
    grads = [torch.load(tmp_path / f"grad_{r}.pt") for r in range(2)]
    # DDP averages parameter gradients over the 2 processes: the mean of the per-process losses' gradients
    torch.testing.assert_close(torch.cat([g["q"] for g in grads]) / 2, q.grad)
    torch.testing.assert_close(torch.cat([g["d"] for g in grads]) / 2, d.grad)


def test_a_bad_data_directory_fails_before_torch_is_imported(tmp_path):
    code = ("import runpy, sys\nsys.argv = ['03_train.py', '--data', 'nowhere', '--model', 'm', '--out', 'o']\n"
            "try:\n    runpy.run_path('03_train.py', run_name='__main__')\n"
            "except SystemExit as e:\n    print(e.code, 'torch' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=ENV, capture_output=True, text=True)
    assert proc.stdout.split() == ["2", "False"]
    assert proc.stderr.strip() == "error: nowhere: no such data directory"


@pytest.mark.parametrize("flag,value,expected", [
    ("--batch-size", "0", "argument --batch-size: 0: must be between 1 and 1,073,741,824"),
    ("--grad-accum", "0", "argument --grad-accum: 0: must be between 1 and 1,073,741,824"),
    ("--epochs", "0", "argument --epochs: 0: must be between 1 and 1,073,741,824"),
    ("--max-length", "0", "argument --max-length: 0: must be between 1 and 131,072"),
    ("--lr", "nan", "argument --lr: nan: must be a positive number"),
    ("--lr", "-1e-5", "argument --lr: -1e-5: must be a positive number"),
    ("--warmup", "-1", "argument --warmup: -1: must be a finite number of at least 0"),
    ("--warmup", "inf", "argument --warmup: inf: must be a finite number of at least 0"),
    ("--clip", "nan", "argument --clip: nan: must be a finite number of at least 0"),
    ("--weight-decay", "1e309", "argument --weight-decay: 1e309: must be a finite number of at least 0"),
])
def test_settings_that_cannot_train_are_refused_before_anything_loads(tiny_data, flag, value, expected, capsys):
    with pytest.raises(SystemExit) as e:
        script_module("03_train.py").parse_args(["--data", str(tiny_data), "--model", "nowhere", "--out", "o",
                                                 f"{flag}={value}"])
    assert e.value.code == 2 and capsys.readouterr().err == f"error: {expected}\n"


def test_chunk_tokens_is_refused_for_an_objective_whose_examples_are_not_independent(tiny_data):
    with pytest.raises(InputError) as e:
        script_module("03_train.py").parse_args(["--objective", "mlm", "--data", str(tiny_data), "--model",
                                                 "nowhere", "--out", "o", "--chunk-tokens", "512"])
    assert str(e.value) == ("--chunk-tokens 512: the mlm objective's loss is not a mean of independent per-example "
                            "losses, so a batch cannot be run in parts")
    args = script_module("03_train.py").parse_args(["--data", str(tiny_data), "--model", "m", "--out", "o",
                                                    "--chunk-tokens", "512"])
    assert args.chunk_tokens == 512
