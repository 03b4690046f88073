"""03_train.py's train, the loop every objective shares: a run as a user starts it (its model, log, checkpoints and
manifest, the schedules, bf16 mixed precision), preemption safety (a run killed, stopped by SIGTERM, on one process
and on two), a registered objective's head and buffers, gradient checkpointing and length buckets, a batch run in
parts, batches collated by worker processes, no step of any objective waiting for the device between log records and
checkpoints, a resumed run's log, a non-finite loss or weight never saved, and 03's checks of its command line and
its data before anything loads. The runs that a signal stops are processes of their own; the others run in this one.
The run folder (resume, logs, checkpoints): test_run_folder.py; the length buckets' sampler: test_batches.py; the
differentiable all-gather: test_distributed.py.

A GPU runs the model as transformers wrote it (``cpu.install`` puts the CPU layer in on a CPU only), so the tests of
the waits run the loop with ``cpu.install`` left out, as on a GPU, under a dispatch mode that records every operation
that makes the host wait for a device: a value read back (``item``, a tensor's truth value), an output whose size
depends on the values (``nonzero``, a boolean index, ``repeat_interleave`` without its size, ``unique``), and a copy
to the host (``.cpu()``, ``.tolist()``)."""

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import (ENV, ROOT, forget_hashes, free_port, read_jsonl, run_main, script_error, script_main,
                      script_module, train_in_process, unfinish)

from common.io import InputError


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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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
        f"error: {run}: holds a 03_train.py run finished on 2 processes, and this launch starts 1; launch 2 to find it "
        "finished, or give --overwrite to train it again on these, or another --out")


def test_processes_of_a_launch_that_accelerate_does_not_join_are_refused_before_any_work(tiny_model, tiny_data,
                                                                                          tmp_path, monkeypatch):
    """Where Accelerate leaves a launch's processes apart (here: two launched, as WORLD_SIZE says, on a device it
    joins none on), each is refused in one line before the model loads, and nothing is written."""
    from common import distributed
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
        loss, logs = losses_of(self, model, batch)
        return (loss * float("nan") if len(calls) == 3 else loss), logs
    monkeypatch.setattr(TripletObjective, "losses", poisoned)
    out = tmp_path / "run"
    assert script_error("03_train.py", *train_args(tiny_data, tiny_model, out, "--checkpoint-every", "1")) == (
        f"error: step 3: training loss nan, not finite; stopped, the model not saved (the last good checkpoint is "
        f"{out / 'checkpoints' / 'step_2'})")
    assert sorted(os.listdir(out / "checkpoints")) == ["step_1", "step_2"]
    assert not (out / "model").exists() and not (out / ".lock").exists()


def test_a_run_folder_in_use_is_refused_before_anything_is_removed(tiny_model, tiny_data, reference_run, tmp_path):
    from common.outdir.folder_lock import FolderLock
    out = tmp_path / "run"
    shutil.copytree(reference_run, out)
    shutil.rmtree(out / "checkpoints")  # a rerun without checkpoints would remove the log and the model
    (out / "manifest.json").unlink()  # an unfinished run: a finished one is refused before its lock is tried
    with FolderLock(out):
        assert script_error("03_train.py", *train_args(tiny_data, tiny_model, out, "--lr", "1e-3")) == \
            (f"error: {out}: in use by another run (process {os.getpid()} on {socket.gethostname()}); wait for it "
             "to end or give another folder")
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
            loss, _ = backward_in_parts(Accelerator(cpu=True), model, objective, batch)
        else:
            loss = objective.losses(model, batch)[0].mean()
            Accelerator(cpu=True).backward(loss)
        found.append((loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
                      batch.get("sizes")))
    return found


def test_a_triplet_batch_run_in_parts_has_the_loss_and_gradients_of_the_whole_batch(tiny_model, tiny_data, tmp_path):
    from types import SimpleNamespace

    import numpy as np
    import torch

    from common.train.objectives.triplet import TripletObjective
    args = SimpleNamespace(model=str(tiny_model), data=str(tiny_data), pooling="mean", normalize=False, max_length=32,
                           length_groups=2, margin=1.0, out=str(tmp_path / "run"))
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


