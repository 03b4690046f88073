"""The training core every objective shares: registry, heads and buffers, schedules, samplers, precision helpers,
the differentiable all-gather and the exit-status contract."""

import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import ENV, ROOT, read_jsonl, script_module, train_in_process, unfinish

from common import cli
from common.io import InputError, Preempted
from common.train import objectives, run_folder
from common.train.batches import BucketBatchSampler

TOY = ["--log-every", "1", "--eval-every", "0", "--checkpoint-every", "5", "--keep", "10"]


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.syspath_prepend(os.path.dirname(__file__))
    monkeypatch.setitem(objectives.REGISTRY, "toy", objectives.Entry("toy_objective.ToyObjective", ("docs.jsonl",)))

    def train(data, model, out, *extra):
        argv = ["--objective", "toy", "--data", data, "--model", model, "--out", out, *TOY, *extra]
        return train_in_process(argv)
    return train


def test_a_registered_objective_trains_its_head_and_buffers_resumes_bit_identically_and_saves_them(
        toy, tiny_model, tiny_data, tmp_path):
    ref = tmp_path / "ref"
    counts = toy(tiny_data, tiny_model, ref)
    assert counts["steps"] == 20  # 42 rows, batch 4, drop_last: 10 full batches an epoch, 2 epochs
    heads = load_file(str(ref / "model" / "heads.safetensors"))
    assert set(heads) == {"head.weight", "head.bias", "running_mean"} and heads["running_mean"].abs().sum() > 0
    early = load_file(str(ref / "checkpoints" / "step_5" / "model.safetensors"))  # the whole module, head included
    assert not torch.equal(early["head.weight"], heads["head.weight"])  # the optimizer moved the head
    from huggingface_hub import ModelCard
    card = ModelCard.load(str(ref / "model" / "README.md"))  # an objective of no paper gets a card of its own name
    assert card.data.tags[-1] == "toy" and "# ref/model: `toy` objective" in card.text

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


def test_report_to_sends_every_log_record_to_the_trackers_and_the_run_draws_its_curves(
        toy, tiny_model, tiny_data, tmp_path, monkeypatch):
    from accelerate.tracking import GeneralTracker
    seen = []

    class Recording(GeneralTracker):
        name, requires_logging_directory, tracker = "recording", False, None

        def store_init_configuration(self, values):
            seen.append(("config", values))

        def log(self, values, step=None, **kwargs):
            seen.append((step, values))

    monkeypatch.setattr(run_folder, "trackers", lambda report_to: [Recording()] if report_to == "recording" else [])
    out = tmp_path / "run"
    toy(tiny_data, tiny_model, out, "--report-to", "recording", "--max-steps", "3", "--checkpoint-every", "0")
    log = read_jsonl(out / "log.jsonl")
    assert seen[0][0] == "config" and seen[0][1]["objective"] == "toy" and seen[0][1]["lr"] == 1e-3
    assert seen[1:] == [(r["step"], {k: v for k, v in r.items() if k != "step"}) for r in log]
    assert [r["step"] for r in log if "loss" in r] == [1, 2, 3]
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_to_names_installed_trackers_only():
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS, get_available_trackers
    assert run_folder.trackers("none") == [] and run_folder.trackers("all") == ["all"]
    with pytest.raises(InputError) as e:
        run_folder.trackers("nonesuch")
    assert str(e.value).startswith("--report-to nonesuch: not a tracker Accelerate knows (one of ")
    missing = sorted(set(LOGGER_TYPE_TO_CLASS) - {t.value for t in get_available_trackers()})
    if missing:
        with pytest.raises(InputError) as e:
            run_folder.trackers(missing[0])
        assert str(e.value) == f"--report-to {missing[0]}: not installed (pip install {missing[0].replace('_', '-')})"


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


def test_in_fp32_computes_a_loss_head_in_float32_under_bf16_autocast():
    from common.train.losses import in_fp32

    @in_fp32
    def logsumexp(x):
        return torch.logsumexp(x @ x.T * 20, dim=1)

    x = torch.randn(16, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = logsumexp(x.bfloat16())
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, torch.logsumexp(x.bfloat16().float() @ x.bfloat16().float().T * 20, dim=1))


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


def test_preemption_exits_143_and_bad_input_2():
    def preempted():
        raise Preempted(5)

    def bad():
        raise InputError("x.jsonl:3: bad")
    for main, status in ((preempted, 143), (bad, 2)):
        with pytest.raises(SystemExit) as e:
            cli.run(main)
        assert e.value.code == status


