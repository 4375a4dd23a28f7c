"""taut's deadline scopes inside asyncio tasks, against the behaviour of
``asyncio.timeout`` (CPython's Lib/test/test_asyncio/test_timeouts.py) and of
anyio's/trio's ``fail_after``/``move_on_after``, written again for taut.

Every test runs twice: with ``async with`` and with a plain ``with`` inside
the task (anyio's form), which must behave exactly alike. Expiry needs the
real timer, so budgets are lopsided (0.01 s against work of 30 s), or the
deadline is already past at entry, which is decided from the clock and is
deterministic.
"""

from __future__ import annotations

import asyncio
import builtins
import sys
import threading
import time
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Callable, TypeVar

import pytest

import taut
from taut import DeadlineExpired, DeadlineScope, fail_after, fail_at, move_on_after, move_on_at

LONG = 30.0
SHORT = 0.01
T = TypeVar("T")

pytestmark = pytest.mark.timeout(60)


class Entered:
    """``async with Entered(scope, plain)`` enters ``scope`` with ``async with``
    or, for ``plain=True``, with a plain ``with`` run in the same task."""

    def __init__(self, scope: DeadlineScope, plain: bool) -> None:
        self.scope = scope
        self.plain = plain

    async def __aenter__(self) -> DeadlineScope:
        if self.plain:
            return self.scope.__enter__()
        return await self.scope.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if self.plain:
            return self.scope.__exit__(exc_type, exc, tb)
        return await self.scope.__aexit__(exc_type, exc, tb)


@pytest.fixture(params=["async_with", "plain_with"])
def enter(request: pytest.FixtureRequest) -> Callable[[DeadlineScope], Entered]:
    plain = request.param == "plain_with"
    return lambda scope: Entered(scope, plain)