# -- no step waits for the device --------------------------------------------------------------------------------------

WAITS = {"_local_scalar_dense", "is_nonzero", "nonzero", "argwhere", "masked_select", "equal", "allclose",
         "_unique2", "unique_dim", "unique_consecutive", "bincount"}
# where the loop may wait: its log records (the run folder's mean loss, the objective's own figures), validations,
# checkpoints (the objective's part of them too) and saves; and the host's own work on a batch (collating it, the
# data loader) before it reaches the device
LOOP_ALLOWED = {("03_train.py", "validate"), ("run_folder.py", "window_means"), ("run_folder.py", "save_checkpoint"),
                ("run_folder.py", "save_model")}
HOST_WORK = ("/torch/utils/data/", "/accelerate/data_loader.py")


def _waits(func, args, kwargs):
    """Whether running ``func`` on these arguments makes the host wait for a device."""
    name = func.overloadpacket.__name__
    if name in WAITS:
        return True
    if name in ("index", "index_put", "index_put_"):
        return any(t is not None and t.dtype in (torch.bool, torch.uint8) for t in args[1])
    return (name == "repeat_interleave" and func._overloadname in ("Tensor", "self_Tensor")
            and kwargs.get("output_size") is None)


class HostWaits(TorchDispatchMode):
    """Records what waits and where it is called from (the innermost of the project's frames: file, function, line),
    for the calls ``counts(frames)`` accepts."""

    def __init__(self, counts):
        super().__init__()
        self.counts, self.found = counts, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _waits(func, args, kwargs):
            self.record(func.overloadpacket.__name__)
        return func(*args, **kwargs)

    def record(self, what):
        frames = []
        frame = sys._getframe(2)
        while frame is not None:
            frames.append(frame)
            frame = frame.f_back
        if self.counts(frames):
            ours = next((f for f in frames if f.f_code.co_filename.startswith(ROOT)
                         and "site-packages" not in f.f_code.co_filename), frames[0])
            self.found.append((what, ours.f_code.co_filename[len(ROOT) + 1:], ours.f_code.co_name, ours.f_lineno))


def recording(monkeypatch, counts):
    """A ``HostWaits`` that also records ``.cpu()`` and ``.tolist()`` (which dispatch nothing on a CPU tensor)."""
    mode = HostWaits(counts)
    for method in ("cpu", "tolist"):
        original = getattr(torch.Tensor, method)

        def patched(self, *a, _original=original, _method=method, **k):
            mode.record(f".{_method}()")
            return _original(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, method, patched)
    return mode


def loop_lines():
    """The lines of 03_train.py's ``train`` between "# the loop" and "# the save"."""
    with open(f"{ROOT}/03_train.py", encoding="utf-8") as f:
        lines = f.read().splitlines()
    first = next(i for i, line in enumerate(lines, 1) if line.strip() == "# the loop")
    last = next(i for i, line in enumerate(lines, 1) if line.strip().startswith("# the save"))
    return range(first, last)


def in_a_step(frames):
    """Inside the loop of 03's ``train``, not in a log record, validation, checkpoint or save, nor in the host's
    work on a batch."""
    lines = loop_lines()
    train = next((f for f in frames if f.f_code.co_filename.endswith("03_train.py") and f.f_code.co_name == "train"),
                 None)
    if train is None or train.f_lineno not in lines:
        return False
    for f in frames:
        name, where = f.f_code.co_name, f.f_code.co_filename
        if any(f"/{place}" in where and name == allowed for place, allowed in LOOP_ALLOWED) \
                or any(part in where for part in HOST_WORK) \
                or (name in ("collate", "__call__") and "/common/train/" in where):
            return False
    return True


@pytest.fixture
def as_on_a_gpu(monkeypatch):
    from common.models import cpu
    monkeypatch.setattr(cpu, "install", lambda model, say: model)


STEPS = ["--max-steps", "3", "--log-every", "2", "--eval-every", "0", "--checkpoint-every", "2", "--batch-size", "4"]


