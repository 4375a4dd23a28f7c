"""Deadline scopes, DeadlineExpired and BoundedResult.

Scope logic (deadline on entry, nesting, remaining(), exit decisions) runs on
an injected fake clock; what needs the real timer (interrupts, asyncio
cancellation) uses lopsided timings: budgets of 0.05 s against work of 30 s.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import math
import pickle
import sys
import threading
import time
from collections.abc import Iterator

import pytest

import taut
from taut import (
    BoundedResult,
    DeadlineExpired,
    fail_after,
    fail_at,
    move_on_after,
    move_on_at,
    remaining,
)
from taut.deadline import DeadlineScope
from taut.testing import MockClock as FakeClock
from taut.testing import scope_clock as installed_scope_clock

LONG = 30.0


@pytest.fixture
def clock() -> Iterator[FakeClock]:
    with installed_scope_clock() as fake:
        yield fake


# -- DeadlineExpired and BoundedResult --------------------------------------------


def test_deadline_expired_is_a_distinct_timeout_error() -> None:
    err = DeadlineExpired("fetch_page", 0.2, 0.25)
    assert isinstance(err, TimeoutError)
    assert str(err) == "deadline expired after 0.2s: fetch_page"
    assert (err.label, err.timeout_s, err.elapsed_s) == ("fetch_page", 0.2, 0.25)
    assert not isinstance(TimeoutError("provider timed out"), DeadlineExpired)
    with pytest.raises(TimeoutError):
        raise err
    try:
        raise TimeoutError("read timed out")
    except DeadlineExpired:  # pragma: no cover - must not match
        pytest.fail("a plain TimeoutError was taken for a DeadlineExpired")
    except TimeoutError:
        pass


def test_deadline_expired_defaults_and_pickle() -> None:
    assert str(DeadlineExpired()) == "deadline expired: operation"
    assert str(DeadlineExpired("x", 420.0)) == "deadline expired after 420s: x"
    assert str(DeadlineExpired("x", 1_000_000.0)) == "deadline expired after 1000000s: x"
    copy = pickle.loads(pickle.dumps(DeadlineExpired("job", 1.5, 2.0)))
    assert type(copy) is DeadlineExpired
    assert (copy.label, copy.timeout_s, copy.elapsed_s, str(copy)) == (
        "job",
        1.5,
        2.0,
        "deadline expired after 1.5s: job",
    )


def test_bounded_result_is_frozen_keyword_only_and_unwraps() -> None:
    ok = BoundedResult(timed_out=False, value=42, elapsed_s=0.1, timeout_s=1.0, label="f")
    assert ok.unwrap() == 42
    with pytest.raises(dataclasses.FrozenInstanceError):
        ok.value = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        BoundedResult(False, 42, 0.1, 1.0, "f")  # type: ignore[misc]
    late: BoundedResult[int] = BoundedResult(
        timed_out=True, elapsed_s=0.2, timeout_s=0.2, label="fetch_page"
    )
    assert late.value is None
    with pytest.raises(DeadlineExpired, match=r"^deadline expired after 0.2s: fetch_page$"):
        late.unwrap()
    assert ok == BoundedResult(timed_out=False, value=42, elapsed_s=0.1, timeout_s=1.0, label="f")


# -- scope logic on a fake clock ----------------------------------------------


def test_remaining_is_none_outside_scopes() -> None:
    assert remaining() is None


def test_deadline_is_computed_on_entry(clock: FakeClock) -> None:
    scope = fail_after(10)
    clock.advance(100)
    with scope:
        assert scope.deadline == 1110.0
        assert remaining() == 10.0
        clock.advance(4)
        assert remaining() == 6.0
        assert scope.remaining() == 6.0
    assert remaining() is None


def test_remaining_stops_at_zero_once_the_deadline_passed(clock: FakeClock) -> None:
    with move_on_after(5) as scope:
        clock.advance(7)
        assert remaining() == 0.0
        assert scope.remaining() == 0.0
    assert scope.expired


def test_nesting_earliest_wins(clock: FakeClock) -> None:
    with fail_after(10):
        with fail_after(3):
            assert remaining() == 3.0
            with move_on_after(100):
                assert remaining() == 3.0
            assert remaining() == 3.0
        assert remaining() == 10.0
        with fail_at(1002.5):
            assert remaining() == 2.5
        assert remaining() == 10.0
    assert remaining() is None


def test_fail_after_raises_on_exit_once_expired(clock: FakeClock) -> None:
    with pytest.raises(DeadlineExpired) as info:
        with fail_after(5, "fetch_page") as scope:
            assert not scope.expired
            clock.advance(6)
            assert scope.expired
    err = info.value
    assert (err.label, err.timeout_s, err.elapsed_s) == ("fetch_page", 5.0, 6.0)
    assert str(err) == "deadline expired after 5s: fetch_page"
    assert scope.expired


def test_fail_after_does_not_raise_in_time(clock: FakeClock) -> None:
    with fail_after(5) as scope:
        clock.advance(4.9)
    assert not scope.expired


def test_move_on_after_exits_quietly(clock: FakeClock) -> None:
    with move_on_after(5) as scope:
        clock.advance(6)
    assert scope.expired
    with move_on_at(1000.0 + 6 + 1) as scope2:
        clock.advance(0.5)
    assert not scope2.expired


def test_other_exceptions_pass_unchanged_even_when_expired(clock: FakeClock) -> None:
    with pytest.raises(KeyError):
        with fail_after(1):
            clock.advance(2)
            raise KeyError("mine")


def test_fail_at_is_absolute(clock: FakeClock) -> None:
    with pytest.raises(DeadlineExpired) as info:
        with fail_at(1005.0, "abs"):
            clock.advance(5)
    assert info.value.timeout_s == 5.0


def test_fail_at_in_the_past_is_already_expired(clock: FakeClock) -> None:
    with move_on_at(10.0) as scope:
        assert remaining() == 0.0
    assert scope.expired


def test_unbounded_scopes(clock: FakeClock) -> None:
    for scope in (fail_after(None), fail_after(math.inf), fail_at(None), move_on_at(math.inf)):
        with scope:
            clock.advance(1e9)
            assert remaining() is None
        assert not scope.expired


def test_huge_values_are_clamped(clock: FakeClock) -> None:
    with fail_after(10**400) as scope:
        assert remaining() == taut.MAX_TIMEOUT
    assert not scope.expired
    with fail_at(10**400):
        assert remaining() == taut.MAX_TIMEOUT


def test_scope_is_entered_once(clock: FakeClock) -> None:
    scope = move_on_after(1)
    with scope:
        pass
    with pytest.raises(RuntimeError, match="entered only once"):
        with scope:
            pass


def test_bad_values_are_rejected_with_exact_messages() -> None:
    with pytest.raises(TypeError, match=r"^seconds must be a number of seconds or None, got True"):
        fail_after(True)
    with pytest.raises(ValueError, match=r"^seconds must not be NaN, got nan \(float\)$"):
        move_on_after(math.nan)
    with pytest.raises(TypeError, match=r"^deadline must be a number of seconds or None, got '5'"):
        fail_at("5")
    # bool() would take "no" as True: an interrupt nobody asked for.
    with pytest.raises(TypeError, match=r"^interrupt must be a bool, got 'no' \(str\)$"):
        fail_after(1, interrupt="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^interrupt must be a bool, got 1 \(int\)$"):
        move_on_at(time.monotonic() + 1, interrupt=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^label must be a str, got 5 \(int\)$"):
        move_on_after(1, 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^label must be a str, got None \(NoneType\)$"):
        fail_at(time.monotonic() + 1, label=None)  # type: ignore[arg-type]

    class Named(str):
        pass

    with move_on_after(1, Named("a str subclass")) as scope:
        pass
    assert scope.label == "a str subclass"


def test_remaining_reaches_worker_threads_through_copied_context(clock: FakeClock) -> None:
    with fail_after(7), concurrent.futures.ThreadPoolExecutor(1) as pool:
        ctx = contextvars.copy_context()
        assert pool.submit(ctx.run, remaining).result() == 7.0
        # The stdlib pool runs in the worker's own context: no deadline there.
        assert pool.submit(remaining).result() is None


# -- real timer: sync interrupts -------------------------------------------------


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@pytest.mark.timeout(60)
def test_interrupt_raises_into_busy_python_code() -> None:
    t0 = time.monotonic()
    with pytest.raises(DeadlineExpired) as info:
        with fail_after(0.05, "spin", interrupt=True):
            _spin(LONG)
    assert time.monotonic() - t0 < LONG / 3
    assert type(info.value) is DeadlineExpired
    assert info.value.label == "spin"
    assert info.value.timeout_s == pytest.approx(0.05)


@pytest.mark.timeout(60)
def test_move_on_with_interrupt_swallows_and_flags() -> None:
    t0 = time.monotonic()
    with move_on_after(0.05, interrupt=True) as scope:
        _spin(LONG)
    assert scope.expired
    assert time.monotonic() - t0 < LONG / 3


@pytest.mark.timeout(60)
def test_interrupt_in_a_worker_thread() -> None:
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with fail_after(0.05, "worker", interrupt=True):
                _spin(LONG)
        except DeadlineExpired as e:
            errors.append(e)

    t = threading.Thread(target=worker)
    t.start()
    t.join(LONG + 5)
    assert len(errors) == 1 and errors[0].args == ("deadline expired after 0.05s: worker",)


@pytest.mark.timeout(60)
def test_no_interrupt_after_the_block_ends_in_time() -> None:
    with fail_after(0.1, interrupt=True) as scope:
        pass
    _spin(0.5)  # five times the budget: a stray interrupt would land here
    assert not scope.expired


@pytest.mark.timeout(60)
def test_outer_interrupt_passes_through_inner_scope() -> None:
    with pytest.raises(DeadlineExpired) as info:
        with fail_after(0.05, "outer", interrupt=True):
            with move_on_after(LONG, "inner") as inner:
                _spin(LONG)
    assert info.value.label == "outer"
    assert not inner.expired


@pytest.mark.timeout(60)
@pytest.mark.parametrize("inner_interrupts", [False, True], ids=["cooperative", "interrupt"])
def test_an_expired_inner_scope_never_swallows_the_outer_interrupt(
    inner_interrupts: bool,
) -> None:
    # The inner scope's deadline passed too, so it took the outer scope's
    # interrupt for its own and swallowed it: the rest of the outer block
    # then ran unbounded (the interrupt is raised once). On a worker thread,
    # both deadlines at the same moment; the sleep (no bytecode boundary)
    # lets both interrupts be set before one is raised (the later replaces
    # the earlier), so the one raised is in the inner block either way.
    outcome: list[object] = []

    def worker() -> None:
        at = time.monotonic() + 0.05
        t0 = time.monotonic()
        with move_on_at(at, "outer", interrupt=True) as outer:
            with move_on_at(at, "inner", interrupt=inner_interrupts) as inner:
                time.sleep(0.5)
                _spin(5.0)
            outcome.append("after the inner block")
            _spin(5.0)
        outcome.extend([outer.expired, inner.expired, time.monotonic() - t0 < 2.5])

    t = threading.Thread(target=worker)
    t.start()
    t.join(30)
    assert outcome == [True, True, True]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("whose", ["own", "outer"])
def test_an_interrupt_due_while_a_scope_exits_waits_for_the_exit(
    whose: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worst timing on a worker thread: the deadline fires while the
    # thread runs a scope's __exit__, before it cancels the deadline, and
    # the callback thread sets the asynchronous exception then. Made
    # certain here by an exit that takes 0.5 s. The bare ScopeInterrupt
    # escaped __exit__ and left the scope open: the label lost, and the
    # thread's context bounded by a dead deadline for good (remaining() 0.0
    # after the block), or the outer exit reporting misnesting.
    from taut.deadline import _scope

    real_open_scope = _scope.open_scope
    slow_thread: list[int] = []

    def slow_open_scope() -> DeadlineScope | None:
        if threading.get_ident() in slow_thread:
            _spin(0.5)
        return real_open_scope()

    monkeypatch.setattr(_scope, "open_scope", slow_open_scope)
    outcome: list[object] = []

    def worker() -> None:
        try:
            if whose == "own":
                with fail_after(0.05, "own", interrupt=True):
                    slow_thread.append(threading.get_ident())
            else:
                with fail_after(0.05, "outer", interrupt=True):
                    with move_on_after(LONG, "inner"):
                        slow_thread.append(threading.get_ident())
                    slow_thread.clear()
                    _spin(5.0)
        except BaseException as e:  # whatever escapes is the finding
            outcome.append((type(e).__name__, e.args))
        outcome.append(remaining())

    t = threading.Thread(target=worker)
    t.start()
    t.join(30)
    assert outcome == [("DeadlineExpired", (f"deadline expired after 0.05s: {whose}",)), None]


@pytest.mark.timeout(60)
def test_an_interrupt_dropped_by_a_finalizer_on_a_worker_thread_is_raised_again() -> None:
    # The asynchronous exception lands in a __del__ that the block runs at
    # the deadline; Python drops it (sys.unraisablehook), and it was set once.
    class Resource:
        def __del__(self) -> None:
            _spin(5.0)

    outcome: list[object] = []

    def worker() -> None:
        t0 = time.monotonic()
        with move_on_after(0.05, "block", interrupt=True) as scope:
            Resource()
            _spin(5.0)
        outcome.extend([scope.expired, time.monotonic() - t0 < 2.5])

    reported: list[object] = []
    previous_hook = sys.unraisablehook
    sys.unraisablehook = reported.append
    try:
        t = threading.Thread(target=worker)
        t.start()
        t.join(30)
    finally:
        sys.unraisablehook = previous_hook
    assert outcome == [True, True]
    assert reported == []


@pytest.mark.timeout(60)
def test_cooperative_flag_check() -> None:
    with move_on_after(0.05) as scope:
        end = time.monotonic() + LONG
        while not scope.expired and time.monotonic() < end:
            pass
    assert scope.expired
    assert time.monotonic() < end


# -- real timer: async with -----------------------------------------------------


@pytest.mark.timeout(60)
def test_async_fail_after_cancels_and_raises() -> None:
    async def main() -> float:
        t0 = time.monotonic()
        with pytest.raises(DeadlineExpired) as info:
            async with fail_after(0.05, "fetch_page"):
                await asyncio.sleep(LONG)
        assert info.value.label == "fetch_page"
        assert isinstance(info.value.__cause__, asyncio.CancelledError)
        # The task is usable afterwards: no stray cancellation pending.
        await asyncio.sleep(0.01)
        return time.monotonic() - t0

    assert asyncio.run(main()) < LONG / 3


@pytest.mark.timeout(60)
def test_async_move_on_after() -> None:
    async def main() -> bool:
        async with move_on_after(0.05) as scope:
            await asyncio.sleep(LONG)
        await asyncio.sleep(0.01)
        return scope.expired

    assert asyncio.run(main())


@pytest.mark.timeout(60)
def test_async_nested_outer_fires_inner_passes_cancellation_up() -> None:
    async def main() -> tuple[str, bool]:
        with pytest.raises(DeadlineExpired) as info:
            async with fail_after(0.05, "outer"):
                async with fail_after(LONG, "inner") as inner:
                    await asyncio.sleep(LONG)
        return info.value.label, inner.expired

    assert asyncio.run(main()) == ("outer", False)


@pytest.mark.timeout(60)
def test_async_external_cancel_is_not_a_deadline() -> None:
    async def main() -> None:
        async def body() -> None:
            async with fail_after(LONG):
                await asyncio.sleep(LONG)

        task = asyncio.ensure_future(body())
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


@pytest.mark.timeout(60)
def test_async_expiry_does_not_use_asyncio_timers() -> None:
    """The timer thread wakes the loop through a socket: the scope fires even
    though every asyncio timer API is broken in this loop."""

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def broken(*args: object, **kwargs: object) -> None:
            raise AssertionError("asyncio timers must not be used")

        loop.call_later = broken  # type: ignore[method-assign,assignment]
        loop.call_at = broken  # type: ignore[method-assign,assignment]
        never: asyncio.Future[None] = loop.create_future()
        with pytest.raises(DeadlineExpired):
            async with fail_after(0.05):
                await never

    asyncio.run(main())


@pytest.mark.timeout(60)
def test_async_block_that_overruns_without_awaiting_raises_on_exit() -> None:
    async def main() -> None:
        with pytest.raises(DeadlineExpired):
            async with fail_after(0.02):
                time.sleep(0.2)  # ten times the budget, no await
        await asyncio.sleep(0.05)  # no stray CancelledError afterwards

    asyncio.run(main())


@pytest.mark.timeout(60)
def test_async_remaining_and_interrupt_rejected() -> None:
    async def main() -> None:
        async with fail_after(LONG):
            left = remaining()
            assert left is not None and 0 < left <= LONG
        assert remaining() is None
        with pytest.raises(ValueError, match="interrupt=True is for `with` blocks"):
            async with fail_after(1, interrupt=True):
                pass

    asyncio.run(main())


@pytest.mark.timeout(60)
def test_async_many_loops_and_scopes() -> None:
    async def main() -> int:
        expired = 0
        for _ in range(20):
            async with move_on_after(0.001) as scope:
                await asyncio.sleep(LONG)
            expired += scope.expired
        return expired

    for _ in range(3):
        assert asyncio.run(main()) == 20


@pytest.mark.timeout(60)
def test_interrupt_with_deadline_already_passed_lands_in_the_block() -> None:
    for _ in range(20):
        with pytest.raises(DeadlineExpired) as info:
            with fail_after(0, "zero", interrupt=True):
                _spin(LONG)
        assert info.value.label == "zero"
        with move_on_after(-1, interrupt=True) as scope:
            _spin(LONG)
        assert scope.expired


# -- a deadline already past at entry: decided by the clock ------------------------


def test_zero_deadline_always_raises_on_the_real_clock() -> None:
    raised = 0
    for _ in range(500):
        try:
            with fail_after(0):
                pass
        except DeadlineExpired:
            raised += 1
    assert raised == 500


def test_zero_deadline_is_expired_inside_the_block() -> None:
    for _ in range(500):
        with move_on_after(0) as scope:
            assert scope.expired
            assert remaining() == 0.0
        assert scope.expired


def test_past_absolute_deadline_on_a_fake_clock(clock: FakeClock) -> None:
    with move_on_at(999.0) as scope:
        assert scope.expired
    with pytest.raises(DeadlineExpired):
        with fail_at(1000.0):
            pass


def test_expired_follows_the_injected_clock_not_the_timer(clock: FakeClock) -> None:
    # The real timer is armed LONG seconds ahead and will not fire meanwhile.
    with move_on_after(LONG) as scope:
        assert not scope.expired
        clock.advance(LONG)
        assert scope.expired
        assert scope.remaining() == 0.0


# -- misnesting ----------------------------------------------------------------------


def test_misnesting_raises_and_leaves_no_stale_deadline(clock: FakeClock) -> None:
    outer = fail_after(100, "outer")
    inner = fail_after(5, "inner")
    outer.__enter__()
    inner.__enter__()
    assert remaining() == 5.0
    with pytest.raises(RuntimeError, match=r"stack corrupted: the fail scope 'outer' was exited"):
        outer.__exit__(None, None, None)
    assert remaining() is None
    # The inner scope was closed with it: disarmed, and its own exit is quiet.
    assert inner._deadline is not None and inner._deadline.cancelled
    clock.advance(10)
    assert inner.__exit__(None, None, None) is False
    assert remaining() is None
    # The stack works normally afterwards.
    with fail_after(3):
        assert remaining() == 3.0
    assert remaining() is None


def test_misnesting_keeps_the_exception_in_flight_as_context(clock: FakeClock) -> None:
    outer = move_on_after(100)
    outer.__enter__()
    move_on_after(5).__enter__()
    err = KeyError("in flight")
    try:
        try:
            raise err
        except KeyError as e:
            outer.__exit__(type(e), e, e.__traceback__)
    except RuntimeError as misnested:
        assert misnested.__context__ is err
    else:  # pragma: no cover
        pytest.fail("misnesting did not raise")


def test_misnesting_three_deep_restores_the_outermost(clock: FakeClock) -> None:
    with fail_after(50):
        middle = fail_after(20)
        middle.__enter__()
        fail_after(10).__enter__()
        fail_after(5).__enter__()
        with pytest.raises(RuntimeError):
            middle.__exit__(None, None, None)
        assert remaining() == 50.0
    assert remaining() is None


def test_exit_in_another_context_is_quiet(clock: FakeClock) -> None:
    def body() -> None:
        scope = fail_after(5)
        scope.__enter__()
        # Exited from a copy of this context (e.g. a generator finalised
        # elsewhere): no error, and that copy is unbounded again. This context
        # still names the scope, but the scope is closed: it bounds nothing
        # here any more (it was left with 0 s for good once its deadline passed).
        after: list[float | None] = []
        contextvars.copy_context().run(
            lambda: (scope.__exit__(None, None, None), after.append(remaining()))
        )
        assert after == [None]
        assert remaining() is None
        clock.advance(10)
        with fail_after(5):
            assert remaining() == 5.0

    contextvars.copy_context().run(body)  # keeps the test's own context clean
    assert remaining() is None


def test_worker_context_stays_bounded_after_the_callers_scope_closes(clock: FakeClock) -> None:
    with fail_after(5):
        worker_context = contextvars.copy_context()
    # The caller has left its scope; work it started in a copy of its context
    # (an abandoned worker, say) is still bounded: at the deadline, 0 s left,
    # never "unbounded".
    assert remaining() is None
    assert worker_context.run(remaining) == 5.0
    clock.advance(6)
    assert worker_context.run(remaining) == 0.0

    def nested() -> float | None:
        with fail_after(100):
            return remaining()

    assert worker_context.run(nested) == 0.0


def test_misnested_scopes_do_not_bound_copied_contexts(clock: FakeClock) -> None:
    outer = fail_after(100)
    outer.__enter__()
    inner = fail_after(5)
    inner.__enter__()
    copied = contextvars.copy_context()
    with pytest.raises(RuntimeError):
        outer.__exit__(None, None, None)
    assert copied.run(remaining) == 100.0  # the abandoned inner scope is gone


# -- repr ------------------------------------------------------------------------------


def test_repr_shows_remaining_time_not_a_clock_value(clock: FakeClock) -> None:
    scope = fail_after(5, "fetch")
    assert repr(scope) == "<taut.DeadlineScope fail label='fetch' timeout=5s not entered>"
    with pytest.raises(DeadlineExpired), scope:
        clock.advance(1.5)
        assert repr(scope) == (
            "<taut.DeadlineScope fail label='fetch' remaining=3.5s timeout=5s active>"
        )
        clock.advance(10)
        assert repr(scope) == (
            "<taut.DeadlineScope fail label='fetch' remaining=0s timeout=5s active expired>"
        )
    assert repr(scope) == "<taut.DeadlineScope fail label='fetch' timeout=5s exited expired>"
    at = move_on_at(clock.now + 2)
    assert repr(at) == "<taut.DeadlineScope move_on label='operation' remaining=2s not entered>"
    assert repr(move_on_at(None)) == (
        "<taut.DeadlineScope move_on label='operation' unbounded not entered>"
    )
    assert "1000" not in repr(at)
    # What the entry keeps, not 309 digits of float max.
    assert repr(fail_at(10**400)) == (
        "<taut.DeadlineScope fail label='operation' remaining=4294967296s not entered>"
    )
