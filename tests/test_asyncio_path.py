"""The asyncio-native path: ``await executor.run(...)`` and ``taut.to_thread``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import gc
import select
import sys
import threading
import time
import warnings
from collections.abc import Iterable, Iterator
from typing import Any, Callable

import pytest
from _waiting import (
    LoopWithoutReaders,
    abandon,
    no_line_left,
    one_queued,
    running_call,
    wait_until,
)

import taut
import taut._asyncio
import taut._loop_waker

LONG = 30.0

pytestmark = pytest.mark.usefixtures("no_pending_task_destroyed")


def test_run_returns_results_and_raises_exceptions_unchanged() -> None:
    async def main() -> None:
        with taut.ThreadPoolExecutor(2) as ex:
            assert await ex.run(pow, 2, 10) == 1024
            assert await ex.run(dict, a=1) == {"a": 1}
            with pytest.raises(ValueError, match="invalid literal"):
                await ex.run(int, "x")
            error = KeyError("k")

            def raise_it() -> None:
                raise error

            with pytest.raises(KeyError) as caught:
                await ex.run(raise_it)
            assert caught.value is error

    asyncio.run(main())


def test_stop_iteration_from_the_call_still_settles_the_await() -> None:
    # An asyncio future refuses StopIteration; the standard library's
    # run_in_executor then never settles (the await hangs). Ours wraps it.
    def stop() -> None:
        raise StopIteration("done")

    async def main() -> None:
        with taut.ThreadPoolExecutor(1) as ex:
            with pytest.raises(RuntimeError, match="StopIteration") as caught:
                await asyncio.wait_for(ex.run(stop), LONG)
            assert isinstance(caught.value.__cause__, StopIteration)

    asyncio.run(main())


class _UnprintableStop(StopIteration):
    """A StopIteration whose repr and str raise: as one carrying an object
    that cannot be shown (a lazy proxy, a detached ORM row) does."""

    def __repr__(self) -> str:
        raise ValueError("no repr")

    def __str__(self) -> str:
        raise ValueError("no str")


@pytest.mark.parametrize("path", ["run", "to_thread", "run_in_executor"])
def test_an_unprintable_stop_iteration_from_the_call_still_settles_the_await(path: str) -> None:
    # The StopIteration is wrapped in a RuntimeError whose message shows it.
    # Before, building that message called its repr, which raised inside the
    # loop's reader callback: the error went to the loop's exception handler
    # and the completion was lost, the await never settled ('TimeoutError'
    # from the wait_for below, for each of the three paths).
    def stop() -> None:
        raise _UnprintableStop("done")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with taut.ThreadPoolExecutor(1) as ex:
            loop.set_default_executor(ex)
            call = {
                "run": lambda: ex.run(stop),
                "to_thread": lambda: taut.to_thread(stop),
                "run_in_executor": lambda: loop.run_in_executor(ex, stop),
            }[path]
            with pytest.raises(RuntimeError, match="_UnprintableStop") as caught:
                await asyncio.wait_for(call(), 10)
            assert isinstance(caught.value.__cause__, _UnprintableStop)
            # The loop's channel still serves the next call.
            assert await asyncio.wait_for(ex.run(abs, -3), LONG) == 3

    asyncio.run(main())


@pytest.mark.parametrize(
    "raised",
    [
        concurrent.futures.CancelledError,
        concurrent.futures.TimeoutError,
        concurrent.futures.InvalidStateError,
        ValueError,
    ],
)
def test_a_concurrent_futures_error_reaches_the_task_as_asyncio_would_give_it(
    raised: type[Exception],
) -> None:
    # asyncio's wrap_future (so run_in_executor and to_thread on the
    # standard library's pool) turns a call's concurrent.futures.CancelledError
    # into asyncio.CancelledError, which cancels the awaiting task; the same
    # for InvalidStateError (and, before 3.11, TimeoutError). Every taut path
    # gives the task what the standard library's gives it, found by CPython's
    # own asyncio tests run with taut as the default executor.
    def call() -> None:
        raise raised("from the call")

    async def seen(awaitable: Any) -> type[BaseException]:
        # The type only: CPython 3.9 drops the message when it converts
        # (taut keeps it, and the original error as __cause__).
        try:
            await asyncio.wait_for(awaitable, LONG)
        except BaseException as exc:  # the outcome is what we compare
            return type(exc)
        raise AssertionError("the call's error was lost")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with concurrent.futures.ThreadPoolExecutor(1) as stdlib, taut.ThreadPoolExecutor(1) as ex:
            expected = await seen(loop.run_in_executor(stdlib, call))
            if raised is concurrent.futures.CancelledError:
                assert expected is asyncio.CancelledError
            assert await seen(ex.run(call)) == expected
            assert await seen(loop.run_in_executor(ex, call)) == expected
            loop.set_default_executor(ex)
            assert await seen(taut.to_thread(call)) == expected
            assert await seen(asyncio.to_thread(call)) == expected

    asyncio.run(main())


# Exactly once under cancellation races, with a loop slow to drain, loops
# closing and many loops: tests/test_asyncio_delivery.py.
def test_every_completion_reaches_its_task_exactly_once() -> None:
    n = 3000

    async def main() -> list[int]:
        with taut.ThreadPoolExecutor(8) as ex:
            return list(await asyncio.gather(*[ex.run(lambda i=i: i) for i in range(n)]))

    assert asyncio.run(main()) == list(range(n))


def test_to_thread_copies_the_context_and_uses_a_taut_default_executor() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[str] = []

    def read() -> str:
        seen.append(threading.current_thread().name)
        value = var.get()
        var.set("set in the thread")  # in a copy: the caller never sees it
        return value

    async def main() -> None:
        loop = asyncio.get_running_loop()
        var.set("caller")
        # The loop's default executor is the standard library's: taut's
        # shared pool runs the call.
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="stdlib") as stdlib:
            loop.set_default_executor(stdlib)
            assert await taut.to_thread(read) == "caller"
        assert seen[-1].startswith("taut-default")
        assert var.get() == "caller"
        # A taut default executor runs it.
        ex = taut.ThreadPoolExecutor(1, thread_name_prefix="mine")
        loop.set_default_executor(ex)
        assert await taut.to_thread(read) == "caller"
        assert seen[-1].startswith("mine")
        assert var.get() == "caller"
        ex.shutdown()

    asyncio.run(main())


class _HiddenDefaultLoop(asyncio.SelectorEventLoop):
    """A loop that keeps its default executor where no attribute reaches it,
    as uvloop's does (a field of its C type): ``loop._default_executor`` raises
    AttributeError, and the executor is only among ``gc.get_referents(loop)``
    (a ``__slots__`` field, visited like a C type's). asyncio's own code
    still sees the attribute (``set_default_executor``, ``close``)."""

    __slots__ = ("_default_executor_field",)

    @property  # type: ignore[override]
    def _default_executor(self) -> Any:
        if sys._getframe(1).f_globals.get("__name__") == "asyncio.base_events":
            return self._default_executor_field
        raise AttributeError("_default_executor")

    @_default_executor.setter
    def _default_executor(self, executor: Any) -> None:
        self._default_executor_field = executor


def test_to_thread_finds_a_default_executor_the_loop_keeps_out_of_reach() -> None:
    # As on uvloop: taut.to_thread must still run on the loop's taut default
    # executor, and on taut's shared pool when that is the stdlib's or none.
    seen: list[str] = []

    def name() -> None:
        seen.append(threading.current_thread().name)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with pytest.raises(AttributeError):
            loop._default_executor  # noqa: B018
        for _ in range(2):  # none: taut's shared pool (and nothing changed since)
            await taut.to_thread(name)
            assert seen[-1].startswith("taut-default")
        for prefix in ("first", "second"):  # set anew: the new one runs it
            ex = taut.ThreadPoolExecutor(1, thread_name_prefix=prefix)
            loop.set_default_executor(ex)
            await taut.to_thread(name)
            assert seen[-1].startswith(prefix)
            ex.shutdown()
        with concurrent.futures.ThreadPoolExecutor(1) as stdlib:
            loop.set_default_executor(stdlib)
            await taut.to_thread(name)
            assert seen[-1].startswith("taut-default")

    for _ in range(2):  # a second loop of the type: what the first taught
        loop = _HiddenDefaultLoop()
        try:
            loop.run_until_complete(main())
        finally:
            loop.close()


def test_run_copies_the_context_when_the_executor_propagates_it() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    async def main() -> tuple[str, str]:
        var.set("caller")
        with taut.ThreadPoolExecutor(1, propagate_context=True) as on, taut.ThreadPoolExecutor(
            1
        ) as off:
            return await on.run(var.get), await off.run(var.get)

    assert asyncio.run(main()) == ("caller", "unset")


def _start(ex: taut.ThreadPoolExecutor, kind: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``ex.run(fn, *args)`` or ``taut.to_thread(fn, *args)`` (``ex`` must then
    be the running loop's default executor)."""
    return asyncio.ensure_future(ex.run(fn, *args) if kind == "run" else taut.to_thread(fn, *args))


@pytest.mark.parametrize("kind", ["run", "to_thread"])
def test_a_call_cancelled_while_queued_never_runs(kind: str) -> None:
    ran: list[int] = []

    async def main() -> None:
        with taut.ThreadPoolExecutor(1) as ex:
            asyncio.get_running_loop().set_default_executor(ex)
            gate = threading.Event()
            blocker = await running_call(ex, gate.wait, LONG)
            queued = _start(ex, kind, ran.append, 1)
            await asyncio.sleep(0)  # submitted
            assert ex.stats().queued == 1
            queued.cancel()
            with pytest.raises(asyncio.CancelledError):
                await queued
            assert ex.stats().queued == 0  # taken out of the queue at once
            gate.set()
            await blocker
            assert await ex.run(len, "ab") == 2  # the worker goes on

    asyncio.run(main())
    assert ran == []


@pytest.mark.parametrize("kind", ["run", "to_thread"])
def test_a_worker_reaching_a_call_whose_task_was_just_cancelled_skips_it(kind: str) -> None:
    # task.cancel() cancels the call's asyncio future at once, but the task
    # takes the call out of the queue only when it runs next. A worker that
    # reaches the call in between must see the cancelled future and skip it.
    ran: list[int] = []

    async def main() -> None:
        with taut.ThreadPoolExecutor(1) as ex:
            asyncio.get_running_loop().set_default_executor(ex)
            gate = threading.Event()
            blocker = await running_call(ex, gate.wait, LONG)
            queued = _start(ex, kind, ran.append, 1)
            await asyncio.sleep(0)  # submitted
            queued.cancel()
            gate.set()
            # The loop does not run meanwhile: the worker finishes the first
            # call and reaches the cancelled one before the task runs again.
            wait_until(lambda: ex.stats().completed + ex.stats().cancelled == 2)
            assert ex.stats().cancelled == 1
            with pytest.raises(asyncio.CancelledError):
                await queued
            await blocker

    asyncio.run(main())
    assert ran == []


def _squares_from_many_loops(call: Callable[..., Any]) -> dict[int, list[int]]:
    """Six threads, each running its own loop, make 200 calls of ``pow(t, 2)``
    through ``call(executor, loop, fn, *args)`` on one shared executor."""
    ex = taut.ThreadPoolExecutor(4)
    results: dict[int, list[int]] = {}

    def thread_main(t: int) -> None:
        async def main() -> list[int]:
            loop = asyncio.get_running_loop()
            return list(await asyncio.gather(*[call(ex, loop, pow, t, 2) for _ in range(200)]))

        results[t] = asyncio.run(main())

    threads = [threading.Thread(target=thread_main, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LONG)
    ex.shutdown()
    return results


def test_many_loops_in_many_threads_share_one_executor() -> None:
    results = _squares_from_many_loops(lambda ex, loop, fn, *args: ex.run(fn, *args))
    assert results == {t: [t * t] * 200 for t in range(6)}


def test_loop_closing_with_calls_in_flight_loses_nothing_later() -> None:
    # A loop that closes while its calls still run: the workers finish them
    # (outcomes dropped), and the executor keeps serving other loops.
    ex = taut.ThreadPoolExecutor(2)
    gate = threading.Event()

    async def leave_early() -> None:
        running = asyncio.ensure_future(ex.run(gate.wait, LONG))
        await asyncio.sleep(0.01)
        assert not running.done()  # asyncio.run cancels it on the way out

    asyncio.run(leave_early())
    gate.set()

    async def later() -> int:
        return await ex.run(len, "abc")

    assert asyncio.run(later()) == 3
    ex.shutdown()


def test_bounded_queue_waits_for_room_without_blocking_the_loop_in_fifo_order() -> None:
    order: list[int] = []

    async def main() -> float:
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            gate = threading.Event()
            first = await running_call(ex, gate.wait, LONG)
            waiting = [asyncio.ensure_future(ex.run(order.append, i)) for i in range(5)]
            # The loop keeps ticking while four of them wait for room.
            ticks = 0
            start = time.perf_counter()
            while ticks < 20:
                await asyncio.sleep(0.001)
                ticks += 1
            stalled = time.perf_counter() - start
            assert ex.stats().queued == 1
            gate.set()
            await first
            await asyncio.gather(*waiting)
            return stalled

    stalled = asyncio.run(main())
    assert order == [0, 1, 2, 3, 4]
    assert stalled < 5.0  # twenty 1 ms ticks; a blocked loop would never tick


def test_cancelling_a_task_waiting_for_room_withdraws_it() -> None:
    ran: list[int] = []

    async def main() -> None:
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            gate = threading.Event()
            first = await running_call(ex, gate.wait, LONG)
            queued = asyncio.ensure_future(ex.run(ran.append, 1))
            waiting = asyncio.ensure_future(ex.run(ran.append, 2))
            behind = asyncio.ensure_future(ex.run(ran.append, 3))
            await asyncio.sleep(0.01)
            waiting.cancel()
            gate.set()
            await first
            await queued
            await behind  # the withdrawn waiter did not hold up the next one
            with pytest.raises(asyncio.CancelledError):
                await waiting

    asyncio.run(main())
    assert ran == [1, 3]


# The tasks of calls made only to hold the pool busy (asyncio keeps weak
# references to tasks only).
_held: list[asyncio.Future[Any]] = []


@pytest.fixture(autouse=True)
def _let_held_tasks_go(no_pending_task_destroyed: None) -> Iterator[None]:
    """Let go of the test's held tasks before no_pending_task_destroyed
    looks (torn down first: it depends on that fixture), not in a later test."""
    yield
    _held.clear()


async def _fill(ex: taut.ThreadPoolExecutor) -> tuple[threading.Event, threading.Event]:
    """On ``ThreadPoolExecutor(1, max_queue=1)``: a call running and one
    queued, each held by its own gate (returned: running, queued)."""
    running, queued = threading.Event(), threading.Event()
    _held[:] = [await running_call(ex, running.wait, LONG)]
    _held.append(asyncio.ensure_future(ex.run(queued.wait, LONG)))
    await asyncio.sleep(0)
    assert ex.stats().queued == 1
    return running, queued


def _told_to_retry(loop: asyncio.AbstractEventLoop, ex: taut.ThreadPoolExecutor) -> None:
    """After the running call of ``_fill`` was let go: block this loop's
    thread until the queued call started (so there is room) and the first
    coroutine waiting for room has been told, on this loop's channel, to
    try again. The worker pushes the finished call's outcome, takes the
    queued call, then pushes the notice: two entries."""
    channel = taut._loop_waker.waker_for(loop).channel
    assert channel is not None
    wait_until(lambda: len(channel) >= 2)
    assert ex.stats().queued == 0


async def _line_told(
    ex: taut.ThreadPoolExecutor, record: list[Any], labels: Iterable[Any]
) -> tuple[list[asyncio.Future[Any]], threading.Event]:
    """``_fill``, then one coroutine per label waiting for room, in that
    order (each appends its label to ``record`` when its call runs); then
    the running call is let go and the first of them told
    (``_told_to_retry``). Returns the waiting tasks and the queued call's gate."""
    running, queued = await _fill(ex)
    waiters: list[asyncio.Future[Any]] = [
        asyncio.ensure_future(ex.run(record.append, label)) for label in labels
    ]
    await asyncio.sleep(0)  # they wait for room, in this order
    running.set()
    _told_to_retry(asyncio.get_running_loop(), ex)
    return waiters, queued


def test_a_coroutine_told_there_is_room_keeps_its_place_in_line() -> None:
    # Between the notice and the retry, a thread's plain submit takes the
    # room. The coroutine told first must stay first in line.
    order: list[str] = []

    async def main() -> None:
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            (first, second), queued = await _line_told(ex, order, ["first", "second"])
            thread = threading.Thread(target=ex.submit, args=(order.append, "thread"))
            thread.start()
            thread.join(LONG)
            await asyncio.sleep(0.01)  # "first" retries, finds no room, waits again
            queued.set()
            await asyncio.wait_for(asyncio.gather(first, second), LONG)
            await no_line_left(ex)

    asyncio.run(main())
    assert order == ["thread", "first", "second"]


def test_a_told_coroutine_refused_then_cancelled_leaves_the_line() -> None:
    # "first" is told there is room, a plain submit takes it, and "first"
    # waits at its place again; then its task is cancelled. It leaves the
    # line from that place: no place nor turn is left behind.
    order: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            (first, second), queued = await _line_told(ex, order, ["first", "second"])
            ex.try_submit(order.append, "plain")
            retries = taut._loop_waker.waker_for(loop).room_retries
            while not retries:  # "first" retries, finds no room, waits again
                await asyncio.sleep(0)
            first.cancel()
            queued.set()
            await asyncio.wait_for(second, LONG)
            assert first.cancelled()
            await no_line_left(ex)

    asyncio.run(main())
    assert order == ["plain", "second"]


def _room_as_refused(
    ex: taut.ThreadPoolExecutor, queued: threading.Event, order: list[str], next_call: str
) -> None:
    """Make room at the next refusal of a full queue (the refused submitter
    starts any unclaimed worker first, ``_spawn``): let the queued call of
    ``_fill`` end and block until the worker started ``next_call``, the
    call queued meanwhile. The worker tells the first in line there is room
    before it starts the call."""
    spawn = ex._spawn

    def room_as_refused() -> None:
        if ex.stats().queued == 1:  # full: a refusal
            del ex._spawn  # once
            queued.set()
            wait_until(lambda: next_call in order)
        spawn()

    ex._spawn = room_as_refused  # type: ignore[method-assign]


async def _waiting_in_line(
    ex: taut.ThreadPoolExecutor, record: list[str], labels: Iterable[str]
) -> tuple[list[asyncio.Future[Any]], threading.Event, threading.Event]:
    """``_fill``, then one coroutine per label waiting for room, in that
    order (each appends its label to ``record`` when its call runs).
    Returns their tasks and the gates of ``_fill``."""
    running, queued = await _fill(ex)
    waiters = [asyncio.ensure_future(ex.run(record.append, label)) for label in labels]
    while not ex._core.has_room_line():
        await asyncio.sleep(0)
    await asyncio.sleep(0)  # all of them wait for room, in this order
    return waiters, running, queued


def _on(readers: bool, main: Callable[[], Any]) -> None:
    if readers:
        asyncio.run(main())
    else:
        _run_on_a_loop_without_readers(main)


@pytest.mark.parametrize("readers", [True, False], ids=["loop", "loop_without_readers"])
def test_a_told_coroutine_refused_keeps_its_place_though_room_appears_as_it_goes_back(
    readers: bool,
) -> None:
    # "x" is told there is room, a plain submit takes it, and "x" finds the
    # queue full. Room appears as it goes back to its place, before it is
    # there: the worker tells "y", behind it. The room is still x's.
    order: list[str] = []

    async def main() -> None:
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            waiters, running, queued = await _waiting_in_line(ex, order, "xy")
            running.set()
            wait_until(lambda: ex.stats().queued == 0)  # room: "x" is told
            ex.try_submit(order.append, "plain")  # and the room is gone
            _room_as_refused(ex, queued, order, "plain")
            await asyncio.wait_for(asyncio.gather(*waiters, *_held), LONG)
            await no_line_left(ex)

    _on(readers, main)
    assert order == ["plain", "x", "y"]


@pytest.mark.parametrize("readers", [True, False], ids=["loop", "loop_without_readers"])
def test_a_told_coroutine_refused_goes_before_those_behind_it_told_with_it(
    readers: bool,
) -> None:
    # One room, and "x", "y" and "z" are told (two newcomers arriving as
    # the room is there tell one each). "x" takes it, "y" finds the queue
    # full and goes back to its place; room appears just then. "z", told
    # before "y" is told again, comes back first: the room is y's.
    order: list[str] = []

    async def main() -> None:
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            waiters, running, queued = await _waiting_in_line(ex, order, "xyz")
            _room_as_refused(ex, queued, order, "x")
            running.set()
            wait_until(lambda: ex.stats().queued == 0)  # room: "x" is told
            newcomers = [asyncio.ensure_future(ex.run(order.append, f"n{i}")) for i in (1, 2)]
            await asyncio.wait_for(asyncio.gather(*waiters, *newcomers, *_held), LONG)
            await no_line_left(ex)

    _on(readers, main)
    assert order == ["x", "y", "z", "n1", "n2"]


@pytest.mark.parametrize("waiting", [1, 2])
def test_a_coroutine_arriving_while_others_wait_for_room_queues_behind_them(waiting: int) -> None:
    # Room appears and the first waiting coroutine is told; before it gets to
    # retry, new coroutines submit. FIFO: they go behind the coroutines that
    # were waiting (one of them only told, none left in line, with
    # waiting=1), even though the queue has room just then.
    order: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            loop.set_default_executor(ex)
            waiters, queued = await _line_told(ex, order, range(waiting))
            newcomers = [
                asyncio.ensure_future(ex.run(order.append, "run")),
                asyncio.ensure_future(taut.to_thread(order.append, "to_thread")),
            ]
            while ex.stats().queued == 0:
                await asyncio.sleep(0.001)
            queued.set()
            await asyncio.wait_for(asyncio.gather(*waiters, *newcomers), LONG)
            await no_line_left(ex)

    asyncio.run(main())
    assert order == [*range(waiting), "run", "to_thread"]


def test_a_queued_call_cancelled_gives_its_room_to_a_waiting_coroutine() -> None:
    ran: list[str] = []

    async def main() -> None:
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            running = threading.Event()
            blocker = await running_call(ex, running.wait, LONG)
            cancelled = asyncio.ensure_future(ex.run(ran.append, "cancelled"))
            waiting = asyncio.ensure_future(ex.run(ran.append, "waiting"))
            await asyncio.sleep(0)  # one queued, one waiting for room
            cancelled.cancel()
            # The running call still blocks: only the cancelled call's room
            # lets the waiting one into the queue.
            await one_queued(ex)
            running.set()
            await asyncio.wait_for(waiting, LONG)
            await blocker

    asyncio.run(main())
    assert ran == ["waiting"]


@pytest.mark.parametrize("when", ["before its notice is read", "after its notice is read"])
def test_a_coroutine_cancelled_after_being_told_passes_its_turn_on(when: str) -> None:
    # The first waiting coroutine is told there is room, and its task is
    # cancelled before it retries: the next one in line gets the room at
    # once, while the running call still blocks.
    ran: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            (first, second), queued = await _line_told(ex, ran, ["first", "second"])
            if when == "before its notice is read":
                first.cancel()
            else:
                # Ready callbacks run in order: this one runs in the pass that
                # reads the channel, just before the reader, so the one it
                # schedules runs after the reader told "first" and before
                # "first" resumes.
                loop.call_soon(loop.call_soon, first.cancel)
            with pytest.raises(asyncio.CancelledError):
                await first
            await one_queued(ex)  # "second", while "queued" still runs
            queued.set()
            await asyncio.wait_for(second, LONG)
            await no_line_left(ex)

    asyncio.run(main())
    assert ran == ["second"]


@pytest.mark.parametrize("ending", ["closed", "dropped without close"])
def test_a_turn_told_to_a_loop_that_ended_unread_passes_on(ending: str) -> None:
    # The first coroutine in line runs on a loop that stops while the notice
    # that there is room waits, unread, in its channel. Then the loop:
    # - closes: once another loop starts, that turn passes on;
    # - is dropped without close(): nobody hears of it closing, the notice
    #   waits in a cycle with the loop, and when the collector frees that
    #   cycle, the turn passes on. (Before, the channel's contents were out
    #   of the collector's sight: the loop lived for good, and the second
    #   coroutine waited with the worker idle.)
    # Either way the second coroutine in line gets the room, while the
    # queued call still runs.
    ran: list[str] = []
    first_waits, stop_it = threading.Event(), threading.Event()
    channels: list[Any] = []

    def ending_loop_thread(ex: taut.ThreadPoolExecutor) -> None:
        loop = asyncio.new_event_loop()

        async def first() -> None:
            pending = abandon(asyncio.ensure_future(ex.run(ran.append, "first")))
            await asyncio.sleep(0)  # it waits for room
            channels.append(taut._loop_waker.waker_for(loop).channel)
            first_waits.set()
            stop_it.wait(LONG)  # blocks the loop: the notice stays unread
            async with taut.move_on_after(LONG):
                pass  # taut's fast lookups name this loop last (held weakly)
            loop.stop()  # run no further pass (no select, no reading)
            await pending

        with pytest.raises(RuntimeError, match="stopped"):
            loop.run_until_complete(first())
        if ending == "closed":
            loop.close()

    async def main() -> None:
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            running, queued = await _fill(ex)
            thread = threading.Thread(target=ending_loop_thread, args=(ex,))
            thread.start()
            assert first_waits.wait(LONG)
            second = asyncio.ensure_future(ex.run(ran.append, "second"))
            await asyncio.sleep(0)  # it waits behind "first"
            running.set()  # room: "first" is told, on its blocked loop
            wait_until(lambda: len(channels[0]) == 1)
            channels.clear()
            stop_it.set()
            thread.join(LONG)
            if ending == "closed":
                # Another loop starts (another request, here in a thread).
                other = threading.Thread(target=asyncio.run, args=(taut.to_thread(abs, -1),))
                other.start()
                other.join(LONG)
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ResourceWarning)  # "unclosed event loop"
                    gc.collect()
            await one_queued(ex)  # "second", while "queued" still runs
            queued.set()
            await asyncio.wait_for(second, LONG)
            await no_line_left(ex)

    asyncio.run(main())
    assert ran == ["second"]


def test_a_turn_read_by_a_loop_that_closed_before_its_coroutine_came_back_passes_on() -> None:
    # The first coroutine in line runs on a loop that reads the notice (its
    # reader callback runs, and the coroutine's wake-up is scheduled) in the
    # very pass in which the loop stops; the loop then closes, dropping that
    # wake-up: the coroutine never comes back for its turn. The turn must
    # pass on as the loop closes (no other loop starts): the second
    # coroutine in line gets the room, while the queued call still runs.
    ran: list[str] = []
    first_waits, told = threading.Event(), threading.Event()

    def closing_loop_thread(ex: taut.ThreadPoolExecutor) -> None:
        loop = asyncio.new_event_loop()

        async def first() -> None:
            pending = abandon(asyncio.ensure_future(ex.run(ran.append, "first")))
            _held.append(pending)
            await asyncio.sleep(0)  # it waits for room
            reader = taut._loop_waker.waker_for(loop)._reader
            first_waits.set()
            assert told.wait(LONG)  # blocks the loop: the notice is pushed meanwhile
            assert select.select([reader], [], [], LONG)[0]  # and its wake-up byte written
            # Ready callbacks run in order: the next pass runs this stop,
            # then the reader (its descriptor is readable), and ends there.
            loop.call_soon(loop.stop)
            await pending

        with pytest.raises(RuntimeError, match="stopped"):
            loop.run_until_complete(first())
        assert not _held[-1].done()  # never came back
        loop.close()

    async def main() -> None:
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            running, queued = await _fill(ex)
            thread = threading.Thread(target=closing_loop_thread, args=(ex,))
            thread.start()
            assert first_waits.wait(LONG)
            second = asyncio.ensure_future(ex.run(ran.append, "second"))
            await asyncio.sleep(0)  # it waits behind "first"
            running.set()  # room: "first" is told, on its blocked loop
            wait_until(lambda: ex.stats().queued == 0)
            told.set()
            thread.join(LONG)
            await one_queued(ex)  # "second", while "queued" still runs
            queued.set()
            await asyncio.wait_for(second, LONG)
            await no_line_left(ex)

    asyncio.run(main())
    assert ran == ["second"]


def _wait_in_line_then_close_the_loop(ex: taut.ThreadPoolExecutor) -> None:
    """On a loop of its own, a coroutine joins the line of coroutines waiting
    for room; then the loop closes with that task still pending (never
    cancelled, so it never leaves the line by itself)."""
    loop = asyncio.new_event_loop()

    async def join_the_line() -> None:
        _held.append(abandon(asyncio.ensure_future(ex.run(_never_called))))
        await asyncio.sleep(0)  # the task runs: the queue is full, it waits for room
        assert ex.stats().queued == 1

    loop.run_until_complete(join_the_line())
    loop.close()


def _never_called() -> None:
    raise AssertionError("a call whose loop closed while it waited for room ran")


@pytest.mark.parametrize("another_loop_started", [True, False])
def test_room_for_a_coroutine_whose_loop_closed_while_it_waited_goes_to_the_next(
    another_loop_started: bool,
) -> None:
    # The first coroutine in line belongs to a loop that closed while it
    # waited. When room appears, that first waiter cannot be told any more:
    # the room must go to the next coroutine in line, whether or not another
    # loop started since (taut hears of the close as the loop closes). Before
    # the fix, without another loop, the turn waited unread in the closed
    # loop's channel: "second" waited for good, with the queue empty and the
    # worker idle.
    ran: list[str] = []

    async def main() -> None:
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            running, queued = await _fill(ex)
            closing = threading.Thread(target=_wait_in_line_then_close_the_loop, args=(ex,))
            closing.start()
            closing.join(LONG)
            second = asyncio.ensure_future(ex.run(ran.append, "second"))
            await asyncio.sleep(0)  # it waits behind the closed loop's coroutine
            if another_loop_started:
                other = threading.Thread(target=asyncio.run, args=(taut.to_thread(abs, -1),))
                other.start()
                other.join(LONG)
            queued.set()
            running.set()
            await asyncio.wait_for(second, LONG)
            await no_line_left(ex)

    asyncio.run(main())
    assert ran == ["second"]


def test_run_waits_for_room_also_on_a_loop_without_readers() -> None:
    async def main() -> None:
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            running, queued = await _fill(ex)
            try:
                waiting = asyncio.ensure_future(ex.run(abs, -5))
                await asyncio.sleep(0)
                running.set()
                queued.set()
                assert await asyncio.wait_for(waiting, LONG) == 5
            finally:
                running.set()
                queued.set()
                await asyncio.gather(*_held)

    loop = LoopWithoutReaders()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def _run_on_a_loop_without_readers(main: Callable[[], Any]) -> None:
    loop = LoopWithoutReaders()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def test_without_readers_room_goes_in_fifo_order_and_a_cancelled_waiter_never_runs() -> None:
    order: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            loop.set_default_executor(ex)
            running, queued = await _fill(ex)
            try:
                waiting = [asyncio.ensure_future(ex.run(order.append, i)) for i in range(3)]
                waiting.append(asyncio.ensure_future(taut.to_thread(order.append, 3)))
                waiting.append(asyncio.ensure_future(ex.run(order.append, 4)))
                for _ in range(5):  # the loop runs on while they wait
                    await asyncio.sleep(0)
                assert not any(w.done() for w in waiting)
                assert ex.stats().queued == 1
                waiting[1].cancel()
                running.set()
                queued.set()
                await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), LONG)
                assert waiting[1].cancelled()
                await no_line_left(ex)
            finally:
                running.set()
                queued.set()
                await asyncio.gather(*_held)

    _run_on_a_loop_without_readers(main)
    assert order == [0, 2, 3, 4]


