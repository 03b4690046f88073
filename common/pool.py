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
