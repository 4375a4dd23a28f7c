"""Bounded runs of sync callables and awaitables.

``run_bounded_sync`` and ``run_bounded_async`` keep the contract of the deadline
layer they replace (completion wins a tie with the deadline, exceptions
propagate unchanged, only the timeout becomes a value, a hung task is abandoned
and the call still returns on time; see docs/CONTRACTS.md) and fix where that
layer fell short:

* the deadline is one entry in taut's Rust timer thread, not a
  ``threading.Timer`` thread per call, so arming it costs well under a
  microsecond and expiry does not wait for the GIL;
* a sync call runs on a pooled worker, not a fresh daemon thread; a late worker
  is abandoned (the pool starts a replacement, so it keeps its capacity, and the
  abandoned thread is counted in ``stats()``) or, on request, interrupted with
  ``DeadlineExpired``;
* an event loop is woken at expiry through a file descriptor that the timer
  thread writes without the GIL (``taut._loop_waker``); if the loop is blocked
  and does not react within a grace period, every thread's stack is logged
  once, and on request ``DeadlineExpired`` is raised inside the blocking code
  so the loop recovers (``taut._blocked_loop``).
"""

from __future__ import annotations

import _thread
import asyncio
import concurrent.futures
import contextvars
import dataclasses
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from taut._blocked_loop import (
    clear_interrupt,
    format_all_stacks,
    install_wake_handler,
    interrupt_thread,
)
from taut._callables import (
    generator_kind,
    is_coroutine_function,
    is_coroutine_value,
    plainly_returns,
)
from taut._checks import check_duration, check_timeout, describe, plain_str
from taut._core import Deadline, monotonic
from taut._future import Future as TautFuture
from taut._loop_waker import waker_for
from taut.deadline import BoundedResult, DeadlineExpired
from taut.deadline._errors import bounded_result
from taut.executor import default_executor
from taut.stats import TautStats, counters, stats

__all__ = ["TautStats", "run_bounded_async", "run_bounded_sync", "stats"]

logger = logging.getLogger("taut.bounded")

T = TypeVar("T")


# ---------------------------------------------------------------------------
# Argument checks. A wrong value is shown with describe(): its own __repr__
# may raise (a plain repr() let that exception out in place of the
# TypeError), or be huge.


def _check_label(label: object) -> str:
    text = plain_str(label)
    if text is None:
        raise TypeError(f"label must be a str, got {describe(label)}")
    return text


def _check_callback(value: object, name: str) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be a callable or None, got {describe(value)}")


def _check_flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {describe(value)}")
    return value


def _run_hook(hook: Callable[[], object], name: str, label: str) -> None:
    """Run a user hook; its exceptions are logged and swallowed (the bounded call
    has already decided its outcome)."""
    try:
        made = hook()
    except Exception:
        logger.exception("%s hook of bounded call %r failed", name, label)
        return
    if inspect.iscoroutine(made):
        made.close()  # never runs here; closed, it warns about nothing
        logger.error(
            "%s hook of bounded call %r returned a coroutine, which never runs: "
            "the hook must do its work when called",
            name,
            label,
        )


# ---------------------------------------------------------------------------
# run_bounded_sync


def _check_sync_arguments(
    fn: object, label: object, on_timeout: object, interrupt: object, executor: object
) -> tuple[str, bool]:
    """``run_bounded_sync``'s arguments, refused with a TypeError naming the
    parameter and the value; ``label`` and ``interrupt`` as kept."""
    text = _check_label(label)
    _check_callback(on_timeout, "on_timeout")
    if on_timeout is not None and is_coroutine_function(on_timeout):
        # Called at expiry it would only make a coroutine, never run it.
        raise TypeError(
            f"on_timeout must be a sync callable or None, got the coroutine function "
            f"{describe(on_timeout)}"
        )
    interrupt = _check_flag(interrupt, "interrupt")
    is_future = isinstance(fn, concurrent.futures.Future)
    if not is_future and not callable(fn):
        raise TypeError(
            f"fn must be a callable or a concurrent.futures.Future, got {describe(fn)}"
        )
    if not is_future and is_coroutine_function(fn):
        # Called here it would only make a coroutine object, never run it.
        raise TypeError(
            f"fn must be a sync callable, got the coroutine function {describe(fn)}; "
            "await taut.run_bounded_async(fn(), timeout) instead"
        )
    kind = "" if is_future else generator_kind(fn)
    if kind:
        # Called here it would only make a generator at once: its body would
        # run as it is iterated, after the call and outside the deadline.
        raise TypeError(
            f"fn must return its result, got {kind} function {describe(fn)}; "
            "collect the items inside it (return list(...))"
        )
    if executor is not None and not isinstance(executor, concurrent.futures.Executor):
        raise TypeError(
            f"executor must be a concurrent.futures.Executor or None, got {describe(executor)}"
        )
    return text, interrupt