def _objective_run(objective, root, request):
    from test_run_folder import objective_data
    tiny_data, tiny_model = request.getfixturevalue("tiny_data"), request.getfixturevalue("tiny_model")
    if objective in ("triplet", "cosine"):
        data = ["--data", tiny_data] if objective == "triplet" else objective_data("contrastive", request)
        return ["--objective", objective, *data, "--model", tiny_model, "--out", root / "run", "--pooling", "mean",
                "--max-length", "32", *STEPS]
    data = objective_data(objective, request)
    extra = {"mnrl": ["--query-max-length", "16"], "mlm": ["--cache-dir", root / "cache", "--max-length", "32"],
             "contrastive": [], "distill": ["--grad-accum", "2", "--warmup", "1", "--max-structural-length", "20",
                                            "--lambda", "0.5", "--student-projection", "8", "--teacher-projection",
                                            "8", "--max-length", "32"]}[objective]
    head = ["train"] if objective == "distill" else ["--objective", objective]
    return [*head, *data, "--model", tiny_model, "--out", root / "run", *STEPS, *extra]


@pytest.mark.parametrize("objective", ["triplet", "contrastive", "cosine", "mlm", "mnrl", "distill"])
def test_no_step_waits_for_the_device_between_log_records_and_checkpoints(objective, tmp_path, request, as_on_a_gpu,
                                                                         monkeypatch, capsys):
    argv = [str(a) for a in _objective_run(objective, tmp_path, request)]
    mode = recording(monkeypatch, in_a_step)
    with mode:
        if objective == "distill":
            script_main("04_distill.py")(argv)
        else:
            train_in_process(argv)
    assert mode.found == []
    assert [r["step"] for r in read_jsonl(tmp_path / "run" / "log.jsonl") if "loss" in r] == [2, 3]


def test_the_recording_sees_each_kind_of_wait_inside_a_step(tmp_path, request, as_on_a_gpu, monkeypatch):
    """The same run with a value read back in the loss, a boolean index and transformers' own check of a 2-D mask
    (``mask.all()``): each is found, where it is called from."""
    from common.models import encoder as E
    from common.train.objectives.triplet import TripletObjective
    losses_of = TripletObjective.losses

    def waiting(self, model, batch):
        loss, logs = losses_of(self, model, batch)
        float(loss.mean())
        return loss[loss > -1], logs
    monkeypatch.setattr(TripletObjective, "losses", waiting)
    monkeypatch.setattr(E, "model_mask", lambda transformer, mask: mask)
    argv = [str(a) for a in _objective_run("triplet", tmp_path, request)]
    mode = recording(monkeypatch, in_a_step)
    with mode:
        train_in_process(argv)
    found = {(what, where, function) for what, where, function, _ in mode.found}
    assert {("_local_scalar_dense", "tests/test_train.py", "waiting"), ("index", "tests/test_train.py", "waiting"),
            ("_local_scalar_dense", "common/models/encoder.py", "embed")} <= found


def test_a_resumed_runs_log_records_are_the_uninterrupted_runs(tiny_model, tiny_data, tmp_path):
    """Records every 4 steps, a checkpoint every 5: the run resumed from step 5 writes at step 8 the mean of steps 5
    to 8, as the uninterrupted run did (the checkpoint kept step 5's loss)."""
    argv = ["--data", tiny_data, "--model", tiny_model, "--pooling", "mean", "--max-length", "32", "--batch-size",
            "4", "--max-steps", "12", "--log-every", "4", "--eval-every", "0", "--checkpoint-every", "5", "--keep",
            "0"]
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    train_in_process([*argv, "--out", reference])
    shutil.copytree(reference, resumed)
    unfinish(resumed)
    shutil.rmtree(resumed / "checkpoints" / "step_10")
    shutil.rmtree(resumed / "checkpoints" / "step_12")
    state = json.loads((resumed / "checkpoints" / "step_5" / "trainer_state.json").read_text())
    assert [at for at, _, _ in state["window"]] == [5]
    train_in_process([*argv, "--out", resumed])

    def records(run):
        return [{k: v for k, v in r.items() if k != "steps_per_s"} for r in read_jsonl(run / "log.jsonl")]
    assert [r["step"] for r in records(resumed) if "loss" in r] == [4, 8, 12]
    assert records(resumed) == records(reference)


