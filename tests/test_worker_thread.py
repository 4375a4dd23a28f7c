"""taut's workers start without the submitter waiting for them to run when
the pool's calls are long, yet answer as running threads until they do:
``is_alive()`` is true and ``join()`` waits for them (the standard
library's raises for a thread that has not run yet). While calls are short
or not known yet, a start still waits, as the standard library's does."""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from tests._waiting import LONG, child_exit_code, wait_until

import taut
from taut._worker_thread import WorkerThread


@contextmanager
def _workers_held_before_running() -> Iterator[threading.Event]:
    """New worker threads are made but run no Python until the event is
    set (other threads run as usual)."""
    may_run = threading.Event()
    bootstrap = threading.Thread._bootstrap  # type: ignore[attr-defined]

    def held_back(thread: threading.Thread) -> None:
        may_run.wait(LONG)
        bootstrap(thread)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(WorkerThread, "_bootstrap", held_back)
        try:
            yield may_run
        finally:
            may_run.set()


def _in_a_thread(fn: object) -> threading.Event:
    """Run ``fn`` in a plain thread; the event is set once it returned."""
    returned = threading.Event()

    def run() -> None:
        fn()  # type: ignore[operator]
        returned.set()

    threading.Thread(target=run, daemon=True).start()
    return returned


def test_start_returns_before_the_thread_runs_and_it_counts_as_alive() -> None:
    ran = threading.Event()
    thread = WorkerThread(target=ran.set, daemon=True, wait_to_run=False)
    with _workers_held_before_running() as may_run:
        thread.start()
        # The standard library's start() would still be waiting here.
        assert not ran.is_set() and not thread._started.is_set()
        assert thread.started_or_made()
        assert thread.is_alive()
        thread.join(0.01)  # waits for it to run; does not raise
        assert thread.is_alive()
        may_run.set()
        thread.join(LONG)
    assert ran.is_set()
    assert not thread.is_alive()


def test_a_start_told_to_wait_waits_for_the_thread_to_run() -> None:
    thread = WorkerThread(target=int, daemon=True, wait_to_run=True)
    with _workers_held_before_running() as may_run:
        started = _in_a_thread(thread.start)
        assert not started.wait(0.05)  # held back: start() still waits
        assert thread.started_or_made() and thread.is_alive()
        may_run.set()
        assert started.wait(LONG)
    thread.join(LONG)
    assert not thread.is_alive()


def test_join_without_a_timeout_waits_for_a_thread_that_has_not_run() -> None:
    ran: list[int] = []
    thread = WorkerThread(target=ran.append, args=(1,), daemon=True, wait_to_run=False)
    with _workers_held_before_running() as may_run:
        thread.start()
        joined = _in_a_thread(thread.join)
        assert not joined.wait(0.05)  # the worker is held back
        may_run.set()
        assert joined.wait(LONG)
    assert ran == [1]


def test_a_second_start_before_the_thread_runs_is_refused() -> None:
    runs: list[int] = []
    thread = WorkerThread(target=runs.append, args=(1,), daemon=True, wait_to_run=False)
    with _workers_held_before_running():
        thread.start()
        with pytest.raises(RuntimeError, match="only be started once"):
            thread.start()
    thread.join(LONG)
    assert runs == [1]


def test_a_thread_not_started_is_neither_alive_nor_joinable() -> None:
    thread = WorkerThread(target=int, daemon=True, wait_to_run=False)
    assert not thread.started_or_made()
    assert not thread.is_alive()
    with pytest.raises(RuntimeError, match="before it is started"):
        thread.join()


def test_calls_count_as_long_only_once_one_has_run_long() -> None:
    # (How the average moves with short and long calls: the Rust core's
    # own tests, with the samples given by hand.)
    with taut.ThreadPoolExecutor(1) as ex:
        assert not ex._core.calls_are_long()  # a fresh pool: not known
        ex.submit(time.sleep, 0.01).result(LONG)
        assert ex._core.calls_are_long()


def test_a_fresh_pool_waits_for_the_worker_it_starts() -> None:
    ex = taut.ThreadPoolExecutor(1)
    try:
        with _workers_held_before_running() as may_run:
            submitted = _in_a_thread(lambda: ex.submit(int))
            assert not submitted.wait(0.05)  # submit waits in Thread.start
            may_run.set()
            assert submitted.wait(LONG)
    finally:
        ex.shutdown(wait=True)


def test_with_long_calls_submit_does_not_wait_for_the_workers_it_starts() -> None:
    ex = taut.ThreadPoolExecutor(3)
    gate = threading.Event()
    try:
        ex.submit(time.sleep, 0.01).result(LONG)
        assert ex._core.calls_are_long()
        first_worker = ex._threads
        held = ex.submit(gate.wait, LONG)  # the one worker stays busy
        wait_until(lambda: held.running())
        with _workers_held_before_running() as may_run:
            calls = [ex.submit(threading.get_ident) for _ in range(2)]
            # Two workers were made for them and neither has run yet: with
            # the standard library's start() the first submit would still
            # be waiting.
            workers = ex._threads - first_worker
            assert len(workers) == 2
            assert all(t.is_alive() and not t._started.is_set() for t in workers)  # type: ignore[attr-defined]
            assert not any(call.done() for call in calls)
            may_run.set()
            assert {call.result(LONG) for call in calls} <= {t.ident for t in workers}
    finally:
        gate.set()
        ex.shutdown(wait=False)
    # CPython's own tests join executor._threads after shutdown(wait=False).
    for thread in workers:
        thread.join(LONG)
        assert not thread.is_alive()
    wait_until(lambda: not ex._threads)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_worker_not_yet_running_at_a_fork_is_gone_in_the_child() -> None:
    thread = WorkerThread(target=int, daemon=True, wait_to_run=False)
    with _workers_held_before_running() as may_run, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 3.12+: fork of a multi-threaded process
        thread.start()
        pid = os.fork()
        if pid == 0:
            # The child: the thread was never made here. A join() that
            # waited for it would hang (the parent kills the child then).
            gone = not thread.is_alive() and not thread.started_or_made()
            thread.join()
            os._exit(0 if gone else 1)
        assert child_exit_code(pid) == 0
        assert thread.is_alive()  # the parent's still waits to run
        may_run.set()
    thread.join(LONG)
    assert not thread.is_alive()
