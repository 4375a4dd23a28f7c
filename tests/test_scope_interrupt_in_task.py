"""A plain ``with ..., interrupt=True`` in an asyncio task whose block awaits.

``interrupt=True`` is for synchronous code (it rescues a loop blocked by it,
and a gather runs a sync call inline this way), but nothing stops the block
from awaiting. The thread interrupt then landed wherever the thread was at
the deadline, in the loop or in another task, and a private
``ScopeInterrupt`` stopped the whole loop. Now the interrupt is raised only
while the block runs on its thread; while it is suspended at an ``await`` the
task is cancelled instead, as a scope without ``interrupt`` does.
Lopsided timings: budgets of 0.05 s against waits of 30 s."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Any

import pytest

import taut
from taut import DeadlineExpired, fail_after, move_on_after

LONG = 30.0
SHORT = 0.05


async def _with_a_busy_neighbour(body: Any) -> Any:
    """``body()`` while another task keeps the loop busy with short awaits
    (where a stray interrupt would land); the neighbour must survive."""
    ticks = 0

    async def neighbour() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    other = asyncio.create_task(neighbour())
    try:
        return await body()
    finally:
        assert not other.done(), other
        other.cancel()


async def _fail_after_around_an_await() -> str:
    t0 = time.monotonic()
    try:
        with fail_after(SHORT, "awaiting", interrupt=True):
            await asyncio.sleep(LONG)
    except DeadlineExpired as e:
        assert type(e) is DeadlineExpired  # never the private ScopeInterrupt
        assert time.monotonic() - t0 < LONG / 3
        assert taut.remaining() is None
        return str(e)
    return "not expired"  # pragma: no cover - reported by the assert below


@pytest.mark.timeout(60)
def test_fail_after_with_interrupt_around_an_await_on_the_main_thread() -> None:
    result = asyncio.run(_with_a_busy_neighbour(_fail_after_around_an_await))
    assert result == "deadline expired after 0.05s: awaiting"


@pytest.mark.timeout(60)
def test_fail_after_with_interrupt_around_an_await_on_a_worker_thread() -> None:
    results: list[object] = []

    def run() -> None:
        try:
            results.append(asyncio.run(_with_a_busy_neighbour(_fail_after_around_an_await)))
        except BaseException as e:  # pragma: no cover - reported below
            results.append(e)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(LONG * 2)
    assert results == ["deadline expired after 0.05s: awaiting"]


@pytest.mark.timeout(60)
def test_move_on_after_with_interrupt_around_an_await_leaves_no_cancellation() -> None:
    async def body() -> bool:
        with move_on_after(SHORT, interrupt=True) as scope:
            await asyncio.sleep(LONG)
        await asyncio.sleep(SHORT)  # no stray cancellation or interrupt
        task = asyncio.current_task()
        assert task is not None
        if sys.version_info >= (3, 11):
            assert task.cancelling() == 0
        return scope.expired

    assert asyncio.run(_with_a_busy_neighbour(body)) is True


@pytest.mark.timeout(60)
def test_sync_code_after_an_await_in_the_block_is_still_interrupted() -> None:
    # The documented use keeps working when the block awaits first: the
    # blocked loop is rescued by the interrupt (main thread: SIGURG).
    async def body() -> str:
        t0 = time.monotonic()
        with move_on_after(SHORT, interrupt=True) as scope:
            await asyncio.sleep(0)
            time.sleep(LONG)
        assert time.monotonic() - t0 < LONG / 3
        return f"expired={scope.expired}"

    assert asyncio.run(body()) == "expired=True"