def _release_late_worker(
    pool: concurrent.futures.Executor, future: concurrent.futures.Future[Any], interrupt: bool
) -> None:
    """The deadline passed (or the caller was interrupted) while ``future`` is
    queued or running: never start it, or free its worker's slot."""
    if future.cancel():
        return
    if interrupt:
        interrupter = getattr(pool, "interrupt", None)
        if interrupter is not None and interrupter(future, DeadlineExpired):
            counters.add("interrupted_threads")
    # Also abandoned when interrupted: the exception lands only at a bytecode
    # boundary (never inside a blocking C call) and may be swallowed, so the pool
    # must not wait for it to keep its capacity.
    abandon = getattr(pool, "abandon", None)
    if abandon is not None and abandon(future):
        counters.add("abandoned_threads")


def _result(
    started: float, budget: float | None, label: str, *, value: Any = None, timed_out: bool = False
) -> BoundedResult[Any]:
    """The one place a bounded run builds its result (``budget`` None: no deadline)."""
    return bounded_result(timed_out, value, time.monotonic() - started, budget, label)


def run_bounded_sync(
    fn: Callable[[], T] | concurrent.futures.Future[T],
    timeout: Any,
    *,
    label: str = "operation",
    on_timeout: Callable[[], object] | None = None,
    interrupt: bool = False,
    executor: concurrent.futures.Executor | None = None,
) -> BoundedResult[T]:
    """Run ``fn()`` on a worker thread and wait for it at most ``timeout`` seconds.

    ``fn`` runs on a worker of ``executor`` (taut's shared default executor when
    ``None``) in a copy of the caller's ``contextvars`` context. The caller waits
    without polling, and a ``KeyboardInterrupt`` reaches it at once (the worker is
    then released as at a timeout, and the exception propagates).

    * Completion (also at the same moment as the deadline) returns
      ``BoundedResult(timed_out=False, value=...)``; an exception from ``fn``
      propagates unchanged.
    * At expiry the call returns ``timed_out=True`` promptly and runs
      ``on_timeout()`` (its exceptions are logged and swallowed). A call still
      queued never starts. A running one is abandoned: its worker no longer
      counts against the pool's ceiling, a replacement may start, and the thread
      exits when ``fn`` returns. With ``interrupt=True``, ``DeadlineExpired`` is
      also raised inside ``fn`` at its next bytecode boundary (not inside a
      blocking C call). Both need a taut executor: on another executor (the
      standard library's) the running call keeps its worker until it returns.
    * ``timeout=None`` (or ``math.inf``) runs ``fn()`` inline, on the caller's
      thread; ``0`` or less times out at once without running it.
    * ``fn`` may be a ``concurrent.futures.Future`` (for example from
      ``asyncio.run_coroutine_threadsafe``): the wait for it is bounded, and at
      expiry it is cancelled (which a running executor future ignores).
    * A coroutine function (or a callable that returns a coroutine) is refused
      with ``TypeError``: it would never run here; use ``run_bounded_async``.
      So is a generator function (its body would run only as the result is
      iterated, outside the deadline), and a coroutine function as
      ``on_timeout``.
    """
    budget = check_timeout(timeout)
    # The checks below pass by themselves for the common call (a plain
    # function, every keyword left alone): skipping them is a tenth of a
    # fast call's cost.
    if not (
        type(label) is str
        and on_timeout is None
        and interrupt.__class__ is bool
        and executor is None
        and plainly_returns(fn)
    ):
        label, interrupt = _check_sync_arguments(fn, label, on_timeout, interrupt, executor)
    counters.add("bounded_calls")
    started = time.monotonic()
    if budget is None:
        value = fn.result() if isinstance(fn, concurrent.futures.Future) else fn()
        return _result(started, None, label, value=_not_a_coroutine(value))

    pool: concurrent.futures.Executor | None = None
    if isinstance(fn, concurrent.futures.Future):
        future: concurrent.futures.Future[Any] = fn
    elif budget <= 0:
        return _sync_timed_out(started, budget, label, on_timeout)
    else:
        pool = executor if executor is not None else default_executor()
        if getattr(pool, "_propagate_context", False):
            # A taut executor with context propagation copies the context itself.
            future = pool.submit(fn)
        else:
            future = pool.submit(contextvars.copy_context().run, fn)

    if pool is not None and not future.done():
        # A short call on a taut pool finishes within microseconds: wait for its
        # worker to come back without parking, as Future.result() does, and skip
        # arming anything. A deadline that passed meanwhile is armed below
        # already expired, so the outcome is the same.
        core = future._core if type(future) is TautFuture else None  # not any `_core`
        if core is not None:
            core.spin_for_release(budget)
    if future.done():
        # Completion wins a tie with the deadline.
        try:
            value = future.result()
        except BaseException:
            # The exception's traceback holds this frame, and the future holds
            # the exception: that cycle would keep fn's frames (their locals,
            # a request's data) alive until the collector runs. The standard
            # library's `submit(fn).result()` frees them at once.
            del future, fn
            raise
        return _result(started, budget, label, value=_not_a_coroutine(value))

    deadline = Deadline(started + budget)
    # A bare lock as a one-shot latch (a threading.Event costs several times
    # more): held now, released by whichever comes first, completion or expiry.
    latch = _thread.allocate_lock()
    latch.acquire()
    wake = _Release(latch)
    # The Rust timer thread fires the deadline; releasing the latch needs the
    # GIL, so it runs on taut's callback thread and the timer never waits.
    try:
        deadline.call_soon(wake)
        timer_wakes = True
    except RuntimeError:
        # That thread could not start: the interpreter is shutting down
        # (CPython 3.12+ starts no threads then), or threading is patched
        # into greenlets (see taut._greenlet_threads). Wait with a timeout.
        timer_wakes = False
    future.add_done_callback(wake)
    try:
        if timer_wakes:
            # No timeout: a plain lock wait, which signal handlers interrupt,
            # so Ctrl-C lands at once.
            latch.acquire()
        else:
            _acquire_until(latch, deadline.at)
    except BaseException:
        deadline.cancel()
        if pool is None:
            future.cancel()  # as at a timeout: the caller's future is given up on
        else:
            _release_late_worker(pool, future, interrupt)
        raise
    if future.done():
        # Completion wins a tie with the deadline.
        deadline.cancel()
        try:
            value = future.result()
        except BaseException:
            del future, fn, wake  # the cycle through the exception (see above)
            raise
        return _result(started, budget, label, value=_not_a_coroutine(value))
    if pool is None:
        future.cancel()
    else:
        _release_late_worker(pool, future, interrupt)
    return _sync_timed_out(started, budget, label, on_timeout)


