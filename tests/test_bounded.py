"""run_bounded_sync / run_bounded_async: every contract of bounded runs
(docs/CONTRACTS.md), with lopsided timings (budgets of 0.05-0.2 s against work of 5-30 s)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import gc
import inspect
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from typing import Any

import pytest

import taut
from taut.bounded import run_bounded_async, run_bounded_sync
from taut.deadline import BoundedResult, DeadlineExpired

pytestmark = pytest.mark.timeout(60)

PROMPT_S = 5.0  # "promptly": far below the 10-30 s of work, far above any scheduling noise


def busy(stop: threading.Event, seconds: float = 30.0) -> None:
    """Pure-Python work (no blocking C call) so an async exception can land."""
    until = time.monotonic() + seconds
    while time.monotonic() < until and not stop.is_set():
        pass


@pytest.fixture
def pool() -> Any:
    executor = taut.ThreadPoolExecutor(max_workers=2, thread_name_prefix="bounded-test")
    yield executor
    executor.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------------------
# run_bounded_sync


def test_sync_returns_the_value() -> None:
    result = run_bounded_sync(lambda: 42, 10, label="answer")
    assert isinstance(result, BoundedResult)
    assert (result.timed_out, result.value, result.label, result.timeout_s) == (
        False,
        42,
        "answer",
        10.0,
    )
    assert result.unwrap() == 42
    assert 0 <= result.elapsed_s < PROMPT_S


def test_sync_exception_propagates_unchanged() -> None:
    error = KeyError("boom")

    def fail() -> None:
        raise error

    with pytest.raises(KeyError) as info:
        run_bounded_sync(fail, 10)
    assert info.value is error


def test_sync_times_out_promptly_and_abandons_the_worker(pool: Any) -> None:
    release = threading.Event()
    calls: list[str] = []
    before = taut.stats()
    started = time.monotonic()
    result = run_bounded_sync(
        lambda: release.wait(30),
        0.1,
        label="slow",
        on_timeout=lambda: calls.append("t"),
        executor=pool,
    )
    try:
        assert time.monotonic() - started < PROMPT_S
        assert result.timed_out is True and result.value is None and result.label == "slow"
        assert calls == ["t"]
        with pytest.raises(DeadlineExpired, match="slow"):
            result.unwrap()
        after = taut.stats()
        assert after.abandoned_threads == before.abandoned_threads + 1
        assert after.timeouts == before.timeouts + 1
        assert pool.stats().abandoned == 1
        # The pool keeps its capacity: both workers are free for new work while
        # the abandoned one still sleeps. The two calls wait for each other, so
        # they finish only if they run at the same time on two workers.
        meet = threading.Barrier(2, timeout=10)
        both = [pool.submit(meet.wait) for _ in range(2)]
        assert sorted(f.result(timeout=30) for f in both) == [0, 1]
        assert run_bounded_sync(lambda: "again", 10, executor=pool).value == "again"
    finally:
        release.set()


def test_sync_interrupt_raises_deadline_expired_in_the_late_worker(pool: Any) -> None:
    seen: list[BaseException] = []
    stop = threading.Event()

    def work() -> None:
        try:
            busy(stop)
        except BaseException as exc:
            seen.append(exc)
            raise

    result = run_bounded_sync(work, 0.1, interrupt=True, executor=pool)
    try:
        assert result.timed_out is True
        until = time.monotonic() + 10
        while not seen and time.monotonic() < until:
            time.sleep(0.01)
        assert seen and isinstance(seen[0], DeadlineExpired)
    finally:
        stop.set()


def test_sync_on_timeout_failure_is_logged_and_swallowed(
    pool: Any, caplog: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()

    def hook() -> None:
        raise RuntimeError("hook broke")

    with caplog.at_level(logging.ERROR, logger="taut.bounded"):
        result = run_bounded_sync(lambda: release.wait(30), 0.05, on_timeout=hook, executor=pool)
    release.set()
    assert result.timed_out is True
    assert any("on_timeout" in r.getMessage() and r.exc_info for r in caplog.records)


def test_sync_none_runs_inline_and_zero_never_runs() -> None:
    result = run_bounded_sync(threading.get_ident, None)
    assert result.value == threading.get_ident() and result.timeout_s is None
    ran: list[int] = []
    result = run_bounded_sync(lambda: ran.append(1), 0)
    assert result.timed_out is True and ran == []
    result = run_bounded_sync(lambda: ran.append(1), -5)
    assert result.timed_out is True and ran == []


def test_sync_huge_timeouts_are_clamped() -> None:
    assert run_bounded_sync(lambda: 1, 10**400).value == 1
    assert run_bounded_sync(lambda: 1, 1e300).value == 1


def test_sync_context_variables_reach_the_worker(pool: Any) -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("caller")
    for executor in (pool, None):
        result = run_bounded_sync(lambda: (var.get(), threading.get_ident()), 10, executor=executor)
        assert result.value[0] == "caller"
        assert result.value[1] != threading.get_ident()


def test_sync_queued_call_never_starts_after_its_deadline() -> None:
    one = taut.ThreadPoolExecutor(max_workers=1)
    release = threading.Event()
    ran: list[int] = []
    try:
        blocker = one.submit(release.wait, 30)
        result = run_bounded_sync(lambda: ran.append(1), 0.05, executor=one)
        assert result.timed_out is True
        release.set()
        blocker.result(timeout=10)
        one.submit(lambda: None).result(timeout=10)
        assert ran == []
    finally:
        release.set()
        one.shutdown(wait=True)


def test_sync_bounds_the_wait_for_a_future() -> None:
    pending: concurrent.futures.Future[int] = concurrent.futures.Future()
    started = time.monotonic()
    result = run_bounded_sync(pending, 0.1)
    assert result.timed_out is True and time.monotonic() - started < PROMPT_S
    assert pending.cancelled()

    done: concurrent.futures.Future[int] = concurrent.futures.Future()
    done.set_result(7)
    # Completion wins a tie with a deadline that has already expired.
    assert run_bounded_sync(done, 0).value == 7
    assert run_bounded_sync(done, 5).value == 7


def test_sync_bounds_run_coroutine_threadsafe() -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        fast = asyncio.run_coroutine_threadsafe(asyncio.sleep(0, result="ok"), loop)
        assert run_bounded_sync(fast, 10).value == "ok"
        slow = asyncio.run_coroutine_threadsafe(asyncio.sleep(30), loop)
        result = run_bounded_sync(slow, 0.1)
        assert result.timed_out is True
        # Cancelling the future cancels the coroutine on its loop.
        with pytest.raises(concurrent.futures.CancelledError):
            slow.result(timeout=10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_sync_no_thread_leaked_after_a_thousand_calls(pool: Any) -> None:
    run_bounded_sync(lambda: None, 10, executor=pool)
    run_bounded_sync(lambda: None, 10)
    baseline = threading.active_count()
    before = taut.stats()
    for i in range(1000):
        assert run_bounded_sync(lambda i=i: i, 10, executor=pool if i % 2 else None).value == i
    after = taut.stats()
    assert after.bounded_calls == before.bounded_calls + 1000
    assert after.timeouts == before.timeouts
    assert after.abandoned_threads == before.abandoned_threads
    # Pools may only have grown to their ceilings; nothing per call.
    assert threading.active_count() <= baseline + 2 + (os.cpu_count() or 1) + 4


def test_sync_keyboard_interrupt_gives_up_a_future_as_a_timeout_does() -> None:
    # The future of a coroutine on another loop (run_coroutine_threadsafe):
    # cancelled at a timeout, and so also when Ctrl-C ends the wait.
    script = textwrap.dedent(
        """
        import concurrent.futures, os
        import taut
        future = concurrent.futures.Future()
        print("ready", flush=True)
        try:
            taut.run_bounded_sync(future, 60)
        except KeyboardInterrupt:
            print("cancelled" if future.cancelled() else "left running", flush=True)
            os._exit(0)
        os._exit(1)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        time.sleep(0.3)  # let it block in the wait
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=20) == 0
        assert child.stdout.read() == b"cancelled\n"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_sync_keyboard_interrupt_lands_at_once() -> None:
    script = textwrap.dedent(
        """
        import os, sys, time
        import taut
        print("ready", flush=True)
        try:
            taut.run_bounded_sync(lambda: time.sleep(30), 60)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            os._exit(0)
        print("not interrupted", flush=True)
        os._exit(1)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        time.sleep(0.3)  # let it block in the wait (a signal earlier still raises)
        started = time.monotonic()
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=20) == 0
        assert time.monotonic() - started < PROMPT_S
        assert child.stdout.read() == b"interrupted\n"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"timeout": True}, TypeError, r"True \(bool\)"),
        ({"timeout": float("nan")}, ValueError, "nan"),
        ({"timeout": "5"}, TypeError, "'5'"),
        ({"label": 5}, TypeError, r"label must be a str, got 5 \(int\)"),
        ({"on_timeout": 3}, TypeError, r"on_timeout must be a callable or None, got 3 \(int\)"),
        ({"interrupt": "yes"}, TypeError, r"interrupt must be a bool, got 'yes' \(str\)"),
        ({"executor": "pool"}, TypeError, r"executor must be a concurrent.futures.Executor"),
    ],
)
def test_sync_argument_errors(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    kwargs.setdefault("timeout", 1)
    with pytest.raises(error, match=match):
        run_bounded_sync(lambda: None, **kwargs)
    with pytest.raises(
        TypeError, match=r"fn must be a callable or a concurrent.futures.Future, got 42"
    ):
        run_bounded_sync(42, 1)  # type: ignore[arg-type]


class _BrokenRepr:
    """A wrong argument whose own ``__repr__`` raises."""

    def __repr__(self) -> str:
        raise RuntimeError("from the argument's __repr__")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"fn": _BrokenRepr()}, r"^fn must be a callable or a concurrent.futures.Future"),
        ({"label": _BrokenRepr()}, r"^label must be a str"),
        ({"on_timeout": _BrokenRepr()}, r"^on_timeout must be a callable or None"),
        ({"executor": _BrokenRepr()}, r"^executor must be a concurrent.futures.Executor"),
    ],
)
def test_sync_argument_errors_survive_a_broken_repr(kwargs: dict[str, Any], match: str) -> None:
    # Before: the argument's own RuntimeError, naming no parameter.
    kwargs.setdefault("fn", lambda: None)
    with pytest.raises(TypeError, match=match + r".*got <unrepresentable> \(_BrokenRepr\)"):
        run_bounded_sync(timeout=1, **kwargs)


class _CompiledCoroutine:
    """What a compiled (Cython) coroutine looks like: a collections.abc
    Coroutine that is not a types.CoroutineType."""

    closed = False

    def send(self, value: object) -> None:
        raise StopIteration

    def throw(self, *args: object) -> None:
        raise StopIteration

    def close(self) -> None:
        self.closed = True

    def __await__(self) -> Any:
        return iter(())


def test_a_compiled_coroutine_returned_by_fn_is_refused_and_closed() -> None:
    made = _CompiledCoroutine()
    with pytest.raises(TypeError, match=r"fn returned a coroutine \(_CompiledCoroutine\)"):
        run_bounded_sync(lambda: made, 5)
    assert made.closed


class _ForeignFuture(concurrent.futures.Future):  # type: ignore[type-arg]
    _core = "not a taut pool"  # an attribute of the same name, nothing more


class _ForeignExecutor(concurrent.futures.Executor):
    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        future = _ForeignFuture()
        threading.Thread(target=lambda: future.set_result(fn(*args, **kwargs))).start()
        return future


def test_a_foreign_future_with_a_core_attribute_is_waited_for_plainly() -> None:
    # Before: its `_core` was taken for taut's pool core (AttributeError
    # after the call was submitted).
    result = run_bounded_sync(lambda: time.sleep(0.01) or 5, 30, executor=_ForeignExecutor())
    assert not result.timed_out and result.value == 5


class _ClaimsToBeStr:
    """Not a str, though its ``__class__`` says so (isinstance() believes it)."""

    __class__ = property(lambda self: str)  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "<claims str>"


def test_a_label_that_only_claims_to_be_a_str_is_refused_by_name() -> None:
    # Before: the fast path took it (result.label was the object itself), and
    # the checked path failed in str.__str__ with a TypeError naming nothing.
    label: Any = _ClaimsToBeStr()
    assert isinstance(label, str)
    with pytest.raises(TypeError, match=r"^label must be a str, got <claims str> \("):
        run_bounded_sync(lambda: None, 1, label=label)
    # A user raising DeadlineExpired with it: kept as given (before: the
    # constructor's str.__str__ raised an unnamed TypeError).
    error = taut.DeadlineExpired(label, 1.0)
    assert error.label is label and str(error) == "deadline expired after 1s: <claims str>"


async def _coroutine_fn() -> int:
    return 5


class _AsyncCall:
    async def __call__(self) -> int:
        return 5


@pytest.mark.parametrize("timeout", [1, None, 0])
@pytest.mark.parametrize(
    "fn",
    [_coroutine_fn, _AsyncCall(), functools.partial(_coroutine_fn)],
    ids=["function", "async-call", "partial"],
)
def test_sync_refuses_a_coroutine_function_pointing_to_the_async_twin(
    fn: Any, timeout: float | None
) -> None:
    # It returned BoundedResult(value=<coroutine object ...>): the body never
    # ran, and all that said so was a "never awaited" warning at exit.
    with pytest.raises(
        TypeError, match=r"fn must be a sync callable.*coroutine function.*run_bounded_async"
    ):
        run_bounded_sync(fn, timeout)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="inspect.markcoroutinefunction is 3.12+")
def test_sync_refuses_a_plain_function_marked_as_a_coroutine_function() -> None:
    # A sync def that returns a coroutine, marked so (as asgiref's wrappers
    # are): the fast check for plain functions must not let it through.
    def returns_a_coroutine() -> Any:
        return _coroutine_fn()

    marked = inspect.markcoroutinefunction(returns_a_coroutine)  # type: ignore[attr-defined,unused-ignore]
    with pytest.raises(TypeError, match=r"fn must be a sync callable.*coroutine function"):
        run_bounded_sync(marked, 1)


@pytest.mark.parametrize("timeout", [1, None])
def test_sync_refuses_a_returned_coroutine_and_closes_it(timeout: float | None) -> None:
    made: list[Any] = []

    def returns_a_coroutine() -> Any:
        made.append(_coroutine_fn())
        return made[-1]

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine ... was never awaited"
        with pytest.raises(TypeError, match=r"fn returned a coroutine.*run_bounded_async"):
            run_bounded_sync(returns_a_coroutine, timeout)
        assert made[0].cr_frame is None  # closed: never awaited, no warning
        gc.collect()


def _generator_fn() -> Any:
    yield 1


async def _async_generator_fn() -> Any:
    yield 1


class _GeneratorCall:
    def __call__(self) -> Any:
        yield 1

    def items(self) -> Any:
        yield 1


@pytest.mark.parametrize("timeout", [1, None, 0])
@pytest.mark.parametrize(
    ("fn", "kind"),
    [
        (_generator_fn, "a generator"),
        (_async_generator_fn, "an async generator"),
        (_GeneratorCall(), "a generator"),
        (functools.partial(_generator_fn), "a generator"),
        (_GeneratorCall().items, "a generator"),
    ],
    ids=["generator", "async-generator", "generator-call", "partial", "bound-method"],
)
def test_sync_refuses_a_generator_function(fn: Any, kind: str, timeout: float | None) -> None:
    # It returned BoundedResult(value=<generator object ...>) at once: the
    # body ran later, outside the deadline, or never.
    with pytest.raises(TypeError, match=rf"^fn must return its result, got {kind} function "):
        run_bounded_sync(fn, timeout)


@pytest.mark.parametrize("cls", [_GeneratorCall, _AsyncCall])
def test_sync_takes_a_class_whose_instances_make_generators_or_coroutines(cls: type) -> None:
    # Calling the class makes an instance, whatever the instances' __call__
    # makes: the instance is the value, as from any plain function.
    result = run_bounded_sync(cls, 5)
    assert isinstance(result.value, cls)
    assert run_bounded_sync(lambda: None, 5, on_timeout=cls).value is None


@pytest.mark.parametrize("timeout", [1, None, 0])
@pytest.mark.parametrize("hook", [_coroutine_fn, _AsyncCall(), functools.partial(_coroutine_fn)])
def test_sync_refuses_a_coroutine_function_as_on_timeout(hook: Any, timeout: float | None) -> None:
    # Called at expiry it only made a coroutine: the hook never ran, and all
    # that said so was a "coroutine ... was never awaited" warning.
    ran: list[int] = []
    with pytest.raises(TypeError, match=r"^on_timeout must be a sync callable or None, got "):
        run_bounded_sync(lambda: ran.append(1), timeout, on_timeout=hook)
    assert ran == []


def test_sync_closes_a_coroutine_returned_by_on_timeout(caplog: pytest.LogCaptureFixture) -> None:
    made: list[Any] = []

    def hook() -> Any:
        made.append(_coroutine_fn())
        return made[-1]

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine ... was never awaited"
        result = run_bounded_sync(lambda: None, 0, on_timeout=hook)
        assert result.timed_out and made[0].cr_frame is None
        gc.collect()
    assert "on_timeout hook of bounded call 'operation' returned a coroutine" in caplog.text


# ---------------------------------------------------------------------------
# run_bounded_async


def test_async_returns_the_value_and_propagates_exceptions() -> None:
    error = ValueError("inner")

    async def ok() -> str:
        await asyncio.sleep(0)
        return "done"

    async def fail() -> None:
        raise error

    async def main() -> None:
        result = await run_bounded_async(ok(), 10, label="ok")
        assert (result.timed_out, result.value, result.label) == (False, "done", "ok")
        with pytest.raises(ValueError) as info:
            await run_bounded_async(fail(), 10)
        assert info.value is error
        assert (await run_bounded_async(ok(), None)).value == "done"
        # Futures and tasks are awaitables too.
        task = asyncio.ensure_future(ok())
        assert (await run_bounded_async(task, 10)).value == "done"

    asyncio.run(main())


def test_async_times_out_and_cancels_the_task() -> None:
    cancelled = threading.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def main() -> BoundedResult:
        return await run_bounded_async(slow(), 0.1, label="slow")

    started = time.monotonic()
    result = asyncio.run(main())
    assert time.monotonic() - started < PROMPT_S
    assert result.timed_out is True and result.label == "slow"
    assert cancelled.is_set()


def test_async_zero_timeout_never_starts_the_coroutine() -> None:
    ran: list[int] = []

    async def work() -> None:
        ran.append(1)

    async def main() -> BoundedResult:
        return await run_bounded_async(work(), 0)

    assert asyncio.run(main()).timed_out is True
    assert ran == []


def test_async_completion_wins_a_tie() -> None:
    async def main() -> BoundedResult:
        done = asyncio.get_running_loop().create_future()
        done.set_result("first")
        return await run_bounded_async(done, 0)

    assert asyncio.run(main()).value == "first"


def test_async_shielded_task_is_abandoned_on_time_and_its_outcome_consumed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    finished = threading.Event()
    abandoned: list[str] = []
    loop_errors: list[dict[str, Any]] = []

    async def stubborn() -> None:
        # Ignores the cancellation, then fails later: nobody awaits it any more.
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            pass
        await asyncio.sleep(0.3)
        finished.set()
        raise RuntimeError("late failure")

    async def on_abandon_async() -> None:
        abandoned.append("async")
        raise RuntimeError("on_abandon broke")  # logged and swallowed

    async def main() -> BoundedResult:
        asyncio.get_running_loop().set_exception_handler(lambda _l, ctx: loop_errors.append(ctx))
        before = taut.stats()
        started = time.monotonic()
        result = await run_bounded_async(stubborn(), 0.1, on_abandon=on_abandon_async)
        assert time.monotonic() - started < PROMPT_S
        assert taut.stats().abandoned_tasks == before.abandoned_tasks + 1
        while not finished.is_set():
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.05)
        gc.collect()
        return result

    with caplog.at_level(logging.ERROR, logger="taut.bounded"):
        result = asyncio.run(main())
    gc.collect()
    assert result.timed_out is True
    assert abandoned == ["async"]
    assert loop_errors == []
    assert any("on_abandon" in r.getMessage() for r in caplog.records)


def test_async_caller_cancellation_cancels_the_inner_task() -> None:
    seen: list[str] = []

    async def inner() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("inner cancelled")
            raise

    async def main() -> None:
        outer = asyncio.ensure_future(run_bounded_async(inner(), 20))
        await asyncio.sleep(0.05)
        outer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outer
        await asyncio.sleep(0.05)

    asyncio.run(main())
    assert seen == ["inner cancelled"]


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("when", ["at once", "after a yield", "when cancelled at expiry"])
def test_async_keyboard_interrupt_and_system_exit_reach_the_caller(
    exc_type: type[BaseException], when: str
) -> None:
    # An inner task raising one of these stops the loop (asyncio re-raises
    # them out of run_until_complete); asyncio.run then cancels the caller.
    # The caller must see the task's exception, as with asyncio.TaskGroup
    # (and a directly awaited coroutine), not a bare CancelledError.
    seen: list[BaseException] = []

    async def inner() -> None:
        if when == "after a yield":
            await asyncio.sleep(0)
        elif when == "when cancelled at expiry":
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                pass
        raise exc_type("from the task")

    callers: list[asyncio.Task[None] | None] = []

    async def main() -> None:
        callers.append(asyncio.current_task())
        try:
            await run_bounded_async(inner(), 0.05 if when == "when cancelled at expiry" else 20)
        except BaseException as exc:
            seen.append(exc)
            raise

    with pytest.raises(exc_type, match="from the task"):
        asyncio.run(main())
    assert len(seen) == 1 and type(seen[0]) is exc_type, seen
    assert str(seen[0]) == "from the task"
    # The caller's task ended with it too (read here: asyncio.run stopped
    # before reading it, and it would be logged as never retrieved).
    assert callers[0] is not None and callers[0].exception() is seen[0]


def test_async_context_is_copied_into_the_task() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    async def read() -> str:
        return var.get()

    async def main() -> str:
        var.set("caller")
        return (await run_bounded_async(read(), 10)).value  # type: ignore[no-any-return]

    assert asyncio.run(main()) == "caller"


def test_async_blocked_loop_is_dumped_and_interrupted(caplog: pytest.LogCaptureFixture) -> None:
    # time.sleep blocks the loop: its own timers cannot fire, but the deadline
    # lives in the Rust timer thread. After the grace period every thread's
    # stack is logged, and DeadlineExpired is raised into the sleep so the loop
    # recovers and the call returns timed out.
    async def blocks() -> str:
        time.sleep(10)
        return "slept"

    async def main() -> BoundedResult:
        return await run_bounded_async(
            blocks(), 0.1, label="blocker", interrupt_blocked_loop=True, blocked_grace=0.1
        )

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="taut.bounded"):
        result = asyncio.run(main())
    assert time.monotonic() - started < PROMPT_S
    assert result.timed_out is True
    dumps = [r for r in caplog.records if "Stacks of all threads" in r.getMessage()]
    assert len(dumps) == 1
    assert "time.sleep(10)" in dumps[0].getMessage()
    assert "blocker" in dumps[0].getMessage()


def test_async_blocked_loop_dump_without_interrupt(caplog: pytest.LogCaptureFixture) -> None:
    # Without the interrupt the loop stays blocked until the blocking code
    # ends; the dump has been logged meanwhile, and the call then times out.
    async def blocks_then_waits() -> None:
        time.sleep(1.5)
        await asyncio.sleep(30)

    async def main() -> BoundedResult:
        return await run_bounded_async(blocks_then_waits(), 0.1, blocked_grace=0.1)

    with caplog.at_level(logging.WARNING, logger="taut.bounded"):
        result = asyncio.run(main())
    assert result.timed_out is True
    dumps = [r for r in caplog.records if "Stacks of all threads" in r.getMessage()]
    assert len(dumps) == 1
    assert "time.sleep(1.5)" in dumps[0].getMessage()


def test_async_no_dump_when_disabled(caplog: pytest.LogCaptureFixture) -> None:
    async def blocks_then_waits() -> None:
        time.sleep(0.5)
        await asyncio.sleep(30)

    async def main() -> BoundedResult:
        return await run_bounded_async(
            blocks_then_waits(), 0.05, blocked_grace=0.05, dump_on_blocked_loop=False
        )

    with caplog.at_level(logging.WARNING, logger="taut.bounded"):
        assert asyncio.run(main()).timed_out is True
    assert not [r for r in caplog.records if "Stacks of all threads" in r.getMessage()]


def test_async_loop_in_a_thread_and_many_calls() -> None:
    async def quick(i: int) -> int:
        await asyncio.sleep(0)
        return i

    async def main() -> list[int]:
        results = await asyncio.gather(*(run_bounded_async(quick(i), 10) for i in range(200)))
        return [r.value for r in results]

    out: list[list[int]] = []
    thread = threading.Thread(target=lambda: out.append(asyncio.run(main())))
    thread.start()
    thread.join(30)
    assert out == [list(range(200))]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"timeout": True}, TypeError, r"True \(bool\)"),
        ({"label": None}, TypeError, r"label must be a str, got None \(NoneType\)"),
        ({"on_abandon": "x"}, TypeError, r"on_abandon must be a callable or None"),
        (
            {"dump_on_blocked_loop": 1},
            TypeError,
            r"dump_on_blocked_loop must be a bool, got 1 \(int\)",
        ),
        ({"interrupt_blocked_loop": None}, TypeError, "interrupt_blocked_loop must be a bool"),
        (
            {"blocked_grace": -1},
            ValueError,
            r"blocked_grace must not be negative, got -1 \(int\)",
        ),
        (
            {"blocked_grace": "1"},
            TypeError,
            r"blocked_grace must be a finite non-negative number.*'1' \(str\)",
        ),
    ],
)
def test_async_argument_errors(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    kwargs.setdefault("timeout", 1)

    async def main() -> None:
        coro = asyncio.sleep(0)
        try:
            with pytest.raises(error, match=match):
                await run_bounded_async(coro, **kwargs)
        finally:
            coro.close()
        with pytest.raises(TypeError, match="awaitable must be awaitable, got 42"):
            await run_bounded_async(42, 1)  # type: ignore[arg-type]

    asyncio.run(main())


def test_async_closes_a_coroutine_it_refuses() -> None:
    # Refused for a bad argument, the coroutine never runs: left open, it
    # warned "never awaited" at some later collection, far from the cause.
    async def main() -> None:
        coro = asyncio.sleep(0)
        with pytest.raises(TypeError, match="timeout"):
            await run_bounded_async(coro, "soon")
        assert coro.cr_frame is None  # closed

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        asyncio.run(main())


@pytest.mark.parametrize("timeout", [None, 0, 5])
def test_async_refuses_a_future_of_another_loop(timeout: float | None) -> None:
    # Its done callbacks (ours among them) would run on the other loop's
    # thread, and cancelling it at the deadline from here is not thread-safe.
    other = asyncio.new_event_loop()
    try:
        foreign = other.create_future()

        async def main() -> None:
            with pytest.raises(ValueError, match="awaitable must belong to the running event loop"):
                await run_bounded_async(foreign, timeout)

        asyncio.run(main())
        assert not foreign.cancelled()  # untouched
        assert not foreign._callbacks  # nothing of ours on the other loop
    finally:
        other.close()


def test_stats_snapshot() -> None:
    snapshot = taut.stats()
    assert isinstance(snapshot, taut.TautStats)
    assert isinstance(snapshot.executor, taut.PoolStats)
    run_bounded_sync(lambda: None, 1)
    assert taut.stats().bounded_calls == snapshot.bounded_calls + 1
