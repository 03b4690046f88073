"""common/pool.py: Background, work in a forked process: its failure raised again in the parent as the same
exception (the project's InputError stays one line), a process killed from outside one line naming it, and the
process ending with its parent, SIGKILL included, so that the parent's output folder's lock is free at once."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ENV, ROOT

from common.io import InputError
from common.pool import Background


def refuse(message):
    raise InputError(message)


def divide(a, b):
    return a / b


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def test_a_value_and_an_input_error_come_back_as_they_were():
    assert Background(divide, 6, 3).result() == 2
    with pytest.raises(InputError) as e:
        Background(refuse, "topics.top.train.jsonl: too few documents").result()
    assert str(e.value) == "topics.top.train.jsonl: too few documents" and not getattr(e.value, "__notes__", None)


def test_another_failure_is_raised_again_with_the_traceback_of_its_process():
    work = Background(divide, 1, 0, what="the division")
    pid = work._process.pid
    with pytest.raises(ZeroDivisionError) as e:
        work.result()
    assert e.value.__notes__[0].startswith(f"in process {pid} (the division):\nTraceback")
    assert "return a / b" in e.value.__notes__[0]


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_process_killed_from_outside_is_one_line_naming_it(signum):
    work = Background(sleep_then, 60, "late", what="the topic classifiers (1 of 2)")
    pid = work._process.pid
    os.kill(pid, signum)
    with pytest.raises(InputError) as e:
        work.result()
    assert str(e.value) == (f"the topic classifiers (1 of 2): its process {pid} was killed by "
                            f"{signal.Signals(signum).name} before it gave a result")


def test_a_process_takes_sigterm_as_killed_whatever_handler_its_parent_installed():
    """03 installs a SIGTERM handler that only records the signal (a checkpoint at the next step); a process forked
    under it, signalled at once, still ends by SIGTERM and is named as killed."""
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        for _ in range(5):
            work = Background(sleep_then, 60, "late", what="the t-SNE")
            os.kill(work._process.pid, signal.SIGTERM)
            with pytest.raises(InputError, match="killed by SIGTERM before it gave a result"):
                work.result()
    finally:
        signal.signal(signal.SIGTERM, previous)


def ended(pid):
    """Whether process ``pid`` has exited (gone, or a zombie that its new parent has not reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_the_processes_end_with_a_parent_killed_by_sigkill_and_its_lock_is_free(tmp_path):
    """A parent holding an output folder's lock starts three Background processes (each forked after the
    others' pipes exist), then is killed with SIGKILL: every process ends within seconds (they inherit the lock),
    and the folder's lock can be taken again."""
    from common.outdir.folder_lock import FolderLock
    folder = str(tmp_path)
    parent = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {ROOT!r})
        sys.path.insert(0, {os.path.join(ROOT, 'tests')!r})
        from common.outdir.folder_lock import FolderLock
        from common.pool import Background
        from test_pool import sleep_then
        lock = FolderLock({folder!r}).acquire()
        work = [Background(sleep_then, 120, k) for k in range(3)]
        print(*(w._process.pid for w in work), flush=True)
        time.sleep(120)
    """)
    proc = subprocess.Popen([sys.executable, "-c", parent], env=ENV, stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 3 and not any(map(ended, pids))
    with pytest.raises(InputError, match="in use by another run"):
        FolderLock(folder).acquire()
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while not all(map(ended, pids)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(map(ended, pids))
    FolderLock(folder).acquire().release()
