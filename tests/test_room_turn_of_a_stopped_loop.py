"""A coroutine told there is room in a bounded queue holds a turn until it
comes back: others in line wait behind it, in FIFO order. Its loop may stop
and stay open, never running again (or only much later): its turn must then
pass on, or coroutines of other, running loops wait for good in line with
the queue empty and the workers idle."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from _waiting import LONG, LoopWithoutReaders, abandon, one_queued, running_call, wait_until

import taut
from taut._loop_waker import waker_for

# The tests hold the stopped loop's task here, so that nothing collects it
# (a collected turn passes on by itself: not the case under test).
_held: list[asyncio.Future[Any]] = []


def _wait_in_line_then_stop(
    ex: taut.ThreadPoolExecutor, ran: list[str], new_loop: Any
) -> asyncio.AbstractEventLoop:
    """On a new loop (returned, stopped, open), a coroutine joins the line
    for room in ``ex``'s full queue; the loop stops with it waiting."""
    loop: asyncio.AbstractEventLoop = new_loop()

    async def join_the_line() -> None:
        _held.append(abandon(asyncio.ensure_future(ex.run(ran.append, "stopped loop"))))
        await asyncio.sleep(0)  # the task runs: the queue is full, it waits for room
        assert ex.stats().queued == 1

    loop.run_until_complete(join_the_line())
    return loop


# A loop with readers is told through its channel; one without (Windows'
# proactor loop) through taut's callback thread and call_soon_threadsafe.
LOOPS = {"readers": asyncio.new_event_loop, "no readers": LoopWithoutReaders}


@pytest.mark.parametrize("stopped_kind", LOOPS)
@pytest.mark.parametrize("running_kind", LOOPS)
def test_a_turn_held_by_a_stopped_loop_passes_on_to_a_coroutine_of_a_running_loop(
    stopped_kind: str, running_kind: str
) -> None:
    # Before the fix, "running loop" waited in line for good: the turn went
    # to the stopped loop's coroutine, and nothing else left the queue.
    ran: list[str] = []
    stopped: list[asyncio.AbstractEventLoop] = []

    def run_the_stopped_loop_again() -> None:
        loop = stopped[0]
        try:
            loop.run_until_complete(asyncio.wait_for(_held[0], LONG))
        finally:
            loop.close()

    async def main() -> None:
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            running, queued = threading.Event(), threading.Event()
            blocker = await running_call(ex, running.wait, LONG)
            held_queued = asyncio.ensure_future(ex.run(queued.wait, LONG))
            await one_queued(ex)
            new_loop = LOOPS[stopped_kind]
            joining = threading.Thread(
                target=lambda: stopped.append(_wait_in_line_then_stop(ex, ran, new_loop))
            )
            joining.start()
            joining.join(LONG)
            second = asyncio.ensure_future(ex.run(ran.append, "running loop"))
            await asyncio.sleep(0)  # it waits behind the stopped loop's coroutine
            # Room for one: the stopped loop's coroutine is told (its loop
            # never reads it); then the queue empties and the worker idles.
            running.set()
            await blocker
            wait_until(lambda: ex.stats().queued == 0)
            queued.set()
            await held_queued
            await asyncio.wait_for(second, LONG)
            assert ran == ["running loop"]
            # Run again, the stopped loop's coroutine comes back for its
            # turn, is let in (or refused and told again), and its call runs.
            await asyncio.to_thread(run_the_stopped_loop_again)
            assert ran == ["running loop", "stopped loop"]
            assert not ex._core.has_room_line()
            # With nobody in line any more, the loop's watch stops looking.
            watch = waker_for(asyncio.get_running_loop()).room_watch
            until = time.monotonic() + LONG
            while watch._timer is not None and time.monotonic() < until:
                await asyncio.sleep(0.01)
            assert watch._timer is None

    loop = LOOPS[running_kind]()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
        _held.clear()
