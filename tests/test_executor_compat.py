"""taut.ThreadPoolExecutor as a drop-in for concurrent.futures.ThreadPoolExecutor:
asyncio interop, mixed futures in wait()/as_completed(), the stdlib's errors and
messages, thread names, and regression tests for what CPython's own suite
(tests/cpython_suite/run_threadpool_suite.py) found."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import taut

LONG = 30.0  # seconds a "never" wait may take before the test fails


def wait_until(predicate, timeout=LONG):
    """Poll a condition until it holds; the polling only bounds a failure."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.001)


# -- regressions found by CPython's test_concurrent_futures ------------------


def test_threads_set_held_by_caller_does_not_change_while_workers_exit():
    """CPython's test_shutdown_no_wait iterates `executor._threads` while the
    workers exit: the set must not change size under the caller."""
    ex = taut.ThreadPoolExecutor(3)
    gate = threading.Event()
    futures = [ex.submit(gate.wait, LONG) for _ in range(3)]
    threads = ex._threads
    before = set(threads)
    assert len(before) == 3
    gate.set()
    ex.shutdown(wait=True)
    for thread in threads:  # raised "Set changed size during iteration"
        thread.join(LONG)
    assert threads == before
    assert all(f.result() for f in futures)
    assert not ex._threads  # the executor's own view: no live workers


def test_one_call_at_a_time_reuses_one_worker():
    """CPython's test_idle_thread_reuse: a worker that finished is counted
    as idle before it lets go of the GIL, so the waiter's next submit reuses
    it instead of racing it and starting a second thread. The race was lost
    in about one fresh executor in seven; 50 of them make a miss certain."""
    for _ in range(50):
        ex = taut.ThreadPoolExecutor()
        try:
            for i in range(3):
                assert ex.submit(pow, i, 2).result(LONG) == i * i
            assert len(ex._threads) == 1
            assert ex.stats().workers == 1
        finally:
            ex.shutdown(wait=True)


def test_shutdown_cancel_futures_runs_calls_a_worker_was_started_for():
    """CPython's test_cancel_futures_wait_false: a call submitted to a pool
    with room starts a worker for it; `shutdown(cancel_futures=True)` right
    after must let it run (in the stdlib the fresh worker takes it first)
    and cancel only the calls that wait behind running ones."""
    for _ in range(50):
        ex = taut.ThreadPoolExecutor(1)
        first = ex.submit(pow, 2, 3)
        ex.shutdown(wait=True, cancel_futures=True)
        assert not first.cancelled()
        assert first.result(LONG) == 8

    ex = taut.ThreadPoolExecutor(1)
    gate = threading.Event()
    running = ex.submit(gate.wait, LONG)
    wait_until(lambda: running.running())
    waiting = [ex.submit(pow, 2, i) for i in range(3)]
    ex.shutdown(wait=False, cancel_futures=True)
    assert all(f.cancelled() for f in waiting)
    gate.set()
    ex.shutdown(wait=True)
    assert running.result(LONG) is True


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_cancels_the_parents_queued_calls_quietly():
    """CPython's test_hang_global_shutdown_lock forks with a pool alive: the
    child's fork handler raised AttributeError (PoolCore.drain_after_fork
    was missing), so the queued futures it inherited were never cancelled."""
    code = """
        import os, threading, taut
        ex = taut.ThreadPoolExecutor(1)
        gate = threading.Event()
        running = ex.submit(gate.wait, 30)
        while not running.running():
            pass
        queued = ex.submit(pow, 2, 5)
        pid = os.fork()
        if pid == 0:
            ok = queued.cancelled() and ex.submit(pow, 3, 2).result(timeout=20) == 9
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        gate.set()
        print("child", os.waitstatus_to_exitcode(status), "parent", queued.result(30))
        """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["child", "0", "parent", "32"]
    assert result.stderr == ""