def _not_a_coroutine(value: Any) -> Any:
    """A sync call's value, refused if it is a coroutine: the caller would
    get a coroutine that never runs (and a "never awaited" warning later)."""
    if is_coroutine_value(value):
        made = getattr(value, "__qualname__", type(value).__name__)
        value.close()  # it never ran; closed, it warns about nothing
        raise TypeError(
            f"fn returned a coroutine ({made}), which a sync call never "
            "runs; await taut.run_bounded_async(coroutine, timeout) instead"
        )
    return value


def _acquire_until(latch: _thread.LockType, at: float) -> None:
    """Wait for `latch` until `time.monotonic()` reaches `at`, in slices an
    OS wait accepts."""
    while True:
        left = at - time.monotonic()
        if left <= 0 or latch.acquire(timeout=min(left, threading.TIMEOUT_MAX)):
            return


class _Release:
    """Release a latch once, from whichever thread gets there first."""

    __slots__ = ("latch",)

    def __init__(self, latch: _thread.LockType) -> None:
        self.latch = latch

    def __call__(self, _future: object = None) -> None:
        try:
            self.latch.release()
        except RuntimeError:
            pass  # already released by the other side


def _sync_timed_out(
    started: float, budget: float, label: str, on_timeout: Callable[[], object] | None
) -> BoundedResult[Any]:
    counters.add("timeouts")
    result = _result(started, budget, label, timed_out=True)
    if on_timeout is not None:
        _run_hook(on_timeout, "on_timeout", label)
    return result


_detached: set[asyncio.Future[Any]] = set()


async def _run_detached(awaitable: Awaitable[object], label: str) -> None:
    try:
        await awaitable
    except Exception:
        logger.exception("on_abandon hook of bounded call %r failed", label)


def _start_on_abandon(
    loop: asyncio.AbstractEventLoop, hook: Callable[[], object], label: str
) -> None:
    try:
        outcome = hook()
    except Exception:
        logger.exception("on_abandon hook of bounded call %r failed", label)
        return
    if inspect.isawaitable(outcome):
        task = loop.create_task(_run_detached(outcome, label))
        _detached.add(task)
        task.add_done_callback(_detached.discard)


