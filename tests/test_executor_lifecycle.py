"""taut.ThreadPoolExecutor's lifecycle at its edges: shutdown called from the
pool's own workers and callbacks, and what a program then does at exit.
Cases that could hang run in a fresh interpreter, bounded by a timeout."""

from __future__ import annotations

import concurrent.futures as cf
import gc
import subprocess
import sys
import textwrap
import threading
import weakref
from concurrent.futures.thread import BrokenThreadPool

import pytest
from _waiting import LONG

import taut


def run_python(code: str, timeout: float = LONG) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new interpreter; ``timeout`` only bounds a hang."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_workers_that_all_shut_their_own_pool_down_do_not_wait_for_each_other() -> None:
    # Each worker waits in shutdown(wait=True) for the others to exit; two
    # waiting for each other waited for good, and so did the exit hook.
    result = run_python(
        """
        import concurrent.futures as cf, threading, taut
        ex = taut.ThreadPoolExecutor(3)
        both = threading.Barrier(3)
        def shut_down():
            both.wait()
            ex.shutdown(wait=True)
            return "returned"
        futures = [ex.submit(shut_down) for _ in range(3)]
        done, pending = cf.wait(futures, timeout=10)
        print(len(done), len(pending), sorted({f.result() for f in done}))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == "3 0 ['returned']"


def _raise_keyboard_interrupt(future: object) -> None:
    # Stands in for a Ctrl-C landing while shutdown settles the queued
    # calls: it comes out of one future's settling, mid-way.
    raise KeyboardInterrupt


def test_an_interrupt_while_shutdown_cancels_the_queue_leaves_no_call_pending() -> None:
    ex = taut.ThreadPoolExecutor(1)
    gate = threading.Event()
    running = ex.submit(gate.wait, LONG)
    queued = [ex.submit(int, i) for i in range(10)]
    queued[3].add_done_callback(_raise_keyboard_interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            ex.shutdown(wait=False, cancel_futures=True)
        # Out of the queue, the calls after the interrupted one were never
        # settled: their waiters waited for good.
        assert [f.cancelled() for f in queued] == [True] * 10
        _, pending = cf.wait(queued, timeout=0)
        assert not pending
    finally:
        gate.set()
    assert running.result(LONG) is True


# The callback's KeyboardInterrupt ends the worker that failed the queue,
# after it has: pytest reports it as unhandled in that thread.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_an_interrupt_while_a_broken_pool_fails_its_queue_leaves_no_call_pending() -> None:
    started = threading.Event()

    def initializer() -> None:
        started.wait(LONG)
        raise ValueError("initializer failed")

    ex = taut.ThreadPoolExecutor(1, initializer=initializer)
    queued = [ex.submit(int, i) for i in range(10)]
    queued[3].add_done_callback(_raise_keyboard_interrupt)
    (worker,) = ex._threads
    started.set()
    _, pending = cf.wait(queued, timeout=LONG)
    assert not pending
    worker.join(LONG)  # its report of the interrupt falls within this test
    assert {type(f.exception()) for f in queued} == {BrokenThreadPool}


def test_an_executor_dropped_before_its_initializer_fails_still_fails_its_queued_calls() -> None:
    # `ThreadPoolExecutor(...).submit(...)` keeps no reference to the pool:
    # the failing worker found no executor to break, and the calls queued
    # behind it stayed pending for good (as in the standard library).
    proceed = threading.Event()

    def initializer() -> None:
        proceed.wait(LONG)
        raise ValueError("initializer failed")

    ex = taut.ThreadPoolExecutor(1, initializer=initializer)
    queued = [ex.submit(int, i) for i in range(3)]
    gone = weakref.ref(ex)
    del ex
    gc.collect()
    assert gone() is None
    proceed.set()
    _, pending = cf.wait(queued, timeout=LONG)
    assert not pending
    assert {type(f.exception()) for f in queued} == {BrokenThreadPool}


def test_a_done_callback_that_shuts_the_pool_down_while_shutdown_cancels_it_returns() -> None:
    # The callbacks of the calls shutdown(cancel_futures=True) cancels ran
    # under its lock: one calling shutdown() again waited for that lock for
    # good (so does the standard library's).
    result = run_python(
        """
        import threading, taut
        ex = taut.ThreadPoolExecutor(1)
        gate = threading.Event()
        running = ex.submit(gate.wait, 30)
        queued = ex.submit(int)
        queued.add_done_callback(lambda f: ex.shutdown(wait=False))
        ex.shutdown(wait=False, cancel_futures=True)
        gate.set()
        print(queued.cancelled(), running.result(30))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "True True\n"


def test_a_done_callback_that_shuts_a_broken_pool_down_returns() -> None:
    # Likewise for the calls a failed initializer fails with BrokenThreadPool.
    result = run_python(
        """
        import concurrent.futures as cf, logging, threading, taut
        logging.disable(logging.CRITICAL)
        proceed = threading.Event()
        def initializer():
            proceed.wait(30)
            raise ValueError("initializer failed")
        ex = taut.ThreadPoolExecutor(1, initializer=initializer)
        queued = [ex.submit(int, i) for i in range(3)]
        queued[0].add_done_callback(lambda f: ex.shutdown(wait=False))
        proceed.set()
        _, pending = cf.wait(queued, timeout=10)
        print(len(pending), {type(f.exception()).__name__ for f in queued if f.done()})
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "0 {'BrokenThreadPool'}\n"


class _InterruptedAfterDrain:
    """A pool core whose drain is followed at once by a KeyboardInterrupt:
    where a Ctrl-C that came during the (long, GIL-holding) drain of a large
    queue is raised, before Python could keep what it returned."""

    def __init__(self, core: object) -> None:
        self._core = core

    def __getattr__(self, name: str) -> object:
        return getattr(self._core, name)

    def drain(self, *args: object, **kwargs: object) -> object:
        self._core.drain(*args, **kwargs)  # type: ignore[attr-defined]
        raise KeyboardInterrupt


def test_an_interrupt_the_moment_shutdown_drains_the_queue_leaves_no_call_pending() -> None:
    ex = taut.ThreadPoolExecutor(1)
    gate = threading.Event()
    running = ex.submit(gate.wait, LONG)
    queued = [ex.submit(int, i) for i in range(10)]
    ex._core = _InterruptedAfterDrain(ex._core)  # type: ignore[assignment]
    try:
        with pytest.raises(KeyboardInterrupt):
            ex.shutdown(wait=False, cancel_futures=True)
        _, pending = cf.wait(queued, timeout=0)
        assert not pending
        assert all(f.cancelled() for f in queued)
    finally:
        gate.set()
    assert running.result(LONG) is True


def test_the_exit_hook_lets_go_of_a_state_lock_the_main_thread_leaked() -> None:
    """On CPython 3.9 a Ctrl-C landing as a ``with _state_lock:`` block ends
    skips the release (CPython's bpo-29988): the main thread kept the lock,
    the worker settling a call waited for it, and so did the exit hook's
    join of that worker, for good (seen once in 36 runs of the test below
    under load). The leak is made by hand here, on every version."""
    result = run_python(
        """
        import threading, time, taut
        from taut import _future
        ex = taut.ThreadPoolExecutor(1)
        assert ex.submit(int).result() == 0  # the worker is up
        _future._state_lock.acquire()  # leaked, as by the interrupt
        ex.submit(int)  # its worker waits for the lock to start or settle it
        time.sleep(0.1)
        print("ending", flush=True)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ending\n", result.stdout


def test_a_real_ctrl_c_during_shutdown_cancelling_a_large_queue_leaves_no_call_pending() -> None:
    # One SIGINT at a different moment of each shutdown: before it, during
    # the drain of the queue (the core holds the GIL; the interrupt is raised
    # at the first check after it returns: on 3.13, the entry of the next
    # function called) or during the cancelling. Every call must end, run or
    # cancelled, whenever it lands. The twelve shutdowns of 100k calls take
    # about 9 s on a quiet 2-core machine and over 30 s beside a second test
    # suite: the bounds below (the child's wait, the child itself) only stop
    # a hang, and a call left pending fails the test whatever its time.
    result = run_python(
        f"""
        import concurrent.futures as cf, signal, threading, time, taut
        main = threading.main_thread().ident
        for step in range(12):
            ex = taut.ThreadPoolExecutor(1)
            gate = threading.Event()
            ex.submit(gate.wait, 30)
            queued = [ex.submit(int) for _ in range(100_000)]
            sender = threading.Timer(0.005 * step, signal.pthread_kill, (main, signal.SIGINT))
            try:
                sender.start()
                ex.shutdown(wait=False, cancel_futures=True)
                sender.join()
                time.sleep(0.3)  # the interrupt lands here if shutdown was done
            except KeyboardInterrupt:
                pass
            sender.join()
            gate.set()
            _, pending = cf.wait(queued, timeout={LONG})  # cancelled or run: ends
            print(step, len(pending), flush=True)
        """,
        timeout=12 * LONG,
    )
    assert result.returncode == 0, result.stderr
    pending = [line.split()[1] for line in result.stdout.splitlines()]
    assert pending == ["0"] * 12, result.stdout
