"""03_train.py's loop: no step of any objective waits for the device between log records and checkpoints, nor does
05's embedding between its batches' vectors; a resumed run's log is the uninterrupted run's; a non-finite loss or
weight is stopped before anything is saved.

A GPU runs the model as transformers wrote it (``cpu.install`` puts the CPU layer in on a CPU only), so these tests
run the loop with ``cpu.install`` left out, as on a GPU, under a dispatch mode that records every operation that
makes the host wait for a device: a value read back (``item``, a tensor's truth value), an output whose size depends
on the values (``nonzero``, a boolean index, ``repeat_interleave`` without its size, ``unique``), and a copy to the
host (``.cpu()``, ``.tolist()``)."""

import json
import shutil
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import ROOT, read_jsonl, script_main, script_module, train_in_process, unfinish

WAITS = {"_local_scalar_dense", "is_nonzero", "nonzero", "argwhere", "masked_select", "equal", "allclose",
         "_unique2", "unique_dim", "unique_consecutive", "bincount"}
# where the loop may wait: its log records (the run folder's mean loss, the objective's own figures), validations,
# checkpoints (the objective's part of them too) and saves; and the host's own work on a batch (collating it, the
# data loader) before it reaches the device
LOOP_ALLOWED = {("03_train.py", "validate"), ("run_folder.py", "mean_loss"), ("run_folder.py", "save_checkpoint"),
                ("run_folder.py", "save_model"), ("objectives/", "log_metrics"), ("objectives/", "log_state")}
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
    monkeypatch.setattr(cpu, "install", lambda model: model)


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
        loss = losses_of(self, model, batch)
        float(loss.mean())
        return loss[loss > -1]
    monkeypatch.setattr(TripletObjective, "losses", waiting)
    monkeypatch.setattr(E, "model_mask", lambda transformer, mask: mask)
    argv = [str(a) for a in _objective_run("triplet", tmp_path, request)]
    mode = recording(monkeypatch, in_a_step)
    with mode:
        train_in_process(argv)
    found = {(what, where, function) for what, where, function, _ in mode.found}
    assert {("_local_scalar_dense", "tests/test_loop.py", "waiting"), ("index", "tests/test_loop.py", "waiting"),
            ("_local_scalar_dense", "common/models/encoder.py", "embed")} <= found


def test_embedding_copies_each_batchs_vectors_once_and_waits_for_nothing_else(tiny_model, monkeypatch):
    from common.models.inference import embed
    from common.models.loading import load_encoder
    from common.models.tokens import TokenStore
    encoder, tokenizer, _ = load_encoder(tiny_model, pooling="mean", max_length=32)
    store = TokenStore(tokenizer, [f"text {i} " + "word " * (i % 9) for i in range(23)], 32)
    inside = embed.__wrapped__.__code__ if hasattr(embed, "__wrapped__") else embed.__code__
    mode = recording(monkeypatch, lambda frames: any(f.f_code is inside for f in frames))
    with mode:
        vectors = embed(encoder, store, batch_size=5, batch_tokens=0)
    assert vectors.shape == (23, encoder.dimension)
    # 23 texts in batches of 5: one copy each, from one place
    assert [found[:3] for found in mode.found] == [(".cpu()", "common/models/inference.py", "embed")] * 5
    assert len({found[3] for found in mode.found}) == 1


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
    assert [at for at, _ in state["window"]] == [5]
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