def run(coro_fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(coro_fn())


# -- basics ------------------------------------------------------------------


def test_expiry_cancels_and_raises(enter: Callable[[DeadlineScope], Entered]) -> None:
    async def main() -> None:
        t0 = time.monotonic()
        with pytest.raises(DeadlineExpired) as info:
            async with enter(fail_after(SHORT, "fetch")) as scope:
                await asyncio.sleep(LONG)
        assert scope.expired
        assert info.value.label == "fetch"
        assert isinstance(info.value.__cause__, asyncio.CancelledError)
        assert time.monotonic() - t0 < LONG / 3
        await asyncio.sleep(0.01)  # no stray cancellation afterwards

    run(main)


def test_fail_at_keeps_the_deadline(enter: Callable[[DeadlineScope], Entered]) -> None:
    async def main() -> None:
        deadline = time.monotonic() + SHORT
        with pytest.raises(DeadlineExpired):
            async with enter(fail_at(deadline)) as scope:
                await asyncio.sleep(LONG)
        assert scope.expired
        assert scope.deadline == deadline

    run(main)


def test_move_on_swallows_the_cancellation(enter: Callable[[DeadlineScope], Entered]) -> None:
    async def main() -> str:
        async with enter(move_on_after(SHORT)) as scope:
            await asyncio.sleep(LONG)
            return "not reached"
        assert scope.expired
        await asyncio.sleep(0.01)
        return "after"

    assert run(main) == "after"


def test_nested_same_deadline_only_outermost_raises(
    enter: Callable[[DeadlineScope], Entered],
) -> None:
    async def main() -> None:
        seen_cancel = False
        deadline = time.monotonic() + SHORT
        with pytest.raises(DeadlineExpired) as info:
            async with enter(fail_at(deadline, "outer")) as outer:
                try:
                    async with enter(fail_at(deadline, "inner")) as inner:
                        await asyncio.sleep(LONG)
                except asyncio.CancelledError:
                    seen_cancel = True
                    raise
        assert seen_cancel
        assert info.value.label == "outer"
        assert outer.expired and inner.expired

    if sys.version_info < (3, 11):
        pytest.skip("telling two cancellations apart needs Task.uncancel (3.11+)")
    run(main)


def test_the_block_sees_the_cancellation(enter: Callable[[DeadlineScope], Entered]) -> None:
    async def main() -> bool:
        cancelled = False
        with pytest.raises(DeadlineExpired):
            async with enter(fail_after(SHORT)):
                try:
                    await asyncio.sleep(LONG)
                except asyncio.CancelledError:
                    cancelled = True
                    raise
        return cancelled

    assert run(main)


def test_in_time_is_not_expired(enter: Callable[[DeadlineScope], Entered]) -> None:
    async def main() -> None:
        async with enter(fail_after(LONG)) as scope:
            await asyncio.sleep(0)
        assert not scope.expired
        assert scope.deadline is not None and scope.deadline > time.monotonic()

    run(main)


@pytest.mark.parametrize("factory", [fail_after, fail_at, move_on_after, move_on_at])
def test_none_disables(
    enter: Callable[[DeadlineScope], Entered], factory: Callable[[object], DeadlineScope]
) -> None:
    async def main() -> None:
        async with enter(factory(None)) as scope:
            assert taut.remaining() is None
            await asyncio.sleep(0.01)
        assert not scope.expired
        assert scope.deadline is None

    run(main)


# -- a deadline already past at entry ------------------------------------------


@pytest.mark.parametrize("seconds", [0, -11, -1e300])
def test_past_deadline_cancels_at_the_first_await(
    enter: Callable[[DeadlineScope], Entered], seconds: float
) -> None:
    async def main() -> None:
        for _ in range(20):  # deterministic, not a coin toss on timer latency
            reached = False
            t0 = time.monotonic()
            with pytest.raises(DeadlineExpired):
                async with enter(fail_after(seconds)) as scope:
                    await asyncio.sleep(0)
                    reached = True
            assert not reached
            assert scope.expired
            assert scope.deadline is not None and scope.deadline <= time.monotonic()
            assert scope.deadline >= t0 or seconds < 0

    run(main)


def test_move_on_at_past_never_runs_code_after_the_first_await(
    enter: Callable[[DeadlineScope], Entered],
) -> None:
    async def main() -> None:
        for past in (time.monotonic() - 5, 0.0, -1e9):
            reached = []
            async with enter(move_on_at(past)) as scope:
                assert scope.expired
                await asyncio.sleep(0)
                reached.append(1)
            assert reached == []
            assert scope.expired

    run(main)


def test_past_deadline_without_await_raises_on_exit_and_leaves_no_cancel(
    enter: Callable[[DeadlineScope], Entered],
) -> None:
    async def main() -> None:
        with pytest.raises(DeadlineExpired):
            async with enter(fail_after(0)):
                pass
        async with enter(move_on_after(0)) as scope:
            pass
        assert scope.expired
        # The cancellation planned for the first await must not hit later code.
        await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        task = asyncio.current_task()
        assert task is not None
        if sys.version_info >= (3, 11):
            assert task.cancelling() == 0

    run(main)


# -- foreign exceptions and cancellations ---------------------------------------


def test_foreign_exception_passes(enter: Callable[[DeadlineScope], Entered]) -> None:
    async def main() -> None:
        with pytest.raises(KeyError):
            async with enter(fail_after(LONG)) as scope:
                raise KeyError("mine")
        assert not scope.expired

    run(main)


def test_external_cancel_is_not_a_timeout(enter: Callable[[DeadlineScope], Entered]) -> None:
    async def main() -> None:
        with pytest.raises(asyncio.CancelledError):
            async with enter(fail_after(LONG)) as scope:
                task = asyncio.current_task()
                assert task is not None
                task.cancel()
                await asyncio.sleep(LONG)
        assert not scope.expired

    run(main)


def test_outer_task_is_not_cancelled(enter: Callable[[DeadlineScope], Entered]) -> None:
    async def main() -> None:
        async def inner() -> str:
            with pytest.raises(DeadlineExpired):
                async with enter(fail_after(SHORT)):
                    await asyncio.sleep(LONG)
            return "done"

        task = asyncio.ensure_future(inner())
        assert await task == "done"
        assert not task.cancelled()

    run(main)


def test_outer_fires_while_the_loop_was_blocked_in_the_inner_scope(
    enter: Callable[[DeadlineScope], Entered],
) -> None:
    async def main() -> None:
        with pytest.raises(DeadlineExpired) as info:
            async with enter(fail_after(SHORT, "outer")):
                async with enter(fail_after(LONG, "inner")) as inner:
                    time.sleep(SHORT * 5)  # the loop is blocked; the timer is not
                    await asyncio.sleep(LONG)
        assert info.value.label == "outer"
        assert not inner.expired

    run(main)


def test_inner_expiry_then_outer_expiry(enter: Callable[[DeadlineScope], Entered]) -> None:
    async def main() -> None:
        t0 = time.monotonic()
        with pytest.raises(DeadlineExpired) as outer_info:
            async with enter(fail_after(1.0, "outer")):
                with pytest.raises(DeadlineExpired) as inner_info:
                    async with enter(fail_after(SHORT, "inner")):
                        time.sleep(SHORT * 5)
                        await asyncio.sleep(LONG)
                assert inner_info.value.label == "inner"
                await asyncio.sleep(LONG)  # ended by the outer scope
        assert outer_info.value.label == "outer"
        assert time.monotonic() - t0 < LONG / 3

    run(main)


async def _swallow_own_cancellation() -> asyncio.Task[Any]:
    """Cancel the running task and swallow the CancelledError, as careless
    code does; returns the task."""
    task = asyncio.current_task()
    assert task is not None
    try:
        task.cancel()
        await asyncio.sleep(LONG)
    except asyncio.CancelledError:
        pass
    return task


def test_timeout_after_a_swallowed_cancellation(
    enter: Callable[[DeadlineScope], Entered],
) -> None:
    async def main() -> None:
        await _swallow_own_cancellation()
        with pytest.raises(DeadlineExpired):
            async with enter(fail_after(0)):
                await asyncio.sleep(LONG)

    run(main)


def test_cancel_inside_a_scope_after_a_swallowed_cancellation(
    enter: Callable[[DeadlineScope], Entered],
) -> None:
    async def main() -> None:
        task = await _swallow_own_cancellation()
        with pytest.raises(asyncio.CancelledError):
            async with enter(fail_after(LONG)):
                task.cancel()
                await asyncio.sleep(LONG)

    run(main)


class LazyCancelScope:
    """An outer cancel scope delivering its cancellation as anyio's does on
    asyncio: from a loop timer at its deadline, with ``task.cancel()`` only
    while the task waits on a future not yet done (otherwise again on the
    loop's next pass); on exit it swallows the CancelledError it caused."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.caught = False
        self.sent = 0

    async def __aenter__(self) -> LazyCancelScope:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.handle: asyncio.Handle = loop.call_at(loop.time() + self.delay, self._deliver)
        return self

    def _deliver(self) -> None:
        waiter = self.task._fut_waiter  # type: ignore[attr-defined]
        if waiter is None or not waiter.done():
            self.sent += 1
            self.task.cancel()
        else:
            self.handle = self.task.get_loop().call_soon(self._deliver)

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        self.handle.cancel()
        if self.sent and exc_type is asyncio.CancelledError:
            for _ in range(self.sent):
                self.task.uncancel()  # type: ignore[attr-defined,unused-ignore]
            self.caught = True
            return True
        return False


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Task.uncancel is 3.11+")
@pytest.mark.parametrize("scope", [fail_after, move_on_after])
def test_an_outer_cancel_scope_due_first_wins_over_ours_due_with_it(
    scope: Callable[[float], DeadlineScope], enter: Callable[[DeadlineScope], Entered]
) -> None:
    # An anyio scope around ours with the same timeout (ours entered after
    # it, so due a few microseconds later): asyncio.timeout in our place
    # lets the outer scope win, every time. Ours cancelled the task from the
    # loop's reader callback, which the loop runs before the timers due in
    # the same pass: the outer scope then found the task's waiter done and
    # sent nothing, so ours took the cancellation for its own (DeadlineExpired
    # out of the outer scope) in 14 runs of 20.
    async def main() -> list[str]:
        outcomes = []
        for _ in range(20):
            try:
                async with LazyCancelScope(SHORT) as outer:
                    async with enter(scope(SHORT)):
                        await asyncio.sleep(LONG)
                outcomes.append("outer" if outer.caught else "neither")
            except DeadlineExpired:
                outcomes.append("ours")
        return outcomes

    assert run(main) == ["outer"] * 20


# -- exception chaining (as asyncio.timeout on CPython 3.12+) --------------------


def test_chain_cancelled_error_during_handling(enter: Callable[[DeadlineScope], Entered]) -> None:
    async def main() -> None:
        with pytest.raises(DeadlineExpired) as info:
            async with enter(fail_after(SHORT)):
                try:
                    1 / 0  # noqa: B018
                finally:
                    await asyncio.sleep(LONG)
        cancelled = info.value.__cause__
        assert isinstance(cancelled, asyncio.CancelledError)
        assert info.value.__context__ is cancelled
        assert cancelled.__cause__ is None
        assert isinstance(cancelled.__context__, ZeroDivisionError)

    run(main)


def test_chain_foreign_exception_in_cleanup(enter: Callable[[DeadlineScope], Entered]) -> None:
    async def crash() -> None:
        try:
            await asyncio.sleep(LONG)
        finally:
            1 / 0  # noqa: B018

    async def main() -> None:
        with pytest.raises(ZeroDivisionError) as info:
            async with enter(fail_after(SHORT, "crash")):
                await crash()
        err = info.value
        assert err.__cause__ is None
        expiry = err.__context__
        assert isinstance(expiry, DeadlineExpired)
        assert expiry.label == "crash"
        cancelled = expiry.__cause__
        assert isinstance(cancelled, asyncio.CancelledError)
        assert expiry.__context__ is cancelled

    run(main)


def test_chain_foreign_exception_two_levels(enter: Callable[[DeadlineScope], Entered]) -> None:
    async def main() -> None:
        with pytest.raises(ZeroDivisionError) as info:
            async with enter(fail_after(SHORT)):
                try:
                    try:
                        raise ValueError
                    finally:
                        await asyncio.sleep(LONG)
                finally:
                    try:
                        raise KeyError
                    finally:
                        1 / 0  # noqa: B018
        key_error = info.value.__context__
        assert isinstance(key_error, KeyError)
        expiry = key_error.__context__
        assert isinstance(expiry, DeadlineExpired)
        cancelled = expiry.__cause__
        assert isinstance(cancelled, asyncio.CancelledError)
        assert expiry.__context__ is cancelled
        assert isinstance(cancelled.__context__, ValueError)

    run(main)


def test_chain_move_on_also_names_the_expiry(enter: Callable[[DeadlineScope], Entered]) -> None:
    async def main() -> None:
        with pytest.raises(RuntimeError) as info:
            async with enter(move_on_after(SHORT)):
                try:
                    await asyncio.sleep(LONG)
                finally:
                    raise RuntimeError("cleanup failed")
        assert isinstance(info.value.__context__, DeadlineExpired)

    run(main)


def test_chain_nested_scope_in_finally(enter: Callable[[DeadlineScope], Entered]) -> None:
    async def main() -> None:
        with pytest.raises(DeadlineExpired) as outer_info:
            async with enter(fail_after(SHORT)):
                try:
                    await asyncio.sleep(LONG)
                finally:
                    with pytest.raises(DeadlineExpired) as inner_info:
                        async with enter(fail_after(SHORT)):
                            await asyncio.sleep(LONG)
        first = outer_info.value.__cause__
        assert isinstance(first, asyncio.CancelledError)
        assert first.__context__ is None
        second = inner_info.value.__cause__
        assert isinstance(second, asyncio.CancelledError)
        assert second.__context__ is first

    if sys.version_info < (3, 11):
        pytest.skip("telling two cancellations apart needs Task.uncancel (3.11+)")
    run(main)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="TaskGroup is 3.11+")
def test_chain_inside_exception_groups(enter: Callable[[DeadlineScope], Entered]) -> None:
    async def child() -> None:
        try:
            await asyncio.sleep(LONG)
        finally:
            1 / 0  # noqa: B018

    async def main() -> None:
        group_type: Any = getattr(builtins, "ExceptionGroup")  # noqa: B009 (3.11+)
        with pytest.raises(group_type) as info:
            async with enter(fail_after(SHORT)):
                async with asyncio.TaskGroup() as tg:  # type: ignore[attr-defined,unused-ignore]
                    tg.create_task(child())
                    try:
                        raise ValueError
                    finally:
                        await asyncio.sleep(LONG)
        group = info.value
        expiry = group.__context__
        assert isinstance(expiry, DeadlineExpired)
        assert isinstance(expiry.__cause__, asyncio.CancelledError)
        assert isinstance(expiry.__cause__.__context__, ValueError)
        (crash,) = group.exceptions
        assert isinstance(crash, ZeroDivisionError)
        member_expiry = crash.__context__
        assert isinstance(member_expiry, DeadlineExpired)
        assert isinstance(member_expiry.__cause__, asyncio.CancelledError)
        assert member_expiry.__context__ is member_expiry.__cause__

    run(main)


# -- entering --------------------------------------------------------------------


def test_entered_only_once(enter: Callable[[DeadlineScope], Entered]) -> None:
    async def main() -> None:
        async with enter(fail_after(LONG)) as scope:
            with pytest.raises(RuntimeError, match="entered only once"):
                async with enter(scope):
                    pass
        with pytest.raises(RuntimeError, match="entered only once"):
            async with enter(scope):
                pass

    run(main)


def test_async_with_needs_a_task() -> None:
    async def outside_a_task() -> None:
        scope = fail_after(LONG)
        with pytest.raises(RuntimeError, match="inside an asyncio task"):
            await scope.__aenter__()
        assert scope.deadline is None  # nothing was entered

    loop = asyncio.new_event_loop()
    try:
        coro = outside_a_task()
        finished: asyncio.Future[None] = loop.create_future()

        def step() -> None:
            # A loop callback: the loop runs, but no task does.
            try:
                coro.send(None)
            except StopIteration:
                finished.set_result(None)
            except BaseException as e:  # pragma: no cover - reported below
                finished.set_exception(e)

        loop.call_soon(step)
        loop.run_until_complete(finished)
    finally:
        loop.close()


def test_plain_with_interrupt_in_a_task_interrupts_sync_code_without_cancelling() -> None:
    """interrupt=True marks a synchronous block (a gather runs a sync call
    inline this way): it is interrupted on its thread, even while it blocks
    the loop, and the task is not cancelled."""

    async def main() -> None:
        t0 = time.monotonic()
        with pytest.raises(DeadlineExpired):
            with fail_after(SHORT, interrupt=True):
                time.sleep(LONG)  # blocks the loop: main thread, so SIGURG ends it
        assert time.monotonic() - t0 < LONG / 3
        assert taut.remaining() is None
        await asyncio.sleep(SHORT * 5)  # no stray cancellation
        task = asyncio.current_task()
        assert task is not None
        if sys.version_info >= (3, 11):
            assert task.cancelling() == 0

    run(main)


def test_plain_with_interrupt_in_a_task_on_a_worker_thread() -> None:
    """The gather's inline form: an event loop on a worker thread runs a sync
    call under ``move_on_at(..., interrupt=True)``; it is stopped on time."""

    def spin() -> None:
        # A loop in a function of its own: CPython 3.13.0 can let an
        # asynchronous exception escape a `with` of the same function.
        end = time.monotonic() + LONG
        while time.monotonic() < end:
            pass

    async def main() -> bool:
        with move_on_after(SHORT, interrupt=True) as scope:
            spin()
        await asyncio.sleep(0)
        return scope.expired

    results: list[bool] = []
    worker = threading.Thread(target=lambda: results.append(asyncio.run(main())))
    t0 = time.monotonic()
    worker.start()
    worker.join(LONG * 2)
    assert results == [True]
    assert time.monotonic() - t0 < LONG / 3


def test_plain_with_outside_a_task_does_not_cancel() -> None:
    """A sync callback of the loop (no task): the scope is a plain one."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bool] = loop.create_future()

        def callback() -> None:
            try:
                with fail_after(0):
                    pass
            except DeadlineExpired:
                done.set_result(True)

        loop.call_soon(callback)
        assert await done

    run(main)


# -- repr ---------------------------------------------------------------------------


def test_repr_shows_remaining_time(enter: Callable[[DeadlineScope], Entered]) -> None:
    async def main() -> None:
        scope = fail_after(LONG, "fetch")
        assert repr(scope) == "<taut.DeadlineScope fail label='fetch' timeout=30s not entered>"
        async with enter(scope):
            shown = repr(scope)
            assert shown.startswith("<taut.DeadlineScope fail label='fetch' remaining=")
            assert shown.endswith(" timeout=30s active>")
            left = float(shown.split("remaining=")[1].split("s ")[0])
            assert 0 < left <= LONG
        assert repr(scope) == "<taut.DeadlineScope fail label='fetch' timeout=30s exited in time>"
        with pytest.raises(DeadlineExpired):
            async with enter(fail_after(SHORT, "late")) as late:
                await asyncio.sleep(LONG)
        assert repr(late) == "<taut.DeadlineScope fail label='late' timeout=0.01s exited expired>"
        async with enter(move_on_after(None)) as unbounded:
            assert repr(unbounded) == (
                "<taut.DeadlineScope move_on label='operation' unbounded active>"
            )

    run(main)


# -- misnesting in a task -------------------------------------------------------------


def test_misnesting_in_a_task_raises_and_leaves_no_cancel() -> None:
    async def main() -> None:
        outer = fail_after(LONG, "outer")
        inner = fail_after(SHORT, "inner")
        outer.__enter__()
        inner.__enter__()
        with pytest.raises(RuntimeError, match="stack corrupted"):
            outer.__exit__(None, None, None)
        assert taut.remaining() is None
        # The abandoned inner scope is disarmed: its deadline cancels nothing.
        await asyncio.sleep(SHORT * 10)
        assert inner.__exit__(None, None, None) is False
        task = asyncio.current_task()
        assert task is not None
        if sys.version_info >= (3, 11):
            assert task.cancelling() == 0

    run(main)


def test_scope_exited_from_another_task_is_quiet() -> None:
    async def main() -> None:
        scope = fail_after(LONG)
        await scope.__aenter__()
        # Exited from another task (an async generator finalised elsewhere
        # does this): no error, and the timer is disarmed.
        assert not await asyncio.ensure_future(scope.__aexit__(None, None, None))
        assert scope._deadline is not None and scope._deadline.cancelled
        assert not scope.expired

    run(main)


# -- a scope exited in another context no longer bounds the entering one -----------------


@pytest.mark.parametrize("make", ["fail_after", "move_on_at"])
def test_scope_exited_from_another_task_stops_bounding_its_task(make: str) -> None:
    # fail_after(LONG) exits on the Rust fast path, move_on_at on the Python one.
    def scope() -> DeadlineScope:
        if make == "fail_after":
            return fail_after(LONG)
        return move_on_at(time.monotonic() + LONG)

    async def main() -> None:
        outer = scope()
        await outer.__aenter__()
        inner = scope()
        await inner.__aenter__()
        # Exited from another task, which runs in a copy of this context.
        assert not await asyncio.ensure_future(inner.__aexit__(None, None, None))
        # The entering task is bounded by what encloses the closed scope
        # again, not by the closed scope (0 s left for good once its deadline
        # passed, even inside a fresh scope).
        assert taut.deadline._context.bounding_scope() is outer
        assert not await outer.__aexit__(None, None, None)
        assert taut.remaining() is None

    run(main)


def test_async_generator_closed_elsewhere_stops_bounding_the_consumer() -> None:
    async def numbers() -> Any:
        async with fail_after(LONG):
            yield 1
            yield 2

    async def main() -> None:
        agen = numbers()
        async for _ in agen:
            break
        # As the loop's async generator finaliser does: aclose in a new task.
        await asyncio.ensure_future(agen.aclose())
        assert taut.remaining() is None
        async with move_on_after(None):
            assert taut.remaining() is None

    run(main)


def test_exit_without_entry_is_a_named_error(enter: Callable[[DeadlineScope], Entered]) -> None:
    async def main() -> None:
        scope = fail_after(LONG, "fetch")
        with pytest.raises(RuntimeError, match="'fetch' was exited without being entered"):
            await enter(scope).__aexit__(None, None, None)
        # Nothing changed: the scope can still be entered and bounds its block.
        async with enter(scope):
            left = taut.remaining()
            assert left is not None and 0 < left <= LONG
        assert taut.remaining() is None
        # And its deadline still fires (the refused exit used to mark the
        # scope closed, which its expiry then ignored).
        late = fail_at(time.monotonic() - 1)
        with pytest.raises(RuntimeError, match="without being entered"):
            await enter(late).__aexit__(None, None, None)
        with pytest.raises(DeadlineExpired):
            async with enter(late):
                await asyncio.sleep(LONG)

    run(main)


@pytest.mark.parametrize("factory", [move_on_after, fail_after])
def test_a_cancel_from_elsewhere_landing_as_the_scope_expires_is_not_taken_for_its_own(
    factory: Callable[[float], DeadlineScope],
) -> None:
    # The scope's expiry cancels its task from a loop callback of its own
    # (after the timers due then); a task.cancel() from elsewhere landing
    # in between is not the scope's: it must leave the scope as it came, not
    # be swallowed (move_on_*) or turned into DeadlineExpired (fail_*).
    # From 3.11 tasks count cancellations; before, the scope must not cancel
    # once one from elsewhere is on its way (before the fix, on 3.9/3.10 it
    # cancelled too and took both for its own).
    reached_the_end = []

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        async with factory(30) as scope:
            scope._fire()  # as the loop's waker does at expiry  # type: ignore[attr-defined]
            task.cancel()  # from elsewhere, before the scope's callback runs
            await asyncio.sleep(LONG)
        reached_the_end.append(True)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())
    assert reached_the_end == []
