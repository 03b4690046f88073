"""Processes of one training run (common/distributed.py): their number as the launcher's variables give it, one
that is no whole number from 1 refused in one line naming the variable; the differentiable all-gather on two
processes has the gradients of one process holding both shards; and agreeing to stop (``stop_agreed``, as 03's loop
calls it): two processes (DDP over gloo on the CPU, each a ``torch.multiprocessing`` worker that runs 03's ``train``)
make no blocking collective per step, and a SIGTERM that reaches one of them stops both at the same step with a
checkpoint that resumes to the uninterrupted run's weights."""

import collections
import json
import multiprocessing
import os
import pathlib
import tempfile

import pytest
import torch
from safetensors.torch import load_file

from conftest import free_port

# every collective of torch.distributed that Accelerate or the project calls from Python; DDP's gradient all-reduce
# runs inside its C++ reducer, overlapped with the backward pass, and is not among them
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast",
               "broadcast_object_list", "barrier", "reduce", "gather", "scatter")


# what 03 imports as it trains the toy: BERT's model class, the dataloaders' datasets, the curves' matplotlib
PRELOAD = ["accelerate", "datasets", "transformers.models.bert.modeling_bert", "common.eval.figures", "conftest"]
STEPS = 6  # of the toy's 20 batches of one row a process in an epoch: the runs below stop at --max-steps


def _train_worker(rank, port, argv, sigterm_at, out):
    """03's ``train(argv)`` as process ``rank`` of two, the toy objective registered; writes the collectives it
    called (by name), how many it had called when each training loss was computed (one a step) and the step a
    SIGTERM stopped it at. ``sigterm_at``: the step of rank 1 during which it sends itself a SIGTERM (None: never)."""
    import signal

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), ACCELERATE_USE_CPU="1")
    import torch.distributed as dist

    from conftest import script_module
    from common.io import Preempted
    from common.train import objectives
    from toy_objective import ToyObjective
    objectives.REGISTRY["toy"] = objectives.Entry("toy_objective.ToyObjective", ("docs.jsonl",))
    called, at_loss, losses = collections.Counter(), [], ToyObjective.losses

    def counted_losses(self, model, batch):
        if model.training:  # a training step's, not validation's
            at_loss.append(sum(called.values()))
            if rank == 1 and len(at_loss) == sigterm_at:
                os.kill(os.getpid(), signal.SIGTERM)
        return losses(self, model, batch)
    ToyObjective.losses = counted_losses

    def counted(name, collective):
        def call(*args, **kwargs):
            called[name] += 1
            return collective(*args, **kwargs)
        return call
    originals = {name: getattr(dist, name) for name in COLLECTIVES}
    for name, collective in originals.items():
        setattr(dist, name, counted(name, collective))
    training, stopped = script_module("03_train.py"), None
    try:
        training.train(training.parse_args(argv))
    except Preempted as e:
        stopped = e.args[0]
    with open(os.path.join(out, f"rank_{rank}.json"), "w") as f:
        json.dump({"collectives": called, "at_loss": at_loss, "stopped": stopped}, f)
    os._exit(0)  # past the results: skip interpreter teardown, where gloo's threads can abort the process


def train_two(tiny_data, tiny_model, out, *flags, sigterm_at=None):
    """03's run of the toy on two processes for STEPS steps: each process's ``{"collectives": {name: count},
    "at_loss": [count, ...], "stopped": step}``."""
    argv = ["--objective", "toy", "--data", str(tiny_data), "--model", str(tiny_model), "--out", str(out),
            "--batch-size", "1", "--epochs", "1", "--max-steps", str(STEPS), "--eval-every", "0",
            "--checkpoint-every", "0", *flags]
    results = pathlib.Path(tempfile.mkdtemp(dir=out.parent))
    # forked from a server that imported once what every run imports (most of a run's seconds), not spawned afresh
    multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
    torch.multiprocessing.start_processes(_train_worker, args=(free_port(), argv, sigterm_at, str(results)),
                                          nprocs=2, start_method="forkserver")
    return [json.loads((results / f"rank_{rank}.json").read_text()) for rank in range(2)]


@pytest.fixture(scope="module")
def logged_once(tiny_data, tiny_model, tmp_path_factory):
    """The toy's STEPS steps on two processes, logged once (its last step); the run folder and each process's
    results."""
    out = tmp_path_factory.mktemp("two") / "once"
    return out, train_two(tiny_data, tiny_model, out, "--log-every", str(STEPS))


