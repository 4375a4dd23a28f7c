"""The standard library pool's privates that real clients touch, with their
standard meaning: ``_work_queue``, ``_idle_semaphore``, ``_shutdown``,
``_broken``, ``_max_workers``, ``_threads``."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import math
import queue
import threading
from typing import Any

import pytest

import taut

LONG = 30.0


def _busy(ex: taut.ThreadPoolExecutor) -> threading.Event:
    gate = threading.Event()
    ex.submit(gate.wait, LONG)
    while ex.stats().running == 0:
        gate.wait(0.001)
    return gate


def test_pubsub_style_shutdown_drain_hands_back_calls_that_never_started() -> None:
    # google-cloud-pubsub's ThreadScheduler.shutdown(): drain the executor's
    # queue with get(block=False) until Empty, skipping the None sentinel,
    # collect each work item's message, then shut the executor down.
    ex = taut.ThreadPoolExecutor(1)
    gate = _busy(ex)
    ran: list[str] = []
    futures = [ex.submit(ran.append, f"message-{i}") for i in range(5)]
    assert ex._work_queue.qsize() == 5
    dropped = []
    try:
        while True:
            work_item = ex._work_queue.get(block=False)
            if work_item is None:
                continue
            dropped.append(work_item.args[0])
    except queue.Empty:
        pass
    ex.shutdown(wait=False)
    gate.set()
    ex.shutdown(wait=True)
    assert dropped == [f"message-{i}" for i in range(5)]
    assert ran == []  # none of them ran after shutdown
    assert ex._work_queue.empty()
    # Their futures are pending: cancelling one settles it and wakes waiters.
    assert not any(f.done() for f in futures)
    waiter = threading.Thread(target=cf.wait, args=(futures[:1],))
    waiter.start()
    assert futures[0].cancel()
    waiter.join(LONG)
    assert not waiter.is_alive()
    with pytest.raises(cf.CancelledError):
        futures[0].result(timeout=LONG)


def test_a_work_item_taken_out_can_be_run_by_hand() -> None:
    with taut.ThreadPoolExecutor(1) as ex:
        gate = _busy(ex)
        try:
            future = ex.submit(pow, 2, 8)
            item = ex._work_queue.get_nowait()
            assert (item.fn, item.args, item.kwargs) == (pow, (2, 8), {})
            assert item.future is future
            item.run()
            assert future.result(timeout=0) == 256
        finally:
            gate.set()


class _RecordingContext:
    """What 3.14's ``_WorkItem.run(ctx)`` is handed: runs ``(fn, args, kwargs)``."""

    def __init__(self) -> None:
        self.tasks: list[tuple[object, ...]] = []

    def run(self, task: tuple[Any, tuple[Any, ...], dict[str, Any]]) -> object:
        self.tasks.append(task)
        fn, args, kwargs = task
        return fn(*args, **kwargs)


def _worker_context_for(ex: cf.Executor) -> list[Any]:
    """What ``run()`` of a work item of ``ex`` is given: 3.14's standard
    library runs an item through a worker context; taut's takes one on every
    version; earlier standard libraries take none."""
    if hasattr(ex, "_create_worker_context"):
        return [ex._create_worker_context()]
    return [_RecordingContext()] if isinstance(ex, taut.ThreadPoolExecutor) else []


def test_a_work_item_taken_out_runs_through_a_worker_context_as_on_3_14() -> None:
    with taut.ThreadPoolExecutor(1) as ex:
        gate = _busy(ex)
        try:
            future = ex.submit(pow, 2, 8, mod=5)
            item = ex._work_queue.get_nowait()
            assert item.task == (pow, (2, 8), {"mod": 5})
            ctx = _RecordingContext()
            item.run(ctx)
            assert future.result(timeout=0) == 1 and ctx.tasks == [item.task]
        finally:
            gate.set()


@pytest.mark.parametrize("make", [taut.ThreadPoolExecutor, cf.ThreadPoolExecutor])
def test_a_work_item_cancelled_after_it_was_taken_out_is_skipped_by_run(make: type) -> None:
    # The standard library's run() skips a cancelled call; taut's raised
    # RuntimeError: Future in unexpected state (logged as CRITICAL too).
    ran: list[int] = []
    gate = threading.Event()
    with make(1) as ex:
        try:
            blocker = ex.submit(gate.wait, LONG)
            while not blocker.running():  # the worker holds it: not in the queue
                gate.wait(0.001)
            future = ex.submit(ran.append, 1)
            item = ex._work_queue.get(block=False)
            assert item.future is future
            assert future.cancel()
            item.run(*_worker_context_for(ex))
            assert future.cancelled() and ran == []
        finally:
            gate.set()


