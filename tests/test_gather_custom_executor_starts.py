"""At the deadline, a call that never began is ``not_started`` on any executor
that runs calls in this process, not only on the pools a batch knows by type:
a call that was never pickled can begin nowhere else, and its start is seen
here. A journal keeps a ``timeout`` for good, so a false one is a call that
never runs."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest
from _gathering import Wrapping
from _remote_calls import mark_then_sleep
from _waiting import LONG, wait_until

import taut

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=[taut.ThreadPoolExecutor, cf.ThreadPoolExecutor])
def one_worker(request: Any) -> Iterator[cf.Executor]:
    factory: Callable[[int], cf.Executor] = request.param
    pool = factory(1)
    yield pool
    pool.shutdown(wait=False)


def test_a_call_queued_behind_a_busy_worker_of_a_wrapped_pool_is_not_started_at_the_deadline(
    one_worker: cf.Executor,
) -> None:
    # Before: 'timeout' (counted as started, as on an executor in another
    # process), though it never began and never would: a journal kept it so
    # and a rerun never ran it.
    gate = threading.Event()
    began: list[str] = []

    def work(name: str) -> str:
        began.append(name)
        if name == "busy":
            gate.wait(LONG)
        return name

    handles = [taut.call(work, "busy"), taut.call(work, "queued")]
    try:
        busy, queued = taut.gather(handles, executor=Wrapping(one_worker), timeout=0.5)
    finally:
        gate.set()
    one_worker.shutdown(wait=True)  # the worker is free: a call left queued would begin now
    assert busy.status == "timeout" and busy.started
    assert (queued.status, queued.started) == ("not_started", False), queued
    assert began == ["busy"]


class ForkPerCall(cf.Executor):
    """Runs each call in a forked child, which inherits the callable: it is
    never pickled, yet the call runs in another process."""

    def __init__(self) -> None:
        self.children: list[Any] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        future: cf.Future[Any] = cf.Future()
        future.set_running_or_notify_cancel()
        here, there = multiprocessing.Pipe(duplex=False)

        def in_the_child() -> None:
            there.send(fn(*args, **kwargs))

        child = multiprocessing.get_context("fork").Process(target=in_the_child, daemon=True)
        child.start()
        self.children.append(child)

        def collect() -> None:
            try:
                future.set_result(here.recv())
            except Exception as exc:  # the child was ended: no result
                future.set_exception(exc)

        threading.Thread(target=collect, daemon=True).start()
        return future


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs os.fork")
def test_a_call_run_in_a_forked_child_without_pickling_is_not_claimed_never_started(
    tmp_path: Path,
) -> None:
    # The child's start is not seen here: a call never pickled counts as
    # seen only while this process has not forked since the call was made.
    executor = ForkPerCall()
    try:
        [out] = taut.gather(
            [taut.call(mark_then_sleep, str(tmp_path), "forked", 60.0)],
            executor=executor,
            timeout=0.5,
        )
        wait_until(lambda: (tmp_path / "forked").exists())  # it did begin
    finally:
        for child in executor.children:
            child.terminate()
            child.join(LONG)
    assert (out.status, out.started) == ("timeout", True), out
