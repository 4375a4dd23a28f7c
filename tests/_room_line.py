"""The line for room in a bounded queue, as the Ctrl-C probes set it up: a
full queue, coroutines waiting in line on their loops, the first one told
there is room.

Imported by the probe scripts, which run in a fresh interpreter with this
folder on their path (``_opcode_events.run_probe``)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable

import taut
from taut import _loop_waker


def full_queue() -> tuple[taut.ThreadPoolExecutor, threading.Event]:
    """An executor with one worker and room for one queued call, full: a
    call running and one queued, both waiting for the gate returned.
    ``gate.set()`` ends both: then there is room for the first in line."""
    ex = taut.ThreadPoolExecutor(1, max_queue=1)
    gate = threading.Event()
    ex.submit(gate.wait, 60)  # running
    ex.submit(gate.wait, 60)  # queued: the queue is full
    return ex, gate


def join_the_line(loop: asyncio.AbstractEventLoop, coro: Any) -> asyncio.Task[Any]:
    """``coro`` as a task on ``loop``, run until it waits in the line: a few
    passes of the loop, which then stops (it runs again only when a probe
    runs it)."""
    task = loop.create_task(coro)
    for _ in range(3):
        loop.run_until_complete(asyncio.sleep(0))
    return task


def wait_until_told(told: Callable[[], object]) -> None:
    """Poll until ``told()`` (the first in line, "A", was told there is
    room, on a thread of taut's); 60 s only bound a failing run."""
    until = time.monotonic() + 60
    while not told():
        assert time.monotonic() < until, "A was never told"
        time.sleep(0.001)


def start_another_loop_on_taut() -> None:
    """A new loop starts using taut, and closes: taut looks at the loops it
    knows for closed ones then, so a loop that told nobody it closed (one
    without readers, or one cut short as it did) has its turns passed on."""
    loop = asyncio.new_event_loop()
    _loop_waker.waker_for(loop)
    loop.close()


def ends_in_time(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` (waiting in line) ends within 10 s of running
    ``loop``: False means no one ever told it there was room."""
    try:
        loop.run_until_complete(asyncio.wait_for(task, 10))
    except asyncio.TimeoutError:
        return False
    return True