def test_get_passes_over_a_queued_call_of_a_closed_event_loop() -> None:
    # An `await ex.run(...)` call still queued when its loop closed (closed
    # without cancelling its tasks): taking it out told its loop with
    # call_soon_threadsafe, whose RuntimeError ("Event loop is closed")
    # reached the caller of get_nowait(), and a pubsub-style drain stopped
    # there. Nobody awaits that call: get() passes over it.
    with taut.ThreadPoolExecutor(1) as ex:
        gate = _busy(ex)
        try:
            loop = asyncio.new_event_loop()

            async def queue_one() -> Any:
                task = loop.create_task(ex.run(abs, -1))
                while ex._work_queue.qsize() == 0:
                    await asyncio.sleep(0.001)
                return task

            task = loop.run_until_complete(queue_one())
            task._log_destroy_pending = False  # left pending on purpose
            loop.close()
            future = ex.submit(abs, -2)
            item = ex._work_queue.get_nowait()
            assert item.future is future
            with pytest.raises(queue.Empty):
                ex._work_queue.get_nowait()
        finally:
            gate.set()


def test_get_waits_up_to_its_timeout_and_put_takes_only_the_sentinel() -> None:
    with taut.ThreadPoolExecutor(1) as ex:
        with pytest.raises(queue.Empty):
            ex._work_queue.get(timeout=0.01)
        ex._work_queue.put(None)  # the stdlib's wake-up sentinel: accepted
        with pytest.raises(TypeError, match="only None"):
            ex._work_queue.put(object())


@pytest.mark.parametrize("make", [taut.ThreadPoolExecutor, cf.ThreadPoolExecutor])
def test_get_checks_its_timeout_as_simplequeue_does(make: type) -> None:
    # queue.SimpleQueue.get(True, -1) raises ValueError before it looks at the
    # queue; taut's view took the oldest call out as if the timeout were 0.
    # Without blocking, the timeout is not looked at, as there.
    gate = threading.Event()
    with make(1) as ex:
        try:
            blocker = ex.submit(gate.wait, LONG)
            while not blocker.running():
                gate.wait(0.001)
            future = ex.submit(abs, -3)
            wq = ex._work_queue
            # taut's messages name the parameter; the standard library's do
            # not always ("Invalid value NaN (not a number)").
            named = "timeout" if make is taut.ThreadPoolExecutor else None
            for bad in (-1, -0.5, math.nan):
                with pytest.raises(ValueError, match=named):
                    wq.get(True, bad)
            with pytest.raises(TypeError, match=named):
                wq.get(True, "1")
            assert wq.qsize() == 1  # nothing was taken out
            with pytest.raises(TypeError):
                wq.put_nowait(None, True)  # put_nowait takes the item only
            item = wq.get(False, -1)
            assert item.future is future
        finally:
            gate.set()


def test_idle_semaphore_value_counts_idle_workers() -> None:
    with taut.ThreadPoolExecutor(2) as ex:
        assert ex._idle_semaphore._value == 0
        ex.submit(abs, 1).result()
        # The worker went idle after its call (parked or about to).
        for _ in range(3000):
            if ex._idle_semaphore._value == 1:
                break
            threading.Event().wait(0.001)
        assert ex._idle_semaphore._value == 1
        assert ex._idle_semaphore.acquire(timeout=0) is True


def test_shutdown_and_broken_keep_their_stdlib_meaning() -> None:
    ex = taut.ThreadPoolExecutor(1)
    assert ex._shutdown is False and ex._broken is False
    ex.shutdown()
    assert ex._shutdown is True

    def fail() -> None:
        raise RuntimeError("initializer fails")

    broken = taut.ThreadPoolExecutor(1, initializer=fail)
    future = broken.submit(abs, 1)
    with pytest.raises(cf.thread.BrokenThreadPool):
        future.result(timeout=LONG)
    assert isinstance(broken._broken, str) and "initializer" in broken._broken
    broken.shutdown()


def test_a_dropped_executor_shuts_down_without_the_garbage_collector() -> None:
    # The views hold the Rust core, not the executor: no reference cycle, so
    # dropping the last reference shuts the pool down at once, as in the
    # standard library (CPython's test_del_shutdown; with a cycle its
    # workers would wait for a gc pass).
    import gc

    ex = taut.ThreadPoolExecutor(2)
    ex.submit(abs, 1).result(timeout=LONG)
    threads = list(ex._threads)
    gc.disable()
    try:
        del ex
        for t in threads:
            t.join(LONG)
            assert not t.is_alive()
    finally:
        gc.enable()
