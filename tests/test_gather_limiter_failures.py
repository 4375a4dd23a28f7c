"""A limiter that fails (``gather(..., limiter=...)``): its ``release()`` or
its ``acquire()`` raises (a Redis-backed limiter losing its connection), or
``acquire`` answers something that is not a bool.

Whatever the limiter does, nothing is lost: every call ends in exactly one
outcome, calls already running are settled (and journaled) before a failure
reaches the caller, and no handle is left "running".
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from _gathering import both_drivers, gather_with
from _waiting import LONG

import taut


@pytest.fixture
def pool() -> Iterator[taut.ThreadPoolExecutor]:
    with taut.ThreadPoolExecutor(4) as ex:
        yield ex


class BrokenRelease:
    """Hands out slots, then fails every time one is given back."""

    def __init__(self, slots: int = 4) -> None:
        self.sem = threading.BoundedSemaphore(slots)

    def acquire(self, timeout: float | None = None) -> bool:
        return self.sem.acquire(timeout=timeout)

    def release(self) -> None:
        self.sem.release()
        raise ConnectionError("release: connection lost")


# -- release() raises -----------------------------------------------------


@both_drivers
def test_a_release_that_raises_at_the_deadline_still_settles_every_call(
    pool: Any, asynchronous: bool, caplog: pytest.LogCaptureFixture
) -> None:
    never = threading.Event()
    handles = [
        taut.call(str, "quick"),
        taut.call(never.wait, LONG),
        taut.call(never.wait, LONG),
    ]
    try:
        with caplog.at_level(logging.ERROR):
            outs = gather_with(
                asynchronous, handles, executor=pool, limiter=BrokenRelease(), timeout=0.2
            )
    finally:
        never.set()
    assert [o.status for o in outs] == ["ok", "timeout", "timeout"]
    assert all(h.done() for h in handles)  # none left "running"
    with pytest.raises(TimeoutError):
        handles[1].result()  # the cached timeout, at once
    assert "release" in caplog.text  # the failure is not swallowed silently


def test_a_release_that_raises_while_the_batch_aborts_lets_go_of_every_handle(
    pool: Any,
) -> None:
    never = threading.Event()

    def interrupted() -> None:
        raise KeyboardInterrupt

    waiting = taut.call(never.wait, LONG)
    handles = [waiting, taut.call(interrupted)]
    try:
        # The interruption propagates, not the limiter's failure to take
        # the still running call's slot back.
        with pytest.raises(KeyboardInterrupt):
            taut.gather(handles, executor=pool, limiter=BrokenRelease())
    finally:
        never.set()
    assert not any(h.done() for h in handles)
    # Both went cold: they can run again (a handle left "running" is refused).
    assert [o.status for o in taut.gather([waiting], executor=pool)] == ["ok"]


# -- acquire() raises or answers nonsense ---------------------------------


class FailsOnSecondAcquire:
    """A shared limiter whose connection drops after the first slot."""

    def __init__(self) -> None:
        self.sem = threading.BoundedSemaphore(10)
        self.acquires = 0
        self.failed = threading.Event()
        # The first call has begun: the drop comes while it runs (a call
        # handed to the pool but not begun when the batch halts never begins).
        self.first_began = threading.Event()

    def acquire(self, timeout: float | None = None) -> bool:
        self.acquires += 1
        if self.acquires == 2:
            assert self.first_began.wait(LONG)
            self.failed.set()
            raise ConnectionError("acquire: connection lost")
        return self.sem.acquire(timeout=timeout)

    def release(self) -> None:
        self.sem.release()


@both_drivers
def test_an_acquire_that_raises_settles_the_calls_already_running_then_raises(
    pool: Any, asynchronous: bool
) -> None:
    limiter = FailsOnSecondAcquire()
    ran: list[str] = []

    def first() -> str:
        # Still running when the limiter fails for the second call.
        limiter.first_began.set()
        limiter.failed.wait(LONG)
        ran.append("first")
        return "first"

    def later(name: str) -> str:
        ran.append(name)
        return name

    journal = taut.InMemoryJournal()
    handles = [
        taut.call(first, call_id="first"),
        taut.call(later, "second", call_id="second"),
        taut.call(later, "third", call_id="third"),
    ]
    with pytest.raises(ConnectionError, match="acquire: connection lost"):
        gather_with(
            asynchronous, handles, executor=pool, limiter=limiter, journal=journal, timeout=LONG
        )
    # The running call was waited for, settled and recorded; nothing else started.
    assert ran == ["first"]
    assert handles[0].done() and handles[0].result() == "first"
    assert journal.records() == [
        (0, "first", "ok"),
        (1, "second", "pending"),
        (2, "third", "pending"),
    ]
    assert not handles[1].done() and not handles[2].done()
    assert limiter.sem.acquire(timeout=0)  # its slot came back
    # Once the limiter works again, the same handles finish the batch.
    outs = gather_with(asynchronous, handles, executor=pool, limiter=limiter, journal=journal)
    assert [o.value for o in outs] == ["first", "second", "third"]
    # Each once; second and third run side by side on the pool (4 workers,
    # 10 slots), in either order.
    assert ran[0] == "first" and sorted(ran[1:]) == ["second", "third"], ran


class AnswersNone:
    def acquire(self, timeout: float | None = None) -> None:
        return None

    def release(self) -> None:
        pass


class AnswersNoneWithBrokenRepr(AnswersNone):
    def __repr__(self) -> str:
        raise RuntimeError("from the limiter's __repr__")


@both_drivers
@pytest.mark.parametrize(
    ("limiter_type", "shown_as"),
    # With a raising __repr__: before, the limiter's own RuntimeError escaped
    # from the message's repr().
    [(AnswersNone, "AnswersNone"), (AnswersNoneWithBrokenRepr, "<unrepresentable>")],
)
def test_an_acquire_that_answers_none_is_a_type_error_naming_the_limiter(
    pool: Any, asynchronous: bool, limiter_type: type, shown_as: str
) -> None:
    handles = [taut.call(str, "a"), taut.call(str, "b")]
    must = rf"limiter\.acquire\(timeout=\.\.\.\) must return a bool.*None.*{shown_as}"
    with pytest.raises(TypeError, match=must):
        gather_with(asynchronous, handles, executor=pool, limiter=limiter_type(), timeout=5)
    assert not any(h.done() for h in handles)  # cold: they can run again
