"""An ordered parallel map with a bounded number of tasks in flight, so a producer never outruns the workers."""

import collections
import concurrent.futures
import multiprocessing
import os
import signal

from common.io import InputError


def ordered_map(fn, tasks, workers, initializer=None, initargs=(), in_flight_per_worker=4):
    """Yield ``fn(task)`` for each task, in order.

    ``workers=0`` runs in this process. Otherwise at most ``workers * in_flight_per_worker`` tasks are
    submitted and not yet consumed, so memory does not grow with the input.
    """
    if workers <= 0:
        if initializer is not None:
            initializer(*initargs)
        for task in tasks:
            yield fn(task)
        return
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context, initializer=initializer,
                                                initargs=initargs) as pool:
        pending = collections.deque()
        limit = workers * in_flight_per_worker
        try:
            for task in tasks:
                pending.append(pool.submit(fn, task))
                if len(pending) >= limit:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()


class Background:
    """``fn(*args)`` in a forked process (sharing the parent's memory copy-on-write), or inline where fork is not
    available. ``result()`` waits and returns its value; ``cancel()`` stops it.

    A failure in the process is raised again here as the same exception (the project's ``InputError`` stays one
    line; another carries the process's traceback as a note), and a process that ends without a result (killed
    from outside) is an ``InputError`` naming ``what`` it computed, its process id and the signal. The process
    ends with its parent, whatever ends that (SIGKILL included): it watches a pipe that only the parent can
    write to and exits when the pipe closes, so that nothing of a killed run goes on computing or holding its
    output folder's lock."""

    def __init__(self, fn, *args, what=None):
        self._process = None
        self.what = what or fn.__name__
        if "fork" not in multiprocessing.get_all_start_methods():
            self._value = fn(*args)
            return
        context = multiprocessing.get_context("fork")
        self._receive, send = context.Pipe(duplex=False)
        watched, self._alive = os.pipe()
        _PARENT_ENDS.add(self._alive)
        # SIGTERM held back across the fork: the process is born with it blocked, puts back its default action (a
        # handler the parent had installed, as 03's for a checkpoint, would let it go on) and only then takes it
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            self._process = context.Process(target=_run_and_send, args=(send, watched, fn, args), daemon=True)
            self._process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            os.close(watched)
            send.close()

    def result(self):
        if self._process is None:
            return self._value
        try:
            outcome = self._receive.recv()
        except EOFError:
            outcome = None
        self._process.join()
        code, pid = self._process.exitcode, self._process.pid
        self._end()
        if outcome is None:
            how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"ended with exit status {code}"
            raise InputError(f"{self.what}: its process {pid} {how} before it gave a result")
        status, value, trace = outcome
        if status == "error":
            if value is None:
                raise RuntimeError(f"{self.what} failed in process {pid}:\n{trace}")
            if not isinstance(value, InputError):
                value.add_note(f"in process {pid} ({self.what}):\n{trace}")
            raise value
        self._value = value
        return value

    def cancel(self):
        if self._process is not None:
            self._process.terminate()
            self._process.join()
            self._end()

    def _end(self):
        self._process = None
        _PARENT_ENDS.discard(self._alive)
        os.close(self._alive)


# the write ends of the pipes every Background process watches: held by the parent alone, so that a pipe closes
# exactly when its parent ends; every forked process (a Background's or any other) closes its copies at once
_PARENT_ENDS = set()


def _close_parent_ends():
    for fd in _PARENT_ENDS:
        os.close(fd)
    _PARENT_ENDS.clear()


os.register_at_fork(after_in_child=_close_parent_ends)


def _exit_when_closed(watched):
    os.read(watched, 1)  # returns only once no process holds the write end: the parent has ended
    os._exit(1)


def _run_and_send(send, watched, fn, args):
    import pickle
    import threading
    import traceback
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    threading.Thread(target=_exit_when_closed, args=(watched,), daemon=True).start()
    try:
        send.send(("ok", fn(*args), None))
    except BaseException as e:
        trace = traceback.format_exc()
        try:
            pickle.loads(pickle.dumps(e))
        except Exception:  # an exception that does not pickle and unpickle: its traceback alone
            e = None
        send.send(("error", e, trace))
