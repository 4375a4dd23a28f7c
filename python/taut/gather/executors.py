"""Executors as a batch sees them: handing a call over, and what only some
executors can do (tell their own workers apart, abandon or interrupt a
started call)."""

from __future__ import annotations

import concurrent.futures as cf
import threading
from typing import Any, Callable, cast

from taut.deadline import DeadlineExpired
from taut.gather.tasks import Submission, enclosing_frames

__all__ = [
    "Submit",
    "in_worker_of",
    "is_shut_down",
    "plain_submit",
    "stop_started",
    "take_back",
]

# How a batch hands one call to its executor; the default submits the task's
# runnable, a tool batch also tracks queue positions.
Submit = Callable[[Any, Submission], "cf.Future[Any]"]


def plain_submit(executor: Any, job: Submission) -> cf.Future[Any]:
    return cast("cf.Future[Any]", executor.submit(job.runnable()))


def is_shut_down(executor: Any) -> bool:
    """Whether ``executor`` has been shut down (the standard library's, taut's
    and Dask's executors keep it in ``_shutdown``)."""
    return getattr(executor, "_shutdown", False) is True


def in_worker_of(executor: Any) -> bool:
    """True if this thread is a worker of ``executor`` (so waiting for its
    workers could wait for ourselves)."""
    probe = getattr(executor, "in_worker", None)
    if callable(probe):
        try:
            if probe():
                return True
        except Exception:  # a foreign executor's probe must not break the gather
            pass
    here = threading.get_ident()
    return any(f.batch.executor is executor and f.thread == here for f in enclosing_frames())


def take_back(executor: Any, future: cf.Future[Any]) -> bool:
    """Cancel ``future``'s call where a successful cancel proves that it never
    began and never will; whether it did. It does on the standard library's
    executors (taut's pool is one): their futures leave PENDING when a worker
    takes the call. It does not on Dask's ``client.get_executor()``, whose
    futures stay pending until the remote task ends, so cancel() succeeds on
    a call that runs in another process; nor on an executor we do not know:
    there it is not tried."""
    proves = isinstance(executor, (cf.ThreadPoolExecutor, cf.ProcessPoolExecutor))
    return proves and future.cancel()


def stop_started(executor: Any, future: cf.Future[Any], interrupt: bool) -> None:
    """Cut a started call loose at the deadline, as far as the executor allows."""
    abandon = getattr(executor, "abandon", None)
    if callable(abandon):
        abandon(future)
        if interrupt:
            stopper = getattr(executor, "interrupt", None)
            if callable(stopper):
                stopper(future, DeadlineExpired)
    else:
        # Remote executors (Dask) cancel the remote task through their future;
        # a stdlib thread cannot be stopped and is left to finish unobserved.
        future.cancel()