class LoopWithoutReadersTellingRoom(LoopWithoutReaders):
    """Sets ``room_handed`` once taut hands it a room notice (through
    ``call_soon_threadsafe``, from its callback thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.room_handed = threading.Event()

    def call_soon_threadsafe(self, callback: Any, *args: Any, **kwargs: Any) -> Any:
        handle = super().call_soon_threadsafe(callback, *args, **kwargs)
        if isinstance(getattr(callback, "__self__", None), taut._asyncio._RoomNotice):
            self.room_handed.set()
        return handle


def test_without_readers_a_waiter_cancelled_after_being_told_passes_its_turn_on() -> None:
    # Told there is room (the notice is on its way to the loop), the first
    # waiting coroutine is cancelled before it comes back: the second one
    # gets the room at once, while the queued call still runs.
    ran: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, LoopWithoutReadersTellingRoom)
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            running, queued = await _fill(ex)
            try:
                first = asyncio.ensure_future(ex.run(ran.append, "first"))
                second = asyncio.ensure_future(ex.run(ran.append, "second"))
                await asyncio.sleep(0)  # both wait for room, in this order
                running.set()
                assert loop.room_handed.wait(LONG)  # "first" told, not yet back
                first.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await first
                await one_queued(ex)  # "second", while "queued" still runs
                queued.set()
                await asyncio.wait_for(second, LONG)
                await no_line_left(ex)
            finally:
                running.set()
                queued.set()
                await asyncio.gather(*_held)

    loop = LoopWithoutReadersTellingRoom()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert ran == ["second"]


def test_a_turn_handed_to_a_loop_without_readers_that_closed_before_running_it_passes_on() -> None:
    # The first coroutine in line runs on a loop without readers. Told there
    # is room, its notice is handed to that loop (call_soon_threadsafe),
    # which stops and closes before running it, dropping it. Such a loop
    # tells nobody that it closed: taut sees it when another loop starts
    # using taut, and the turn passes on then (the second coroutine gets the
    # room while the queued call still runs), not "never".
    ran: list[str] = []
    first_waits = threading.Event()

    def closing_loop_thread(ex: taut.ThreadPoolExecutor) -> None:
        loop = LoopWithoutReadersTellingRoom()

        async def first() -> None:
            pending = abandon(asyncio.ensure_future(ex.run(ran.append, "first")))
            _held.append(pending)
            await asyncio.sleep(0)  # it waits for room
            first_waits.set()
            assert loop.room_handed.wait(LONG)  # blocks the loop: the notice is not run
            loop.stop()  # run no further pass
            await pending

        with pytest.raises(RuntimeError, match="stopped"):
            loop.run_until_complete(first())
        loop.close()

    async def main() -> None:
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            running, queued = await _fill(ex)
            thread = threading.Thread(target=closing_loop_thread, args=(ex,))
            thread.start()
            try:
                assert first_waits.wait(LONG)
                second = asyncio.ensure_future(ex.run(ran.append, "second"))
                await asyncio.sleep(0)  # it waits behind "first"
                running.set()  # room: "first" is told, on its loop that closes unread
                thread.join(LONG)
                assert ex.stats().queued == 0  # the turn is out: nobody took the room
                # Another loop starts (another request, here in a thread).
                other = threading.Thread(target=asyncio.run, args=(taut.to_thread(abs, -1),))
                other.start()
                other.join(LONG)
                await one_queued(ex)  # "second", while "queued" still runs
            finally:
                running.set()
                queued.set()
            await asyncio.wait_for(second, LONG)
            await no_line_left(ex)

    asyncio.run(main())
    assert ran == ["second"]


def test_on_a_loop_without_readers_shutdown_wakes_waiters_with_its_error() -> None:
    async def main() -> None:
        ex = taut.ThreadPoolExecutor(1, max_queue=1)
        running, queued = await _fill(ex)
        waiting = asyncio.ensure_future(ex.run(abs, 2))
        await asyncio.sleep(0)
        ex.shutdown(wait=False)
        try:
            with pytest.raises(RuntimeError, match="after shutdown"):
                await asyncio.wait_for(waiting, LONG)
        finally:
            running.set()
            queued.set()
            await asyncio.gather(*_held)

    _run_on_a_loop_without_readers(main)


def test_room_for_a_waiter_whose_loop_without_readers_closed_goes_to_the_next_in_line() -> None:
    # One line for every loop: the first waiter runs on a loop without
    # readers that closed while it waited (its task never cancelled), the
    # second on a loop with readers. The notice cannot be handed to the
    # closed loop: the turn passes on to the second one at once.
    ran: list[str] = []
    in_line = threading.Event()

    def wait_in_line_then_close(ex: taut.ThreadPoolExecutor) -> None:
        async def join_the_line() -> None:
            _held.append(abandon(asyncio.ensure_future(ex.run(_never_called))))
            await asyncio.sleep(0)  # the queue is full: it waits for room
            assert ex.stats().queued == 1
            assert not _held[-1].done()  # waiting, not refused
            in_line.set()

        _run_on_a_loop_without_readers(join_the_line)

    async def main() -> None:
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            running, queued = await _fill(ex)
            closing = threading.Thread(target=wait_in_line_then_close, args=(ex,))
            closing.start()
            closing.join(LONG)
            if not in_line.is_set():
                running.set()
                queued.set()
                raise AssertionError("the first coroutine never waited in line")
            second = asyncio.ensure_future(ex.run(ran.append, "second"))
            await asyncio.sleep(0)  # it waits behind the closed loop's coroutine
            running.set()
            await one_queued(ex)  # "second", while "queued" still runs
            queued.set()
            await asyncio.wait_for(second, LONG)
            await no_line_left(ex)

    asyncio.run(main())
    assert ran == ["second"]


def test_submit_on_a_loop_thread_refuses_at_once_when_full() -> None:
    # Waiting for room would stall the loop, and nothing on the loop could
    # make room: a watchdog thread lets the running call go after LONG, so a
    # submit that waits fails this test (it then succeeds) instead of hanging.
    async def main() -> None:
        ex = taut.ThreadPoolExecutor(1, max_queue=1)
        gate = threading.Event()
        watchdog = threading.Timer(LONG, gate.set)
        watchdog.start()
        try:
            ex.submit(gate.wait, 2 * LONG)
            while ex.stats().running == 0:
                await asyncio.sleep(0.001)
            ex.submit(abs, 1)  # fills the queue
            loop = asyncio.get_running_loop()
            with pytest.raises(taut.QueueFull, match=r"executor\.run"):
                await loop.run_in_executor(ex, abs, 2)
            with pytest.raises(taut.QueueFull, match=r"executor\.run"):
                ex.submit(abs, 3)
            with pytest.raises(taut.QueueFull, match=r"executor\.run"):
                ex.submit_tracked(abs, 4, on_wait=print)
            assert not gate.is_set()  # refused, not waited for
        finally:
            watchdog.cancel()
            gate.set()
            ex.shutdown()

    asyncio.run(main())


def test_shutdown_wakes_tasks_waiting_for_room() -> None:
    async def main() -> None:
        ex = taut.ThreadPoolExecutor(1, max_queue=1)
        gate = threading.Event()
        ex.submit(gate.wait, LONG)
        while ex.stats().running == 0:
            await asyncio.sleep(0.001)
        ex.submit(abs, 1)
        waiting = asyncio.ensure_future(ex.run(abs, 2))
        await asyncio.sleep(0.01)
        ex.shutdown(wait=False)
        with pytest.raises(RuntimeError, match="after shutdown"):
            await asyncio.wait_for(waiting, LONG)
        gate.set()

    asyncio.run(main())


def test_run_after_shutdown_raises() -> None:
    async def main() -> None:
        ex = taut.ThreadPoolExecutor(1)
        ex.shutdown()
        with pytest.raises(RuntimeError, match="after shutdown"):
            await ex.run(abs, 1)

    asyncio.run(main())


def test_a_non_callable_is_refused_at_once_naming_the_parameter() -> None:
    # Before the fix the call was queued and failed on a worker ("'int'
    # object is not callable"): with a full bounded queue, only after
    # waiting for room, here for good.
    async def main() -> None:
        loop = asyncio.get_running_loop()
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            loop.set_default_executor(ex)
            running, queued = await _fill(ex)
            with pytest.raises(TypeError, match=r"fn must be a callable, got 5 \(int\)"):
                ex.run(5)  # type: ignore[arg-type,unused-coroutine]
            with pytest.raises(TypeError, match=r"func must be a callable, got 'abs' \(str\)"):
                await asyncio.wait_for(taut.to_thread("abs"), LONG)  # type: ignore[arg-type]
            assert ex.stats().queued == 1
            running.set()
            queued.set()

    asyncio.run(main())


def test_shutdown_with_cancel_futures_cancels_queued_awaits_on_their_loop() -> None:
    async def main() -> None:
        ex = taut.ThreadPoolExecutor(1)
        gate = threading.Event()
        first = await running_call(ex, gate.wait, LONG)
        queued = asyncio.ensure_future(ex.run(abs, -1))
        await asyncio.sleep(0)
        # From another thread, as a supervisor would.
        stopper = threading.Thread(target=ex.shutdown, kwargs={"cancel_futures": True})
        stopper.start()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(queued, LONG)
        gate.set()
        await first
        stopper.join(LONG)

    asyncio.run(main())


# -- loop.run_in_executor on a taut executor --------------------------------------
# asyncio's own run_in_executor gets the loop's future straight from submit
# (settled through the loop's channel), instead of wrapping a
# concurrent.futures future whose done callback the worker would run.


def test_run_in_executor_gets_the_loops_own_future_without_a_concurrent_one() -> None:
    made: list[object] = []

    class Counting(taut.Future[object]):
        def __init__(self) -> None:
            made.append(self)
            super().__init__()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with taut.ThreadPoolExecutor(2) as ex:
            original = taut.executor.Future
            taut.executor.Future = Counting  # type: ignore[misc]
            try:
                future = loop.run_in_executor(ex, pow, 2, 10)
                assert isinstance(future, asyncio.Future)
                assert future.get_loop() is loop
                assert await future == 1024
                assert made == []  # no concurrent.futures future behind it
                # submit() called by anything else still returns a taut.Future.
                assert ex.submit(pow, 2, 3).result(LONG) == 8
                assert len(made) == 1
            finally:
                taut.executor.Future = original  # type: ignore[misc]

    asyncio.run(main())


def test_run_in_executor_outcomes_exceptions_and_stop_iteration() -> None:
    def stop() -> None:
        raise StopIteration("done")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with taut.ThreadPoolExecutor(2) as ex:
            results = await asyncio.gather(*[loop.run_in_executor(ex, abs, -i) for i in range(500)])
            assert results == list(range(500))
            with pytest.raises(ZeroDivisionError):
                await loop.run_in_executor(ex, divmod, 1, 0)
            # The standard library's wrapped future never settles here.
            with pytest.raises(RuntimeError, match="StopIteration"):
                await asyncio.wait_for(loop.run_in_executor(ex, stop), LONG)

    asyncio.run(main())


def test_run_in_executor_cancelled_while_queued_never_runs() -> None:
    ran: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with taut.ThreadPoolExecutor(1) as ex:
            gate = threading.Event()
            blocker = loop.run_in_executor(ex, gate.wait, LONG)
            while ex.stats().running == 0:
                await asyncio.sleep(0.001)
            queued = loop.run_in_executor(ex, ran.append, 1)
            assert queued.cancel()
            gate.set()
            await blocker
            # The worker reaches the cancelled call, skips it, goes on.
            assert await loop.run_in_executor(ex, len, "ab") == 2
            assert ex.stats().cancelled == 1

    asyncio.run(main())
    assert ran == []


def test_run_in_executor_cancelled_while_queued_gives_its_room_back_at_once() -> None:
    # With a bounded queue, a run_in_executor call (asyncio.to_thread's too,
    # on a taut default executor) cancelled while queued held its room until
    # a worker reached it: behind a hung call, for good. Meanwhile newcomers
    # were refused (QueueFull) and coroutines waiting for room kept waiting,
    # with nothing in the queue that would ever run.
    ran: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
            gate = threading.Event()
            try:
                blocker = await running_call(ex, gate.wait, LONG)
                queued = loop.run_in_executor(ex, ran.append, "cancelled")
                waiting = asyncio.ensure_future(ex.run(ran.append, "waiting"))
                await asyncio.sleep(0)  # it waits for room
                assert queued.cancel()
                assert ex.stats().queued == 0  # out of the queue at once
                # The running call still blocks: only the cancelled call's
                # room lets the waiting coroutine into the queue.
                while ex._core.has_room_line():
                    await asyncio.sleep(0.001)
                assert ex.stats().queued == 1
            finally:
                gate.set()
            await asyncio.wait_for(waiting, LONG)
            await blocker
            assert ex.stats().cancelled == 1

    asyncio.run(asyncio.wait_for(main(), LONG))
    assert ran == ["waiting"]


def test_run_in_executor_copies_the_context_when_the_executor_propagates_it() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    async def main() -> tuple[str, str]:
        var.set("caller")
        loop = asyncio.get_running_loop()
        with taut.ThreadPoolExecutor(1, propagate_context=True) as on, taut.ThreadPoolExecutor(
            1
        ) as off:
            return await loop.run_in_executor(on, var.get), await loop.run_in_executor(off, var.get)

    assert asyncio.run(main()) == ("caller", "unset")


def test_run_in_executor_before_the_loop_runs_and_from_a_loop_subclass() -> None:
    class MyLoop(asyncio.SelectorEventLoop):
        def run_in_executor(self, executor, func, *args):  # type: ignore[no-untyped-def]
            return super().run_in_executor(executor, func, *args)

    for loop in (asyncio.new_event_loop(), MyLoop()):
        with taut.ThreadPoolExecutor(1) as ex:
            future = loop.run_in_executor(ex, pow, 3, 2)  # not running yet
            try:
                assert loop.run_until_complete(asyncio.wait_for(future, LONG)) == 9
            finally:
                loop.close()


def test_a_function_merely_named_run_in_executor_gets_a_taut_future() -> None:
    def run_in_executor(ex: taut.ThreadPoolExecutor) -> object:
        return ex.submit(pow, 2, 2)

    async def main() -> None:
        with taut.ThreadPoolExecutor(1) as ex:
            # asyncio's run_in_executor has been seen (learned) first.
            assert await asyncio.get_running_loop().run_in_executor(ex, abs, -1) == 1
            future = run_in_executor(ex)
            assert isinstance(future, taut.Future)
            assert future.result(LONG) == 4

    asyncio.run(main())


def test_run_in_executor_after_shutdown_or_on_a_broken_pool_raises_as_before() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ex = taut.ThreadPoolExecutor(1)
        ex.shutdown()
        with pytest.raises(RuntimeError, match="after shutdown"):
            await loop.run_in_executor(ex, abs, 1)

    asyncio.run(main())


def test_run_in_executor_on_many_loops_in_many_threads() -> None:
    results = _squares_from_many_loops(
        lambda ex, loop, fn, *args: loop.run_in_executor(ex, fn, *args)
    )
    assert results == {t: [t * t] * 200 for t in range(6)}


def test_run_in_executor_called_from_another_thread_than_the_loops_works() -> None:
    # asyncio's run_in_executor only wraps what submit returns, so with the
    # standard library's pool a call made on a thread other than the loop's
    # works (the outcome arrives through call_soon_threadsafe), also in
    # asyncio's debug mode (uvloop's run_in_executor is the same). Taken
    # through the loop's channel, the call owed a parked worker's wake-up
    # to the end of the loop's pass with loop.call_soon, which is not
    # thread-safe: in debug mode it raised RuntimeError once the call was
    # queued (the call ran; its caller got the error instead of a future).
    loop = asyncio.new_event_loop()
    loop.set_debug(True)
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    ex = taut.ThreadPoolExecutor(2)
    release = threading.Event()

    def on_the_loop(awaitable: Any) -> object:
        async def outcome() -> object:
            return await asyncio.wait_for(awaitable, LONG)

        return asyncio.run_coroutine_threadsafe(outcome(), loop).result(LONG)

    try:
        on_the_loop(_park_all(ex, 2))
        # One worker busy, one parked: the next call's wake-up is owed.
        started = threading.Event()
        busy = loop.run_in_executor(ex, lambda: started.set() or release.wait(LONG))
        assert started.wait(LONG)
        ran: list[int] = []
        call = loop.run_in_executor(ex, lambda: ran.append(1) or 5)
        assert on_the_loop(call) == 5
        assert ran == [1]
        release.set()
        assert on_the_loop(busy) is True
    finally:
        release.set()
        ex.shutdown()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(LONG)
        loop.close()


# -- waking workers once per loop pass -----------------------------------------
# A pass that queues many calls wakes one parked worker at once and the
# others when the pass is over (taut._asyncio._LoopLink.owe/flush).


async def _park_all(ex: taut.ThreadPoolExecutor, n: int) -> None:
    """Start ``n`` workers, then let them go idle (parked, or about to)."""
    barrier = threading.Barrier(n)
    await asyncio.gather(*[ex.run(barrier.wait, LONG) for _ in range(n)])
    while ex.stats().idle < n:
        await asyncio.sleep(0.001)
    time.sleep(0.01)  # past the workers' brief spin


def test_calls_queued_in_one_pass_still_run_in_parallel() -> None:
    # Each call waits for all the others: they finish only if every one of
    # them got its own worker, i.e. the owed wake-ups were handed out.
    n = 6

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with taut.ThreadPoolExecutor(n) as ex:
            loop.set_default_executor(ex)
            for kind in ("to_thread", "run_in_executor", "run"):
                await _park_all(ex, n)
                barrier = threading.Barrier(n)
                if kind == "to_thread":
                    calls = [taut.to_thread(barrier.wait, LONG) for _ in range(n)]
                elif kind == "run_in_executor":
                    calls = [loop.run_in_executor(ex, barrier.wait, LONG) for _ in range(n)]
                else:
                    calls = [ex.run(barrier.wait, LONG) for _ in range(n)]
                assert sorted(await asyncio.gather(*calls)) == list(range(n))

    asyncio.run(main())


def test_calls_whose_wake_up_is_never_handed_out_still_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The loop never gets to the end-of-pass wake-up (stopped, closed): the
    # worker woken at once takes the queued calls one after another.
    from taut import _asyncio

    flushed: list[int] = []
    monkeypatch.setattr(_asyncio._LoopLink, "flush", lambda self: flushed.append(1))

    async def main() -> list[int]:
        with taut.ThreadPoolExecutor(4) as ex:
            await _park_all(ex, 4)
            return list(await asyncio.gather(*[ex.run(abs, -i) for i in range(50)]))

    assert asyncio.run(main()) == list(range(50))
    assert flushed  # some wake-ups were owed, and never handed out


@pytest.mark.parametrize("kind", ["run_in_executor", "run"])
def test_a_call_queued_beside_a_busy_worker_starts_even_while_the_loop_blocks(kind: str) -> None:
    # With the standard library's executor the call starts on the idle worker
    # at once. Here the pass that queued it blocks (code on the loop waiting
    # for it, or merely a long stretch of work) while the other worker's call
    # waits for the loop: the parked worker's wake-up, owed until the pass is
    # over, must come from the backstop timer instead.
    started = threading.Event()
    in_time: list[bool] = []

    def blocking_code_on_the_loop() -> None:
        in_time.append(started.wait(LONG / 3))  # the call itself takes microseconds

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with taut.ThreadPoolExecutor(2) as ex:
            await _park_all(ex, 2)
            release = threading.Event()
            try:
                busy = await running_call(ex, release.wait, LONG)
                if kind == "run_in_executor":
                    call: Any = loop.run_in_executor(ex, started.set)
                    blocking_code_on_the_loop()
                else:
                    # The task queues its call, then the blocking callback
                    # runs in the same pass.
                    call = asyncio.ensure_future(ex.run(started.set))
                    loop.call_soon(blocking_code_on_the_loop)
                    await asyncio.sleep(0)
            finally:
                release.set()
            await call
            await busy

    asyncio.run(main())
    assert in_time == [True]


def test_one_wake_up_channel_per_loop_for_completions_and_deadlines() -> None:
    from taut import _asyncio, _loop_waker

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with taut.ThreadPoolExecutor(2) as ex:
            assert await ex.run(abs, -1) == 1
            link = _asyncio._link(loop)
            assert link is not None
            assert link.channel is _loop_waker.waker_for(loop).channel
            # A deadline expiring while a call runs, and completions, through
            # the same channel and reader callback.
            gate = threading.Event()
            with pytest.raises(TimeoutError):
                async with taut.fail_after(0.05):
                    await ex.run(gate.wait, LONG)
            gate.set()
            assert await asyncio.gather(*[ex.run(abs, -i) for i in range(100)]) == list(range(100))

    asyncio.run(main())


def test_a_call_that_turns_out_long_never_keeps_short_ones_queued_while_workers_sleep() -> None:
    """With short calls a loop pass wakes one parked worker, and each woken
    worker that claims a call and sees more waiting wakes the next. Here the
    woken worker's call blocks: the short call behind it must still start on
    another worker, not wait for a blocked one to finish."""
    release = threading.Event()

    async def main() -> None:
        with taut.ThreadPoolExecutor(3) as ex:
            try:
                # Three workers started (three calls at once), then the pool
                # learns that calls are short.
                await asyncio.gather(*(ex.run(time.sleep, 0.01) for _ in range(3)))
                assert ex.stats().workers == 3
                for _ in range(50):
                    await ex.run(int)
                # The blocking calls outlast the wait for the short one.
                first = asyncio.ensure_future(ex.run(release.wait, 2 * LONG))
                while ex.stats().running == 0:
                    await asyncio.sleep(0.001)
                await asyncio.sleep(0.05)  # the idle workers stop spinning and park
                assert ex.stats().running == 1
                # One pass: a call that blocks, then a short one behind it.
                second = asyncio.ensure_future(ex.run(release.wait, 2 * LONG))
                short = asyncio.ensure_future(ex.run(lambda: "short"))
                assert await asyncio.wait_for(short, LONG) == "short"
                assert not first.done() and not second.done()
            finally:
                release.set()
            assert await first is True
            assert await second is True

    asyncio.run(main())
