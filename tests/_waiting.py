"""Helpers for tests that wait on threads: a generous bound that only limits
how long a failing test takes, and a poll that never decides a pass by time."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable

LONG = 30.0  # seconds a "never" wait may take before the test fails


def wait_until(predicate: Callable[[], object], timeout: float = LONG) -> None:
    """Poll a condition until it holds; the polling only bounds a failure."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.001)


async def running_call(executor: Any, fn: Callable[..., object], *args: Any) -> asyncio.Future[Any]:
    """Start ``await executor.run(fn, *args)`` as a task and return the task
    once a worker runs the call: once ``fn`` itself has started, not merely
    once a worker popped it (a worker that has popped a call still checks
    whether its awaiting task was cancelled before it runs it). The polling
    only bounds a failure."""
    started = threading.Event()

    def call() -> object:
        started.set()
        return fn(*args)

    task: asyncio.Future[Any] = asyncio.ensure_future(executor.run(call))
    deadline = time.monotonic() + LONG
    while not started.is_set():
        if time.monotonic() > deadline:
            raise AssertionError("the call never started")
        await asyncio.sleep(0.001)
    return task
