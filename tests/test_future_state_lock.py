"""``taut._future._state_lock``, a ``taut._core.FutureStateLock``: what the
futures' Python code used of ``threading.RLock`` (``with``, re-entry, the
exit hook's ``_is_owned``/``release``), a wait for it that a Ctrl-C ends,
and arguments checked as the rest of taut checks them."""

from __future__ import annotations

import math
import os
import signal
import threading
import time

import pytest

from taut import _future
from taut._core import FutureStateLock

LONG = 30.0


def _in_other_thread(work: object) -> object:
    """``work()`` run on another thread; its return value."""
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(work()))  # type: ignore[operator]
    thread.start()
    thread.join(LONG)
    assert not thread.is_alive()
    return out[0]


def test_the_futures_state_lock_is_one() -> None:
    assert isinstance(_future._state_lock, FutureStateLock)


def test_the_holder_takes_it_again_and_frees_it_at_its_last_release() -> None:
    lock = FutureStateLock()
    with lock:
        with lock:
            assert lock._is_owned()
        assert lock.locked(), "the inner block's end must not free it"
    assert not lock.locked()
    assert not lock._is_owned()
    with pytest.raises(RuntimeError, match="un-acquired"):
        lock.release()


def test_another_thread_neither_takes_nor_releases_it_while_it_is_held() -> None:
    lock = FutureStateLock()
    assert lock.acquire()

    def try_it() -> tuple[bool, bool, bool, str]:
        owned = lock._is_owned()
        no_wait = lock.acquire(blocking=False)
        timed = lock.acquire(timeout=0.05)
        try:
            lock.release()
        except RuntimeError as error:
            return owned, no_wait, timed, str(error)
        return owned, no_wait, timed, "released"

    assert _in_other_thread(try_it) == (False, False, False, "cannot release un-acquired lock")
    assert lock._is_owned()
    lock.release()


def test_a_thread_waiting_for_it_takes_it_once_the_holder_lets_go() -> None:
    lock = FutureStateLock()
    took = threading.Event()
    lock.acquire()

    def wait_for_it() -> None:
        with lock:
            took.set()

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    assert not took.wait(0.1)
    lock.release()
    assert took.wait(LONG)
    waiter.join(LONG)
    assert not lock.locked()


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs signal.pthread_kill")
def test_a_signal_ends_the_main_threads_wait_for_it() -> None:
    """A Ctrl-C interrupted a wait for the RLock; it must end this one too
    (the holder here keeps the lock for far longer than the test waits)."""

    class Interrupted(Exception):
        pass

    def interrupted(signum: int, frame: object) -> None:
        raise Interrupted

    lock = FutureStateLock()
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            done.wait(LONG)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(LONG)
    main = threading.main_thread().ident
    assert main == threading.get_ident()
    sender = threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGUSR1))
    previous = signal.signal(signal.SIGUSR1, interrupted)
    try:
        start = time.monotonic()
        sender.start()
        with pytest.raises(Interrupted):
            lock.acquire()
        assert time.monotonic() - start < LONG / 2
        assert not lock._is_owned()
    finally:
        signal.signal(signal.SIGUSR1, previous)
        sender.cancel()
        done.set()
        holder.join(LONG)


@pytest.mark.parametrize("timeout", [-2.0, -0.5, math.nan])
def test_a_bad_timeout_is_refused_by_name(timeout: float) -> None:
    with pytest.raises(ValueError, match=r"timeout must be a non-negative number.*got"):
        FutureStateLock().acquire(timeout=timeout)


def test_a_timeout_without_blocking_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"timeout cannot be given with blocking=False"):
        FutureStateLock().acquire(False, 1.0)


@pytest.mark.parametrize("timeout", [math.inf, 1e300])
def test_a_timeout_too_long_for_the_clock_waits_without_limit(timeout: float) -> None:
    lock = FutureStateLock()
    assert lock.acquire(timeout=timeout)  # free: taken at once
    lock.release()
    assert repr(lock) == "<taut._core.FutureStateLock unlocked>"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_gets_a_free_lock_of_its_own() -> None:
    # Held by this (forking) thread: the child's copy would say so for good.
    with _future._state_lock:
        pid = os.fork()
        if pid == 0:  # the child
            fresh = isinstance(_future._state_lock, FutureStateLock)
            os._exit(0 if fresh and not _future._state_lock.locked() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
