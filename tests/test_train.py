"""03_train.py as a user runs it: schedule, preemption safety (a run killed, stopped by SIGTERM, on one process and on
two) and input errors. The runs that a signal stops are processes of their own; the others run in this one."""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from safetensors.torch import load_file

from conftest import ENV, ROOT, forget_hashes, free_port, read_jsonl, run_main, script_error, script_module, unfinish

TRAIN = ["--objective", "triplet", "--pooling", "mean", "--max-length", "32", "--batch-size", "4", "--epochs", "2",
         "--log-every", "1", "--eval-every", "20", "--checkpoint-every", "5", "--keep", "2", "--length-groups", "2"]


def train_args(data, model, out, *extra):
    return ["--data", data, "--model", model, "--out", out, *TRAIN, *extra]


def start(args):
    return subprocess.Popen([sys.executable, os.path.join(ROOT, "03_train.py"), *map(str, args)], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(predicate, proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"run ended before the condition:\n{proc.stderr.read()}")
        time.sleep(0.005)
    raise AssertionError("timed out")


def weights(run):
    return load_file(str(run / "model" / "model.safetensors"))


def losses(run):
    return [(r["step"], r.get("loss"), r.get("val_loss"), r.get("lr")) for r in read_jsonl(run / "log.jsonl")]


@pytest.fixture(scope="module")
def reference_run(tiny_model, tiny_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "run"
    run_main("03_train.py", *train_args(tiny_data, tiny_model, out))
    return out


def test_run_writes_model_log_checkpoints_and_manifest(reference_run):
    log = read_jsonl(reference_run / "log.jsonl")
    steps = max(r["step"] for r in log)
    assert [r["step"] for r in log if "loss" in r] == list(range(1, steps + 1))
    assert any("val_loss" in r for r in log)
    kept = sorted(os.listdir(reference_run / "checkpoints"))
    assert len(kept) == 2 and f"step_{steps}" in kept  # --keep 2, the final step included
    info = json.loads((reference_run / "model" / "docembed.json").read_text())
    assert info == {"pooling": "mean", "normalize": False, "max_length": 32, "objective": "triplet"}
    manifest = json.loads((reference_run / "manifest.json").read_text())
    assert manifest["counts"]["steps"] == steps and manifest["script"] == "03_train.py"


def test_save_epochs_keeps_the_model_of_every_epoch_and_the_last_is_the_final_model(tiny_model, tiny_data,
                                                                                    reference_run, tmp_path):
    out = tmp_path / "run"
    run_main("03_train.py", *train_args(tiny_data, tiny_model, out, "--save-epochs"))
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("epoch_")) == ["epoch_1", "epoch_2"]
    final, second, first = weights(out), load_file(str(out / "epoch_2" / "model.safetensors")), load_file(
        str(out / "epoch_1" / "model.safetensors"))
    assert all((final[k] == second[k]).all() for k in final) and any((final[k] != first[k]).any() for k in final)
    # the same weights as a run without the flag: saving changes nothing trained
    assert all((final[k] == weights(reference_run)[k]).all() for k in final)


def test_learning_rate_warms_up_for_a_tenth_then_decays_linearly_to_zero(reference_run):
    log = [r for r in read_jsonl(reference_run / "log.jsonl") if "lr" in r]
    total = len(log)
    warmup = round(0.1 * total)
    for r in log:
        s = r["step"]
        expected = 3e-5 * (s / warmup if s < warmup else (total - s) / (total - warmup))
        assert r["lr"] == pytest.approx(expected, rel=1e-9, abs=1e-15)
    assert log[-1]["lr"] == 0


def test_killed_run_resumes_to_bit_identical_weights(tiny_model, tiny_data, reference_run, tmp_path):
    out = tmp_path / "run"
    proc = start(train_args(tiny_data, tiny_model, out))
    wait_for(lambda: (out / "checkpoints" / "step_10" / "trainer_state.json").exists(), proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "model").exists()
    resumed = run_main("03_train.py", *train_args(tiny_data, tiny_model, out))
    assert "resuming from" in resumed.stdout
    ref, ours = weights(reference_run), weights(out)
    assert ref.keys() == ours.keys()
    assert all((ref[k] == ours[k]).all() for k in ref)
    assert losses(out) == losses(reference_run)


def test_sigterm_saves_a_checkpoint_and_exits_143(tiny_model, tiny_data, reference_run, tmp_path):
    out = tmp_path / "run"
    proc = start(train_args(tiny_data, tiny_model, out))
    wait_for(lambda: (out / "log.jsonl").exists() and len(read_jsonl(out / "log.jsonl")) >= 3, proc)
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143
    step = int(stdout.split("stopped by SIGTERM at step ")[1].split(";")[0])
    state = json.loads((out / "checkpoints" / f"step_{step}" / "trainer_state.json").read_text())
    assert state["step"] == step and not (out / "model").exists()
    run_main("03_train.py", *train_args(tiny_data, tiny_model, out))
    ref, ours = weights(reference_run), weights(out)
    assert all((ref[k] == ours[k]).all() for k in ref)


def test_resuming_with_other_settings_is_refused(tiny_model, tiny_data, reference_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(reference_run, out)
    unfinish(out)
    assert "its checkpoints come from a run with other settings (lr)" in script_error(
        "03_train.py", *train_args(tiny_data, tiny_model, out, "--lr", "1e-4"))


def _copy_data(tiny_data, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    forget_hashes(data)
    return data


@pytest.mark.parametrize("case", ["no-dir", "no-docs", "unknown-id", "missing-field"])
def test_bad_data_is_a_one_line_error(tiny_model, tiny_data, tmp_path, case):
    data = _copy_data(tiny_data, tmp_path)
    if case == "no-dir":
        data = tmp_path / "nowhere"
        expected = f"error: {data}: no such data directory"
    elif case == "no-docs":
        os.remove(data / "docs.jsonl")
        expected = f"error: {data / 'docs.jsonl'}: no such file"
    elif case == "unknown-id":
        lines = (data / "triplets.train.jsonl").read_text().splitlines()
        lines[3] = json.dumps({"query": "nope", "pos": "d1", "neg": "d2", "hard": False})
        (data / "triplets.train.jsonl").write_text("\n".join(lines) + "\n")
        expected = f"error: {data / 'triplets.train.jsonl'}:4: id 'nope' is not in docs.jsonl"
    else:
        lines = (data / "docs.jsonl").read_text().splitlines()
        lines[1] = json.dumps({"id": "d1", "text": "no title"})
        (data / "docs.jsonl").write_text("\n".join(lines) + "\n")
        expected = f"error: {data / 'docs.jsonl'}:2: missing field 'title'"
    assert script_error("03_train.py", *train_args(data, tiny_model, tmp_path / "run")) == expected


def start_two_processes(args):
    """Two training processes (DDP over gloo on the CPU), started as `accelerate launch` would on a node."""
    env = dict(ENV, ACCELERATE_USE_CPU="1", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
           str(free_port()), os.path.join(ROOT, "03_train.py"), *map(str, args)]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def test_two_processes_stop_together_on_sigterm_and_resume_bit_identically(tiny_model, tiny_data, tmp_path):
    reference = tmp_path / "ref"
    proc = start_two_processes(train_args(tiny_data, tiny_model, reference))
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    steps = json.loads((reference / "manifest.json").read_text())["counts"]["steps"]
    assert steps == 54  # 2 epochs of 27 batches: each process sees half of the 54 batches an epoch
    assert (reference / "checkpoints" / f"step_{steps}" / "random_states_1.pkl").exists()

    run = tmp_path / "run"
    proc = start_two_processes(train_args(tiny_data, tiny_model, run))
    wait_for(lambda: (run / "log.jsonl").exists() and len(read_jsonl(run / "log.jsonl")) >= 3, proc)
    os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    stopped = [line for line in out.splitlines() if "stopped by SIGTERM at step" in line]
    assert len(stopped) == 1  # only the main process prints; both saved the same step
    step = int(stopped[0].split("at step ")[1].split(";")[0])
    assert (run / "checkpoints" / f"step_{step}" / "random_states_1.pkl").exists()
    proc = start_two_processes(train_args(tiny_data, tiny_model, run))
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    ref, ours = weights(reference), weights(run)
    assert all((ref[k] == ours[k]).all() for k in ref)


@pytest.mark.parametrize("launcher", [["torch.distributed.run", "--nproc_per_node", "2", "--master_port"],
                                      ["accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                                       "--main_process_port"]])
def test_two_processes_launched_without_a_gpu_join_into_one_run(launcher, tiny_model, tiny_data, tmp_path):
    """Accelerate joins processes on a GPU it finds, and on the CPU only when told: a bare torchrun, or accelerate
    launch --multi_gpu on a machine without a GPU, starts two processes that train one run together (each step a
    batch of each), not each its own on one --out; the same command on one process then finds a run finished on
    two, of other settings."""
    run = tmp_path / "run"
    args = train_args(tiny_data, tiny_model, run, "--max-steps", "2", "--checkpoint-every", "1")
    env = {k: v for k, v in ENV.items() if k != "ACCELERATE_USE_CPU"}
    proc = subprocess.run([sys.executable, "-m", *launcher, str(free_port()), os.path.join(ROOT, "03_train.py"),
                           *map(str, args)], cwd=ROOT, env=dict(env, OMP_NUM_THREADS="1"), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("effective batch 8 = 4 per process × 2 processes × 1 accumulation; 2 steps") == 1
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["counts"]["processes"] == manifest["identity"]["processes"] == 2
    assert (run / "checkpoints" / "step_2" / "random_states_1.pkl").exists()
    assert script_error("03_train.py", *args) == (
        f"error: {run}: holds a finished 03_train.py run with other settings (processes); give --overwrite to train "
        "it again (only what the run wrote is removed), or another --out")


def test_processes_of_a_launch_that_accelerate_does_not_join_are_refused_before_any_work(tiny_model, tiny_data,
                                                                                          tmp_path, monkeypatch):
    """Where Accelerate leaves a launch's processes apart (here: two launched, as WORLD_SIZE says, on a device it
    joins none on), each is refused in one line before the model loads, and nothing is written."""
    from common.train import distributed
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(distributed, "joins_on_cpu", lambda: False)
    run = tmp_path / "run"
    assert script_error("03_train.py", *train_args(tiny_data, tiny_model, run)) == (
        "error: 2 processes were launched and Accelerate joined 1 of them into one run: each would train alone; run "
        "one process, or launch them where Accelerate joins them (a GPU each, or the CPU)")
    assert not run.exists()


def test_a_model_that_does_not_exist_is_a_one_line_error(tiny_data, tmp_path):
    assert script_error("03_train.py", *train_args(tiny_data, tmp_path / "none", tmp_path / "run")) == \
        f"error: {tmp_path / 'none'}: no such model folder, nor a model of that name in the local Hugging Face cache"


def test_a_non_finite_loss_stops_the_run_in_one_line_keeping_the_good_checkpoints(tiny_model, tiny_data, tmp_path,
                                                                                  monkeypatch):
    from common.train.objectives.triplet import TripletObjective
    calls = []
    losses_of = TripletObjective.losses

    def poisoned(self, model, batch):
        calls.append(1)
        loss = losses_of(self, model, batch)
        return loss * float("nan") if len(calls) == 3 else loss
    monkeypatch.setattr(TripletObjective, "losses", poisoned)
    out = tmp_path / "run"
    assert script_error("03_train.py", *train_args(tiny_data, tiny_model, out, "--checkpoint-every", "1")) == (
        f"error: step 3: training loss nan, not finite; stopped, the model not saved (the last good checkpoint is "
        f"{out / 'checkpoints' / 'step_2'})")
    assert sorted(os.listdir(out / "checkpoints")) == ["step_1", "step_2"]
    assert not (out / "model").exists() and not (out / ".lock").exists()


def test_a_run_folder_in_use_is_refused_before_anything_is_removed(tiny_model, tiny_data, reference_run, tmp_path):
    from common.folder_lock import FolderLock
    out = tmp_path / "run"
    shutil.copytree(reference_run, out)
    shutil.rmtree(out / "checkpoints")  # a rerun without checkpoints would remove the log and the model
    (out / "manifest.json").unlink()  # an unfinished run: a finished one is refused before its lock is tried
    with FolderLock(out):
        assert script_error("03_train.py", *train_args(tiny_data, tiny_model, out, "--lr", "1e-3")) == \
            f"error: {out}: in use by another run (process {os.getpid()}); wait for it to end or give another folder"
    assert (out / "log.jsonl").read_text() == (reference_run / "log.jsonl").read_text()
    assert (out / "model").is_dir()


def part_gradients(objective, rows, budgets):
    """Gradients of one training batch through the loop's backward pass, whole (the batch's mean loss) and cut at
    each token budget (``backward_in_parts``), with dropout off so that every computation sees the same network;
    and the parts each budget made."""
    from accelerate import Accelerator

    from common.train.batches import BatchParts
    backward_in_parts = script_module("03_train.py").backward_in_parts
    model = objective.build()
    objective.load_data()
    model.eval()
    found = []
    for budget in budgets:
        objective.args.chunk_tokens = budget
        rows_ = objective.train_rows[rows]
        batch = BatchParts(objective, budget)(rows_) if budget else objective.collate(rows_)
        model.zero_grad()
        if budget and "parts" in batch:
            loss = backward_in_parts(Accelerator(cpu=True), model, objective, batch)
        else:
            loss = objective.losses(model, batch).mean()
            Accelerator(cpu=True).backward(loss)
        found.append((loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
                      batch.get("sizes")))
    return found


def test_a_triplet_batch_run_in_parts_has_the_loss_and_gradients_of_the_whole_batch(tiny_model, tiny_data):
    from types import SimpleNamespace

    import numpy as np
    import torch

    from common.train.objectives.triplet import TripletObjective
    args = SimpleNamespace(model=str(tiny_model), data=str(tiny_data), pooling="mean", normalize=False, max_length=32,
                           length_groups=2, margin=1.0)
    objective = TripletObjective(args, None)
    (whole, grads, sizes), *cut = part_gradients(objective, slice(0, 10), [0, 150, 1])
    assert sizes is None
    tokens = objective.store.lengths()[objective.train_rows[:10]].sum()  # queries, positives and negatives
    parts = -(-tokens // 150)
    assert 1 < parts < 10 and cut[0][2] == [len(p) for p in np.array_split(np.arange(10), parts)]
    assert cut[1][2] == [1] * 10  # a budget below one row's tokens: a row per part
    for loss, part_grads, _ in cut:
        assert loss == pytest.approx(whole, rel=1e-6)
        assert part_grads.keys() == grads.keys()
        for name in grads:
            torch.testing.assert_close(part_grads[name], grads[name], rtol=1e-4, atol=1e-5)


@pytest.fixture
def accelerate_bf16(monkeypatch):
    """Accelerate's bf16 mixed precision as `accelerate launch --mixed_precision bf16` sets it: the environment
    variable, which Accelerate reads when it makes its process-wide state; that state made afresh for the test, and
    again after it (the next run reads the environment as it is then)."""
    from accelerate.state import AcceleratorState
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.mark.parametrize("native", [True, False])
def test_bf16_mixed_precision_trains_on_a_cpu_and_says_when_the_cpu_has_no_native_bfloat16(tiny_data, tiny_model,
                                                                                           tmp_path, native,
                                                                                           monkeypatch,
                                                                                           accelerate_bf16):
    """Accelerate's bf16 mixed precision (ACCELERATE_MIXED_PRECISION=bf16, as `accelerate launch --mixed_precision
    bf16` sets it) trains on a CPU; where the CPU lacks native bfloat16 (patched here), 03 says it will be slower."""
    from common.models import precision
    monkeypatch.setattr(precision, "native_bf16", lambda: native)
    out = tmp_path / "run"
    proc = run_main("03_train.py", *train_args(tiny_data, tiny_model, out, "--max-steps", "2"))
    assert "precision: bf16 mixed precision on cpu" in proc.stdout
    note = "note: bf16 mixed precision on a CPU without native bfloat16 (avx512_bf16 or AMX) runs slower than float32"
    assert (note in proc.stdout) == (not native)
    losses = [json.loads(line)["loss"] for line in (out / "log.jsonl").read_text().splitlines() if '"loss"' in line]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
