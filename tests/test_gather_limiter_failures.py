"""A limiter that fails (``gather(..., limiter=...)``): its ``release()`` or
its ``acquire()`` raises (a Redis-backed limiter losing its connection), or
``acquire`` answers something that is not a bool.

Whatever the limiter does, nothing is lost: every call ends in exactly one
outcome, calls already running are settled (and journaled) before a failure
reaches the caller, and no handle is left "running".
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from _waiting import LONG

import taut


@pytest.fixture
def pool() -> Iterator[taut.ThreadPoolExecutor]:
    with taut.ThreadPoolExecutor(4) as ex:
        yield ex


def _gather(asynchronous: bool, handles: list[Any], **kwargs: Any) -> list[taut.Outcome]:
    if asynchronous:

        async def main() -> list[taut.Outcome]:
            return await taut.agather(handles, **kwargs)

        return asyncio.run(main())
    return taut.gather(handles, **kwargs)


both = pytest.mark.parametrize("asynchronous", [False, True], ids=["gather", "agather"])


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


@both
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
            outs = _gather(
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