def _raise_if_fatal(task: asyncio.Future[Any]) -> None:
    """Raise the inner task's KeyboardInterrupt or SystemExit, if it ended with one.

    asyncio re-raises those out of the loop at once, and whoever runs the loop
    then usually cancels the caller (asyncio.run does): without this the caller
    saw only that CancelledError. asyncio.TaskGroup hands them on the same way."""
    if task.done() and not task.cancelled():
        exc = task.exception()
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise exc


def _consume_outcome(task: asyncio.Future[Any]) -> None:
    # Reading the exception marks it retrieved, so asyncio never logs
    # "Task exception was never retrieved" for work we walked away from.
    if not task.cancelled():
        task.exception()


@dataclasses.dataclass(eq=False)
class _AsyncCall:
    """The state one run_bounded_async call shares between the loop thread, the
    timer's callback thread and the watchdog."""

    deadline: Deadline
    waiter: asyncio.Future[None]
    label: str
    dump: bool
    interrupt: bool
    grace: float
    started: float
    loop_thread: int = dataclasses.field(default_factory=threading.get_ident)
    handled: bool = False
    injected: bool = False
    watchdog_deadline: Deadline | None = None

    # On the loop thread.
    def on_done(self, _task: object) -> None:
        if not self.waiter.done():
            self.waiter.set_result(None)

    def on_expire(self) -> None:
        self.handled = True
        if self.watchdog_deadline is not None:
            self.watchdog_deadline.cancel()
        if not self.waiter.done():
            self.waiter.set_result(None)

    # On taut's callback thread, at expiry.
    def start_watchdog(self) -> None:
        if self.handled:
            return
        watchdog = Deadline(self.deadline.at + self.grace)
        watchdog.call_soon(self.on_blocked)
        self.watchdog_deadline = watchdog

    # On taut's callback thread, a grace period after expiry.
    def on_blocked(self) -> None:
        if self.handled:
            return
        counters.add("blocked_loop_reports")
        if self.dump:
            logger.warning(
                "bounded call %r: the event loop has not handled its deadline "
                "(%.3gs, expired %.3gs ago): the loop is blocked. Stacks of all threads:\n%s",
                self.label,
                self.deadline.at - self.started,
                monotonic() - self.deadline.at,
                format_all_stacks(self.loop_thread),
            )
        if self.interrupt and not self.handled:
            self.injected = True
            interrupt_thread(self.loop_thread)


def _validate_grace(blocked_grace: object) -> float:
    grace = check_duration(blocked_grace, "blocked_grace", none_ok=False)
    assert grace is not None  # none_ok=False
    return grace


def _check_on_this_loop(awaitable: Awaitable[Any], loop: asyncio.AbstractEventLoop) -> None:
    """Refuse a future of another event loop: its done callbacks (ours among
    them) would run on that loop's thread, and cancelling it at the deadline
    from this one is not thread-safe."""
    if not asyncio.isfuture(awaitable):
        return
    get_loop = getattr(awaitable, "get_loop", None)
    owner = get_loop() if get_loop is not None else getattr(awaitable, "_loop", loop)
    if owner is not loop:
        raise ValueError(
            f"awaitable must belong to the running event loop, got {describe(awaitable)} "
            "of another loop; await it on its own loop (asyncio.run_coroutine_threadsafe "
            "runs a coroutine there)"
        )