def test_two_processes_make_no_blocking_collective_per_step(logged_once):
    _, once = logged_once
    for process in once:
        # no collective between one step's loss and the next (the stop agreement was one each until it waited for
        # a log record)
        assert process["at_loss"] == [process["at_loss"][0]] * STEPS
    # and per run, whatever its length: the log record's finite check, mean loss and mean accuracy (the toy's log
    # value), validation's finite check and the final save's (5 all-reduces), validation's 20 rows gathered a batch
    # at a time (10 all-gathers), the waits after the folder is claimed, around the data's tokenising, after the
    # folder is readied for the run's settings and around the final save (5 barriers)
    assert once[0]["collectives"] == once[1]["collectives"] == {"all_reduce": 5, "all_gather": 10, "barrier": 5}


def test_a_sigterm_to_one_process_stops_both_at_the_next_log_record_and_resumes_bit_identically(
        logged_once, tiny_data, tiny_model, tmp_path):
    reference, _ = logged_once
    out = tmp_path / "run"
    # process 1 alone is sent SIGTERM during step 2; the processes agree at the next log record, step 3
    stopped = train_two(tiny_data, tiny_model, out, "--log-every", "3", sigterm_at=2)
    assert [r["stopped"] for r in stopped] == [3, 3]
    assert os.listdir(out / "checkpoints") == ["step_3"]
    state = json.loads((out / "checkpoints" / "step_3" / "trainer_state.json").read_text())
    assert state["step"] == 3 and not (out / "model").exists()
    resumed = train_two(tiny_data, tiny_model, out, "--log-every", "3")
    assert [r["stopped"] for r in resumed] == [None, None]
    for name in ("model.safetensors", "heads.safetensors"):
        ref, ours = load_file(str(reference / "model" / name)), load_file(str(out / "model" / name))
        assert ref.keys() == ours.keys() and all(torch.equal(ref[k], ours[k]) for k in ref)


# -- the number of processes a launch starts ---------------------------------------------------------------------------

@pytest.fixture
def launch_env(monkeypatch):
    """Sets a launch's variables (``LAUNCH_SIZES``) to what a test gives, none other set."""
    from common.distributed import LAUNCH_SIZES
    for name in LAUNCH_SIZES:
        monkeypatch.delenv(name, raising=False)
    return lambda **values: [monkeypatch.setenv(name, value) for name, value in values.items()]


@pytest.mark.parametrize("values, processes", [
    ({}, 1), ({"WORLD_SIZE": "2"}, 2), ({"WORLD_SIZE": "1", "PMI_SIZE": "4"}, 1), ({"PMI_SIZE": "4"}, 4),
    ({"OMPI_COMM_WORLD_SIZE": "3"}, 3), ({"MV2_COMM_WORLD_SIZE": "16"}, 16)])
def test_the_number_of_processes_is_the_first_launch_variable_set_as_accelerate_reads_it(values, processes,
                                                                                        launch_env):
    from accelerate.utils import get_int_from_env

    from common.distributed import LAUNCH_SIZES, launched_processes
    launch_env(**values)
    assert launched_processes() == get_int_from_env(list(LAUNCH_SIZES), 1) == processes


@pytest.mark.parametrize("name, value", [("WORLD_SIZE", "two"), ("WORLD_SIZE", "-2"), ("WORLD_SIZE", "0"),
                                         ("WORLD_SIZE", ""), ("PMI_SIZE", "2.0"), ("OMPI_COMM_WORLD_SIZE", " 2"),
                                         ("MV2_COMM_WORLD_SIZE", "٢"), ("WORLD_SIZE", "9" * 50)])
def test_a_launch_variable_that_is_no_whole_number_from_1_is_one_line_naming_it(name, value, launch_env):
    from common.io import InputError
    from common.distributed import launched_processes
    launch_env(**{name: value})
    shown = repr(value) if len(value) <= 40 else repr(value[:37]) + "..."
    with pytest.raises(InputError) as e:
        launched_processes()
    assert str(e.value) == f"{name}={shown}: the number of processes a launcher starts must be a whole number from 1"


@pytest.mark.parametrize("seeds", [[], ["--seeds", "1", "2"]], ids=["one-run", "seeds"])
def test_03_refuses_a_launch_variable_that_is_no_number_in_one_line_before_any_work(seeds, launch_env, tiny_data,
                                                                                   tiny_model, tmp_path):
    from conftest import script_error
    launch_env(WORLD_SIZE="two")
    out = tmp_path / "run"
    assert script_error("03_train.py", "--data", tiny_data, "--model", tiny_model, "--out", out, "--max-steps", "1",
                        *seeds) == \
        "error: WORLD_SIZE='two': the number of processes a launcher starts must be a whole number from 1"
    assert not out.exists()


# -- the differentiable all-gather -------------------------------------------------------------------------------------

def _gather_worker(rank, world, store, shards, out):
    import torch.distributed as dist

    from common.distributed import all_gather_with_grad
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
