"""Helpers for tests that wait on threads: a generous bound that only limits
how long a failing test takes, and a poll that never decides a pass by time."""

from __future__ import annotations

import asyncio
import os
import signal
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


def child_exit_code(pid: int, limit: float = LONG) -> int:
    """The exit code of forked child ``pid``. One that has not ended within
    ``limit`` seconds (deadlocked) is killed and fails the test: it must
    not hang the run."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"forked child {pid} still running after {limit} s (deadlocked?)")


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


async def one_queued(executor: Any) -> None:
    """Until a call waits in the executor's queue; then exactly one does.
    The polling only bounds a failure."""
    deadline = time.monotonic() + LONG
    while executor.stats().queued == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.001)
    assert executor.stats().queued == 1


async def no_line_left(executor: Any) -> None:
    """Every coroutine that waited for room in the executor's bounded queue
    came back or gave its turn up: with room in the queue, a new call goes
    straight in, in one pass (not through the line and the loop's channel)."""
    gate = threading.Event()
    blocker = await running_call(executor, gate.wait, LONG)
    late = asyncio.ensure_future(executor.run(abs, -1))
    await asyncio.sleep(0)
    assert executor.stats().queued == 1
    gate.set()
    assert await asyncio.wait_for(late, LONG) == 1
    await blocker


class LoopWithoutReaders(asyncio.SelectorEventLoop):
    """A loop that cannot watch descriptors, as Windows' proactor loop (the
    default loop there): no channel, so taut takes its fallback path (a
    plain submit; told there is room through its callback thread and
    ``call_soon_threadsafe``)."""

    def add_reader(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError


def abandon(task: asyncio.Future[Any]) -> asyncio.Future[Any]:
    """Mark ``task`` as left pending on purpose on a loop that the test
    closes under it (the scenario under test), and return it. Such a task is
    never finished, and asyncio reports it as "destroyed but pending" once
    it is collected: at a later garbage collection or at interpreter exit,
    where nobody can tell which test left it (see conftest's
    no_pending_task_destroyed). ``run_until_complete`` silences the report
    for its own task the same way."""
    task._log_destroy_pending = False  # type: ignore[attr-defined]
    return task