async def run_bounded_async(
    awaitable: Awaitable[T],
    timeout: Any,
    *,
    label: str = "operation",
    on_abandon: Callable[[], object] | None = None,
    dump_on_blocked_loop: bool = True,
    interrupt_blocked_loop: bool = False,
    blocked_grace: float = 1.0,
) -> BoundedResult[T]:
    """Await ``awaitable`` for at most ``timeout`` seconds; never hang past it.

    The deadline lives in taut's Rust timer thread, which wakes this loop through
    a file descriptor at expiry, so neither the loop's timers nor the GIL can
    delay it.

    * Completion, also at the same moment as the deadline, returns
      ``BoundedResult(timed_out=False, value=...)``; exceptions propagate unchanged.
    * At expiry the inner task is cancelled and the call returns
      ``timed_out=True`` at once. A task that does not finish when cancelled
      (it shields itself) is abandoned: its outcome is consumed when it ends (so
      nothing is logged as never retrieved), and ``on_abandon()`` runs detached
      (if it returns an awaitable, that runs as its own task); its failures are
      logged and swallowed.
    * Cancelling the caller cancels the inner task and re-raises ``CancelledError``,
      except after the task ended with ``KeyboardInterrupt`` or ``SystemExit``
      (which stop the loop; ``asyncio.run`` then cancels the caller): the caller
      gets that exception, as from ``asyncio.TaskGroup``.
    * ``timeout=None`` just awaits; ``0`` or less times out without running it.
    * A refused argument raises at once, naming the parameter; a coroutine
      refused with it is closed (it never runs, nor warns "never awaited").
      A future of another event loop is refused.
    * If the loop has not handled the expiry ``blocked_grace`` seconds later,
      the loop is blocked (by code that never yields): with
      ``dump_on_blocked_loop`` the stacks of all threads are logged once (logger
      ``taut.bounded``, WARNING); with ``interrupt_blocked_loop``,
      ``DeadlineExpired`` is raised inside the blocking Python code on the loop's
      thread so the loop recovers. It lands at the next bytecode boundary, and
      on the main thread also interrupts a blocking sleep or ``select`` (through
      a no-op ``SIGURG`` handler installed when the program has none); other
      blocking C calls see it only when they return. It may land in whatever
      code the loop is running, which is why it is opt-in.
    """
    try:
        budget = check_timeout(timeout)
        label = _check_label(label)
        _check_callback(on_abandon, "on_abandon")
        dump = _check_flag(dump_on_blocked_loop, "dump_on_blocked_loop")
        interrupt = _check_flag(interrupt_blocked_loop, "interrupt_blocked_loop")
        grace = _validate_grace(blocked_grace)
        if not inspect.isawaitable(awaitable):
            raise TypeError(f"awaitable must be awaitable, got {describe(awaitable)}")
        loop = asyncio.get_running_loop()
        _check_on_this_loop(awaitable, loop)
    except BaseException:
        if inspect.iscoroutine(awaitable):
            # Refused, it never runs: closed, it warns about nothing ("never
            # awaited" at some later garbage collection, far from the cause).
            awaitable.close()
        raise
    counters.add("bounded_calls")
    started = time.monotonic()
    if budget is None:
        try:
            value = await awaitable
        except BaseException:
            del awaitable  # a future holds its exception: the cycle above
            raise
        return _result(started, None, label, value=value)
    if budget <= 0:
        if isinstance(awaitable, asyncio.Future) and awaitable.done():
            return _result(started, budget, label, value=awaitable.result())
        if inspect.iscoroutine(awaitable):
            # Already expired: the coroutine must not run even to its first await.
            awaitable.close()
        else:
            pending = asyncio.ensure_future(awaitable)
            pending.cancel()
            pending.add_done_callback(_consume_outcome)
        counters.add("timeouts")
        return _result(started, budget, label, timed_out=True)

    task: asyncio.Future[T] = asyncio.ensure_future(awaitable)
    if interrupt:
        install_wake_handler()
    deadline = Deadline(started + budget)
    waiter: asyncio.Future[None] = loop.create_future()
    call = _AsyncCall(deadline, waiter, label, dump, interrupt, grace, started)
    task.add_done_callback(call.on_done)
    watch = waker_for(loop).watch(deadline, call.on_expire)
    if dump or interrupt:
        deadline.call_soon(call.start_watchdog)
    try:
        await waiter
    except BaseException:
        # The caller was cancelled (or interrupted): take the inner task with it.
        deadline.cancel()
        call.handled = True
        watch.stop()
        if call.injected:
            clear_interrupt()
        task.remove_done_callback(call.on_done)
        task.cancel()
        task.add_done_callback(_consume_outcome)
        _raise_if_fatal(task)
        raise
    call.handled = True
    watch.stop()
    if call.injected:
        # If the interrupt has not been raised yet (the blocking call ended on
        # its own first), it must not land later in unrelated code.
        clear_interrupt()
    if task.done():
        deadline.cancel()
        if call.injected and not task.cancelled() and isinstance(task.exception(), DeadlineExpired):
            # Our own interrupt ended the blocking code: that is the timeout.
            counters.add("timeouts")
            return _result(started, budget, label, timed_out=True)
        # Completion wins a tie with the deadline.
        try:
            value = task.result()
        except BaseException:
            # The cycle through the exception (see run_bounded_sync): the
            # task, and the awaitable when it is that task, hold it.
            del task, awaitable
            raise
        return _result(started, budget, label, value=value)

    task.remove_done_callback(call.on_done)
    task.cancel()
    counters.add("timeouts")
    try:
        # One loop pass lets a task that honours cancellation finish now.
        await asyncio.sleep(0)
    finally:
        if task.done():
            _consume_outcome(task)
            # It ended with one when cancelled: the caller sees it.
            _raise_if_fatal(task)
        else:
            task.add_done_callback(_consume_outcome)
            counters.add("abandoned_tasks")
            if on_abandon is not None:
                loop.call_soon(_start_on_abandon, loop, on_abandon, label)
    return _result(started, budget, label, timed_out=True)