@pytest.mark.parametrize("flags,expected", [
    # one step: its loss was finite, the weights it made are not
    (["--lr", "1e39", "--max-steps", "1"], "step 1: the weights are not finite (a learning rate or weight decay too "
                                           "large?); stopped, the model not saved (no checkpoint was written)"),
    (["--weight-decay", "1e300", "--lr", "1e10", "--max-steps", "1"], "step 1: the weights are not finite"),
    # the first checkpoint would hold the first step's weights: refused
    (["--lr", "1e39", "--max-steps", "3", "--checkpoint-every", "1"], "step 1: the weights are not finite"),
    # a record each step: the first step's loss is finite, the second's is read as NaN
    (["--lr", "1e39", "--max-steps", "3", "--log-every", "1"], "step 2: training loss nan, not finite; stopped, the "
                                                               "model not saved (no checkpoint was written)"),
])
def test_weights_or_a_loss_that_are_not_finite_are_never_saved(flags, expected, tiny_model, tiny_data, tmp_path):
    from common.io import InputError
    out = tmp_path / "run"
    with pytest.raises(InputError) as e:
        train_in_process(["--data", tiny_data, "--model", tiny_model, "--pooling", "mean", "--max-length", "32",
                          "--batch-size", "4", "--eval-every", "0", "--out", out, *flags])
    assert str(e.value).startswith(expected.format(out=out))
    assert not (out / "model").exists() and not (out / "manifest.json").exists()
    for checkpoint in (out / "checkpoints").glob("step_*"):
        from safetensors.torch import load_file
        assert all(torch.isfinite(t).all() for t in load_file(checkpoint / "model.safetensors").values())


@pytest.mark.parametrize("objective", ["triplet", "contrastive", "mlm", "mnrl", "distill"])
def test_batches_collated_by_worker_processes_are_those_of_the_training_process(objective, tmp_path, request):
    """What a GPU run's ``--loader-workers`` do: every batch of two epochs, collated in two worker processes, is the
    batch the training process collates itself (each example's randomness is its own: (seed, epoch, example))."""
    from torch.utils.data import DataLoader
    from common.train import objectives
    from common.train.batches import EpochSampler
    argv = [str(a) for a in _objective_run(objective, tmp_path, request)]
    training = script_module("03_train.py")
    if objective == "distill":  # 04_distill.py train's command line
        from common import cli
        parser = cli.parser("")
        training.add_training_arguments(parser, objectives.get("distill"), argv)
        args = parser.parse_args(argv[1:])
        args.objective = "distill"
    else:
        args = training.parse_args(argv)
    made = objectives.get(args.objective)(args, None)
    made.build()
    made.load_data()
    batches = {}
    for workers in (0, 2):
        sampler = EpochSampler(len(made.train_rows), args.seed)
        loader = DataLoader(made.train_rows, batch_size=args.batch_size, sampler=sampler, collate_fn=made.collate,
                            num_workers=workers)
        found = []
        for epoch in (0, 1):
            sampler.epoch = epoch
            made.set_epoch(epoch)
            found += list(loader)
        batches[workers] = found
    assert len(batches[0]) == len(batches[2]) > 2

    def same(a, b):
        if torch.is_tensor(a):
            return torch.equal(a, b)
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a == b
    assert all(same(a, b) for a, b in zip(batches[0], batches[2]))


# -- the loop every objective shares -----------------------------------------------------------------------------------

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
    ("--warmup", "-1", "argument --warmup: -1: must be a share below 1, or a whole number of steps "
                               "from 1 to 1,073,741,824"),
    ("--warmup", "inf", "argument --warmup: inf: must be a share below 1, or a whole number of steps "
                               "from 1 to 1,073,741,824"),
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