def test_a_bad_data_directory_fails_before_torch_is_imported(tmp_path):
    code = ("import runpy, sys\nsys.argv = ['03_train.py', '--data', 'nowhere', '--model', 'm', '--out', 'o']\n"
            "try:\n    runpy.run_path('03_train.py', run_name='__main__')\n"
            "except SystemExit as e:\n    print(e.code, 'torch' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=ENV, capture_output=True, text=True)
    assert proc.stdout.split() == ["2", "False"]
    assert proc.stderr.strip() == "error: nowhere: no such data directory"


def test_every_flag_is_either_result_or_speed(tiny_data):
    args = script_module("03_train.py").parse_args(["--data", str(tiny_data), "--model", "m", "--out", "o"])
    shared = set(vars(args)) - {"objective", "data", "out", "overwrite", "seeds", "margin"}
    assert shared == set(run_folder.RESULT_ARGS) | set(run_folder.SPEED_ARGS)
    assert not set(run_folder.RESULT_ARGS) & set(run_folder.SPEED_ARGS)


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


def _weights(run_dir):
    return [load_file(str(run_dir / "model" / name)) for name in ("model.safetensors", "heads.safetensors")]


def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(toy, tiny_model, tiny_data, tmp_path, capsys):
    ref = tmp_path / "ref"
    toy(tiny_data, tiny_model, ref)
    out = tmp_path / "run"
    shutil.copytree(ref, out)
    unfinish(out)
    shutil.rmtree(out / "checkpoints" / "step_20")
    (out / "checkpoints" / "step_15" / "model.safetensors").write_bytes(b"")  # e.g. a full disk
    toy(tiny_data, tiny_model, out)
    printed = capsys.readouterr().out
    assert "checkpoints/step_15 cannot be read" in printed and "resuming from" in printed and "step_10" in printed
    for a, b in zip(_weights(ref), _weights(out)):
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_rebuilt_data_directory_does_not_resume_an_old_run(toy, tiny_model, tiny_data, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    out = tmp_path / "run"
    toy(data, tiny_model, out, "--max-steps", "5")
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["args"]["seed"] += 1  # as if 02 had been run again with another seed
    (data / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"other settings \(data_content\)"):
        toy(data, tiny_model, out, "--max-steps", "5")


def test_a_run_folder_is_owned_foreign_folders_refused_and_a_run_killed_before_its_first_checkpoint_restarts_clean(
        toy, tiny_model, tiny_data, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not empty and not a run folder of this project"):
        toy(tiny_data, tiny_model, foreign, "--max-steps", "3")
    assert (foreign / "notes.txt").read_text() == "mine"
    ref, out = tmp_path / "ref", tmp_path / "run"
    toy(tiny_data, tiny_model, ref, "--max-steps", "3", "--checkpoint-every", "0")
    shutil.copytree(ref, out)  # a finished run without checkpoints stands for one killed before its first
    toy(tiny_data, tiny_model, out, "--max-steps", "3", "--checkpoint-every", "0")
    steps = [r["step"] for r in read_jsonl(out / "log.jsonl") if "loss" in r]
    assert steps == [1, 2, 3]


def test_a_typed_flag_is_refused_as_the_command_line_is_read_in_one_line_with_exit_status_2(capsys):
    p = cli.parser("")
    p.add_argument("--batch-size", type=cli.number(int, cli.COUNT), default=16)
    p.add_argument("--lr", type=cli.number(float, cli.POSITIVE), default=3e-5)
    assert vars(p.parse_args(["--batch-size", "8", "--lr", "1e-4"])) == {"batch_size": 8, "lr": 1e-4}
    assert vars(p.parse_args([])) == {"batch_size": 16, "lr": 3e-5}
    for argv, line in ((["--batch-size", "0"], "argument --batch-size: 0: must be between 1 and 1,073,741,824"),
                       (["--batch-size", "2.5"], "argument --batch-size: 2.5: not an integer"),
                       (["--lr", "nan"], "argument --lr: nan: must be a positive number"),
                       (["--lr", "inf"], "argument --lr: inf: must be a positive number"),
                       (["--lr", "fast"], "argument --lr: fast: not a number")):
        with pytest.raises(SystemExit) as e:
            p.parse_args(argv)
        assert e.value.code == 2
        assert capsys.readouterr().err == f"error: {line}\n"


@pytest.mark.parametrize("name, flag, value, line", [
    ("triplet", "--margin", "nan", "argument --margin: nan: must be a number from 0 to 65,504 (half precision's "
                                   "largest)"),
    ("contrastive", "--margin", "-1", "argument --margin: -1: must be a number from 0 to 65,504 (half precision's "
                                      "largest)"),
    ("mlm", "--mlm-probability", "1.5", "argument --mlm-probability: 1.5: must be a share between 0 and 1"),
    ("mlm", "--mask-replace-prob", "nan", "argument --mask-replace-prob: nan: must be a share between 0 and 1"),
    ("mlm", "--random-replace-prob", "-0.1",
     "argument --random-replace-prob: -0.1: must be a share between 0 and 1"),
    ("mlm", "--validation-split", "inf", "argument --validation-split: inf: must be a share between 0 and 1"),
])
def test_an_objectives_own_numbers_are_refused_as_the_command_line_is_read(name, flag, value, line, capsys):
    p = cli.parser("")
    script_module("03_train.py").add_training_arguments(p, objectives.get(name), [])
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--data", "d", "--out", "o", "--model", "m", flag, value])
    assert e.value.code == 2 and capsys.readouterr().err == f"error: {line}\n"
