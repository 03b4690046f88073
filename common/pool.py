"""An ordered parallel map with a bounded number of tasks in flight, so a producer never outruns the workers."""

import collections
import concurrent.futures
import multiprocessing


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
    available. ``result()`` waits and returns its value, re-raising a failure; ``cancel()`` stops it."""

    def __init__(self, fn, *args):
        self._process = None
        if "fork" not in multiprocessing.get_all_start_methods():
            self._value = fn(*args)
            return
        context = multiprocessing.get_context("fork")
        self._receive, send = context.Pipe(duplex=False)
        self._process = context.Process(target=_run_and_send, args=(send, fn, args), daemon=True)
        self._process.start()
        send.close()

    def result(self):
        if self._process is None:
            return self._value
        try:
            status, value = self._receive.recv()
        except EOFError:
            status, value = "error", f"background process died (exit status {self._process.exitcode})"
        self._process.join()
        self._process = None
        if status == "error":
            raise RuntimeError(value)
        self._value = value
        return value

    def cancel(self):
        if self._process is not None:
            self._process.terminate()
            self._process.join()
            self._process = None


def _run_and_send(send, fn, args):
    import traceback
    try:
        send.send(("ok", fn(*args)))
    except BaseException:
        send.send(("error", traceback.format_exc()))
