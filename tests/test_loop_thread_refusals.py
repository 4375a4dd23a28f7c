"""What an event loop's thread is refused at once by a full bounded queue
(``taut.QueueFull``, never a wait that would stall the loop), and that a
refusal leaves no call of the refused request behind."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import taut

LONG = 30.0


@pytest.mark.parametrize("buffersize", [None, 5])
def test_a_map_refused_on_a_loop_thread_leaves_no_queued_call_behind(
    buffersize: int | None,
) -> None:
    # On an event loop's thread, map() over a full bounded queue raises
    # QueueFull as its submits fill the queue. The caller gets no iterator,
    # so nobody could ever ask for the outcome of the calls queued before
    # the refusal: they must not run (a retried map would run them twice).
    # Before, they stayed queued and ran: 'ran' was [0, 1, 2], with the
    # caller holding only the QueueFull.
    ran: list[int] = []
    first_running, release = threading.Event(), threading.Event()

    def call(i: int) -> int:
        if i == 0:
            first_running.set()
            release.wait(LONG)
        ran.append(i)
        return i

    async def main() -> None:
        with taut.ThreadPoolExecutor(1, max_queue=2) as ex:
            running = ex.submit(call, 0)  # the worker is busy with this one
            assert first_running.wait(LONG)
            kwargs: dict[str, Any] = {} if buffersize is None else {"buffersize": buffersize}
            with pytest.raises(taut.QueueFull):
                ex.map(call, range(1, 10), **kwargs)
            assert ex.stats().queued == 0  # what map queued left with its refusal
            release.set()
            assert running.result(LONG) == 0

    asyncio.run(main())
    assert ran == [0]


def test_a_map_that_is_not_refused_still_runs_every_call() -> None:
    # The other side: a map whose submits all go through (here from a
    # thread without a loop, which waits for room) runs every call once.
    with taut.ThreadPoolExecutor(1, max_queue=2) as ex:
        start = time.monotonic()
        assert list(ex.map(abs, range(-5, 0))) == [5, 4, 3, 2, 1]
        assert time.monotonic() - start < LONG


@pytest.mark.parametrize("buffersize", [None, 5])
def test_a_map_on_a_bounded_queue_whose_input_fails_midway_runs_the_calls_it_submitted(
    buffersize: int | None,
) -> None:
    # Only the capacity refusal takes a map's calls back. With a bounded
    # queue map submits through submit() one call at a time (not the
    # unbounded fast path): an error of its input midway reaches the caller
    # and the calls submitted before it run, as with the standard library's
    # map (tests/test_executor_compat.py has the unbounded case).
    ran: list[int] = []
    gate = threading.Event()

    def items() -> Any:
        yield from range(3)
        raise KeyError("the input broke")

    def record(item: int) -> None:
        assert gate.wait(LONG)
        ran.append(item)

    ex = taut.ThreadPoolExecutor(1, max_queue=10)
    kwargs: dict[str, Any] = {} if buffersize is None else {"buffersize": buffersize}
    try:
        with pytest.raises(KeyError, match="the input broke"):
            ex.map(record, items(), **kwargs)
    finally:
        gate.set()
        ex.shutdown(wait=True)
    assert ran == [0, 1, 2]
