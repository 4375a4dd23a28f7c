"""Deadline scopes across event loops and threads.

A scope in a task arms its deadline through the loop's wake-up channel
(``taut._loop_waker``), and before CPython 3.12 finds its loop through the
last loop a scope used (``_loop_waker.last_seen``) when that loop still runs on
this thread. These tests make that shortcut meet every case where it could
pick the wrong loop or task: loops one after the other on one thread, loops
on several threads at once, a loop that does not run as asyncio's do, and a
loop closed while a scope is armed. Budgets are lopsided (0.05 s against
work of 30 s), or far (30 s) for scopes that must not expire.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from typing import Any

import pytest
from _waiting import wait_until

import taut
from taut import _loop_waker
from taut.deadline._context import innermost

SHORT = 0.05
LONG = 30.0

pytestmark = pytest.mark.timeout(60)


async def _expires() -> bool:
    """True if a short move_on scope expired and cancelled this very task."""
    async with taut.move_on_after(SHORT) as scope:
        await asyncio.sleep(LONG)
    return scope.expired


async def _in_time() -> bool:
    """True if a far scope exited in time without touching the task."""
    task = asyncio.current_task()
    assert task is not None
    async with taut.fail_after(LONG) as scope:
        await asyncio.sleep(0)
    return not scope.expired and task.cancelling() == 0 if sys.version_info >= (3, 11) else True


def test_loops_one_after_the_other_on_one_thread() -> None:
    # The shortcut remembers the first loop; the second must not be mistaken
    # for it (the first one no longer runs), and its expiry must land.
    for _ in range(3):
        assert asyncio.run(_in_time())
        assert asyncio.run(_expires())


def test_loops_on_many_threads_cancel_their_own_tasks() -> None:
    results: dict[int, list[bool]] = {}
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        async def main() -> list[bool]:
            out = []
            for _ in range(20):
                out.append(await _in_time())
            out.append(await _expires())
            for _ in range(20):
                out.append(await _in_time())
            return out

        try:
            results[n] = asyncio.run(main())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LONG)
    assert errors == []
    assert sorted(results) == [0, 1, 2, 3]
    assert all(all(r) for r in results.values())


def test_a_scope_does_not_use_a_loop_running_on_another_thread() -> None:
    # Thread A's loop runs a scope (so the shortcut points at it) and keeps
    # running; a scope on this thread's loop must cancel this thread's task.
    a_ready = threading.Event()
    a_stop: list[asyncio.AbstractEventLoop] = []
    a_cancelled: list[bool] = []

    def run_a() -> None:
        async def main() -> None:
            a_stop.append(asyncio.get_running_loop())
            async with taut.fail_after(LONG):
                pass
            a_ready.set()
            try:
                await asyncio.sleep(LONG)
            except asyncio.CancelledError:
                a_cancelled.append(True)
                raise

        try:
            asyncio.run(main())
        except asyncio.CancelledError:
            pass

    thread = threading.Thread(target=run_a)
    thread.start()
    try:
        assert a_ready.wait(LONG)
        ref, _, _, _ = _loop_waker.last_seen[0]
        assert ref is not None and ref() is a_stop[0]
        assert asyncio.run(_expires())
        assert a_cancelled == []
    finally:
        loop = a_stop[0]
        task_list: list[Any] = []
        loop.call_soon_threadsafe(lambda: task_list.extend(asyncio.all_tasks(loop)))
        wait_until(lambda: task_list)
        for task in task_list:
            loop.call_soon_threadsafe(task.cancel)
        thread.join(LONG)
    assert a_cancelled == [True]


class _OwnRunForever(asyncio.SelectorEventLoop):
    """A loop whose run_forever is not asyncio's (as nest_asyncio makes them)."""

    def run_forever(self) -> None:
        super().run_forever()


def test_a_loop_that_runs_its_own_way_is_never_trusted_by_thread() -> None:
    loop = _OwnRunForever()
    try:
        assert loop.run_until_complete(_in_time())
        assert _loop_waker.last_seen[0][2] is False
        assert loop.run_until_complete(_expires())
    finally:
        loop.close()
    # asyncio's own loops are trusted where the lookup is slow (before 3.12).

    async def main() -> bool:
        await _in_time()
        return _loop_waker.last_seen[0][2]

    assert asyncio.run(main()) is (sys.version_info < (3, 12))


def _close_a_loop_under_an_armed_scope() -> None:
    loop = asyncio.new_event_loop()
    # Made inside the loop: before 3.10 an Event binds to get_event_loop().
    entered: list[asyncio.Event] = []
    scopes: list[taut.DeadlineScope] = []
    tasks: list[asyncio.Task[None]] = []

    async def stuck() -> None:
        async with taut.move_on_after(SHORT) as scope:
            scopes.append(scope)
            entered[0].set()
            await asyncio.sleep(LONG)

    async def start() -> None:
        entered.append(asyncio.Event())
        tasks.append(loop.create_task(stuck()))
        await entered[0].wait()

    loop.run_until_complete(start())
    loop.close()  # the task stays pending inside its scope
    deadline = scopes[0]._deadline
    assert deadline is not None
    wait_until(lambda: deadline.expired)  # fires with no loop to wake


def test_loop_closed_while_a_scope_is_armed() -> None:
    hooked: list[Any] = []
    old_thread_hook, old_unraisable = threading.excepthook, sys.unraisablehook
    threading.excepthook = hooked.append
    sys.unraisablehook = hooked.append
    try:
        _close_a_loop_under_an_armed_scope()
        gc.collect()
    finally:
        threading.excepthook, sys.unraisablehook = old_thread_hook, old_unraisable
    assert hooked == []
    # The next loop works as ever.
    assert asyncio.run(_expires())


def test_scopes_restore_the_context_they_entered() -> None:
    async def main() -> None:
        assert innermost.get() is None
        async with taut.fail_after(LONG) as outer:
            async with taut.move_on_after(LONG) as inner:
                assert innermost.get() is inner
            assert innermost.get() is outer
            assert taut.remaining() is not None
        assert innermost.get() is None
        assert taut.remaining() is None

    asyncio.run(main())
