"""Deadlines for Python code: ``DeadlineExpired``, ``BoundedResult``, the
timeout gate ``clamp_timeout`` and the deadline scopes ``fail_after``,
``move_on_after``, ``fail_at`` and ``move_on_at``.

Every scope arms one ``taut._core.Deadline`` on the process's Rust timer
thread, so expiry is noticed on time without the GIL and without an event
loop:

- ``with`` scopes: ``scope.expired`` is a cheap flag for cooperative code.
  ``fail_*`` scopes raise ``DeadlineExpired`` on exit if the deadline passed.
  With ``interrupt=True`` the deadline also interrupts the block:

  * on the main thread (POSIX), the timer's callback thread sends ``SIGURG``
    to it, so a blocking call (``time.sleep``, ``socket.recv``, ``select``,
    ``subprocess.wait``, ``lock.acquire``) returns with EINTR and taut's
    handler raises ``DeadlineExpired`` there; pure-Python code is interrupted
    the same way. A ``SIGURG`` handler the user had is kept, receives the
    ``SIGURG`` taut did not send, and is put back when the last such scope
    closes (see ``taut._signal_interrupt``);
  * on other threads, and where ``signal.pthread_kill`` is missing (Windows)
    or a ``SIGURG`` handler was installed from C, the timer has
    ``DeadlineExpired`` raised at the block's next bytecode boundary: pure
    Python code only; a blocking C call finishes first.

  Either way a bare ``except:`` in the block can swallow the interrupt (the
  exit still raises for ``fail_*`` scopes).
- Inside a running asyncio task, ``async with`` and a plain ``with`` (anyio's
  form) behave alike: at expiry the timer thread wakes the running loop
  through ``taut._loop_waker`` (no GIL needed to wake it), and the loop cancels
  the task as ``asyncio.timeout`` does; ``fail_*`` scopes turn that
  cancellation into ``DeadlineExpired`` (a foreign exception raised while the
  cancellation unwinds gets the ``DeadlineExpired``, caused by the
  ``CancelledError``, in its ``__context__`` chain, as with
  ``asyncio.timeout`` on CPython 3.12+). This fires even when asyncio's own
  timers are starved; a loop blocked by synchronous code is
  ``run_bounded_async``'s concern. A plain ``with`` with ``interrupt=True``
  is for synchronous code and keeps the thread interrupt even in a task
  (which is then not cancelled): it can rescue a loop blocked by that code.

A deadline already past at entry is expired at once: ``expired``, the exit
decision and the first ``await`` of a task all compare the clock with the
deadline rather than wait for the timer thread.

Scopes nest: each links to the scope it was entered in, kept in a
``contextvars.ContextVar``, so ``remaining()`` (the earliest deadline of all
enclosing scopes) works in nested code and in worker threads that run in a
copy of the caller's context; such a worker stays bounded by the caller's
deadline even after the caller's scope has closed (``remaining()`` says 0
once it passed, never "unbounded"). Exiting a scope while a scope entered
inside it is still open raises ``RuntimeError`` (as trio does) and closes the
inner one, which then bounds nothing any more.

Testing without waiting: scopes read time through a module-level clock,
``time.monotonic`` by default. ``set_clock(fake)`` swaps it (and returns the
previous clock); a scope created under a fake clock computes its deadline,
``remaining()``, ``expired`` and its exit decision from that clock, and still
arms the real timer the same number of seconds ahead.
"""

from __future__ import annotations

import asyncio
import builtins
import contextvars
import dataclasses
import sys
import threading
import time
from types import TracebackType
from typing import Any, Callable, Generic, TypeVar, cast

from taut import _core, _signal_interrupt
from taut._core import MAX_TIMEOUT, clamp_timeout
from taut._loop_waker import Watch, waker_for

__all__ = [
    "MAX_TIMEOUT",
    "BoundedResult",
    "DeadlineExpired",
    "DeadlineScope",
    "clamp_timeout",
    "fail_after",
    "fail_at",
    "move_on_after",
    "move_on_at",
    "remaining",
    "set_clock",
]

T = TypeVar("T")

_clock: Callable[[], float] = time.monotonic


def set_clock(clock: Callable[[], float] | None) -> Callable[[], float]:
    """Make deadline scopes read time from ``clock`` (``None`` restores
    ``time.monotonic``). Returns the clock that was in use. For tests."""
    global _clock
    previous = _clock
    _clock = time.monotonic if clock is None else clock
    return previous


def _format_seconds(seconds: float) -> str:
    if seconds >= 1000:
        return f"{seconds:.0f}"
    return f"{seconds:.3g}"


class DeadlineExpired(TimeoutError):
    """A taut deadline expired: ``label`` names the bounded operation,
    ``timeout_s`` the budget and ``elapsed_s`` the time it had run.

    A ``TimeoutError`` subclass, but a distinct type: a provider's or a
    network library's ``TimeoutError`` is never a ``DeadlineExpired``."""

    label: str
    timeout_s: float | None
    elapsed_s: float | None

    def __init__(
        self,
        label: str = "operation",
        timeout_s: float | None = None,
        elapsed_s: float | None = None,
    ) -> None:
        self.label = label
        self.timeout_s = timeout_s
        self.elapsed_s = elapsed_s
        if timeout_s is None:
            message = f"deadline expired: {label}"
        else:
            message = f"deadline expired after {_format_seconds(timeout_s)}s: {label}"
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.label, self.timeout_s, self.elapsed_s))


class _ScopeInterrupt(DeadlineExpired):
    """What the timer raises asynchronously in an ``interrupt=True`` block;
    the scope replaces it with a full ``DeadlineExpired`` (or swallows it)."""


@dataclasses.dataclass(frozen=True, init=False)
class BoundedResult(Generic[T]):
    """The outcome of a bounded run: the value, or ``timed_out=True``.

    Keyword-only. ``unwrap()`` returns the value or raises
    ``DeadlineExpired``."""

    timed_out: bool
    value: T | None
    elapsed_s: float
    timeout_s: float | None
    label: str

    def __init__(
        self,
        *,
        timed_out: bool,
        value: T | None = None,
        elapsed_s: float,
        timeout_s: float | None,
        label: str = "operation",
    ) -> None:
        # Written out (rather than kw_only=True) because Python 3.9 lacks it.
        object.__setattr__(self, "timed_out", timed_out)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "elapsed_s", elapsed_s)
        object.__setattr__(self, "timeout_s", timeout_s)
        object.__setattr__(self, "label", label)

    def unwrap(self) -> T:
        """The value; ``DeadlineExpired`` if the run timed out."""
        if self.timed_out:
            raise DeadlineExpired(self.label, self.timeout_s, self.elapsed_s)
        return cast(T, self.value)


# The innermost scope entered in the current context (None outside any scope).
# Each scope links to the one it was entered in. A context copied into a
# worker thread keeps the chain, so the worker stays bounded by the caller's
# deadline even after the caller's scope has closed (remaining() then says 0,
# not "unbounded"). Scopes abandoned by misnesting are skipped everywhere.
_innermost: contextvars.ContextVar[DeadlineScope | None] = contextvars.ContextVar(
    "taut_innermost_scope", default=None
)


def _bounding_scope() -> DeadlineScope | None:
    """The innermost scope whose deadline bounds this context."""
    scope = _innermost.get()
    while scope is not None and scope._abandoned:
        scope = scope._parent
    return scope


def _open_scope() -> DeadlineScope | None:
    """The innermost scope of this context that is still open."""
    scope = _innermost.get()
    while scope is not None and scope._closed:
        scope = scope._parent
    return scope


def remaining() -> float | None:
    """Seconds left before the earliest deadline of the enclosing scopes
    (never negative), or ``None`` outside any bounded scope."""
    at = current_deadline()
    if at is None:
        return None
    return max(0.0, at - _clock())


def current_deadline() -> float | None:
    """The effective absolute deadline of this context (clock seconds)."""
    scope = _bounding_scope()
    return None if scope is None else scope._effective


def _absolute(value: object, name: str) -> float | None:
    """Validate an absolute deadline like a timeout (same types, same errors)."""
    if clamp_timeout(value, name=name) is None:
        return None
    try:
        return float(cast(Any, value))
    except OverflowError:
        # Beyond the float range: only the sign matters (entry clamps it).
        return 1e300 if value > 0 else -1e300  # type: ignore[operator]


def _running_task() -> tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]] | None:
    """The running loop and task of this thread, if code runs inside a task."""
    loop = asyncio._get_running_loop()
    if loop is None:
        return None
    task = asyncio.current_task(loop)
    return None if task is None else (loop, task)


def _insert_expiry(exc: BaseException, error: DeadlineExpired) -> None:
    """Put ``error`` (caused by the CancelledError) between ``exc`` and the
    first CancelledError of its ``__context__`` chain, as ``asyncio.timeout``
    does on CPython 3.12+, so a traceback says the cancellation was a timeout."""
    seen: set[int] = set()
    while exc.__context__ is not None and id(exc) not in seen:
        seen.add(id(exc))
        context = exc.__context__
        if isinstance(context, asyncio.CancelledError):
            error.__cause__ = context
            error.__context__ = context
            exc.__context__ = error
            return
        exc = context


# BaseExceptionGroup on Python 3.11+.
_EXCEPTION_GROUP: type[BaseException] | None = getattr(builtins, "BaseExceptionGroup", None)

_MISNESTING_ADVICE = (
    "scopes must be exited in the reverse order of entry (an async generator or a "
    "task that outlives a `with` block are common causes)"
)


class DeadlineScope:
    """A deadline over a ``with`` or ``async with`` block. Made by
    ``fail_after``/``move_on_after``/``fail_at``/``move_on_at``; enter once.

    Inside a running asyncio task, ``with`` and ``async with`` behave alike:
    at expiry the task is cancelled (the cancellation becomes
    ``DeadlineExpired`` for ``fail_*`` scopes and is swallowed by
    ``move_on_*`` scopes). Elsewhere, and with ``interrupt=True`` (synchronous
    code in the block), ``with`` raises on exit and, with ``interrupt=True``,
    also inside the block."""

    __slots__ = (
        "__weakref__",
        "_abandoned",
        "_absolute",
        "_at",
        "_cancel_requested",
        "_cancelling",
        "_clock",
        "_closed",
        "_deadline",
        "_effective",
        "_entered",
        "_expired",
        "_handle",
        "_interrupt",
        "_interrupt_raised",
        "_parent",
        "_raise",
        "_real",
        "_relative",
        "_signal_armed",
        "_start",
        "_task",
        "_waker",
        "label",
    )

    def __init__(
        self,
        *,
        relative: float | None,
        absolute: float | None,
        raise_on_expiry: bool,
        label: str,
        interrupt: bool,
    ) -> None:
        self._relative = relative
        self._absolute = absolute
        self._raise = raise_on_expiry
        self.label = label
        self._interrupt = interrupt
        self._clock = _clock
        self._real = _clock is time.monotonic
        self._at: float | None = None
        self._effective: float | None = None
        self._start = 0.0
        self._deadline: _core.Deadline | None = None
        self._parent: DeadlineScope | None = None
        self._entered = False
        self._closed = False
        self._abandoned = False
        self._expired: bool | None = None
        self._task: asyncio.Task[Any] | None = None
        self._waker: Watch | None = None
        self._handle: asyncio.Handle | None = None
        self._cancel_requested = False
        self._cancelling = 0
        self._signal_armed = False
        self._interrupt_raised = False

    # -- inspection ---------------------------------------------------------

    @property
    def deadline(self) -> float | None:
        """The absolute deadline (clock seconds), known once entered."""
        return self._at

    @property
    def expired(self) -> bool:
        """True once this scope's own deadline has passed: the timer fired or
        the clock reads at or past the deadline (so a deadline already past
        at entry is expired at once, whatever the timer's latency)."""
        if self._expired is not None:
            return self._expired
        return self._past()

    def _past(self) -> bool:
        at = self._at
        if at is None or self._deadline is None:
            return False
        return self._deadline.expired or self._clock() >= at

    @property
    def timeout_s(self) -> float | None:
        """The budget in seconds, from entry to the deadline."""
        return None if self._at is None else max(0.0, self._at - self._start)

    def remaining(self) -> float | None:
        """Seconds left on this scope's own deadline (None if unbounded)."""
        if self._at is None:
            return None
        if self._real and self._deadline is not None and self._deadline.expired:
            return 0.0
        return max(0.0, self._at - self._clock())

    def _error(self) -> DeadlineExpired:
        return DeadlineExpired(self.label, self.timeout_s, self._clock() - self._start)

    # -- what the main-thread signal interrupt asks (_signal_interrupt) ---------

    def _interrupt_due(self) -> bool:
        return not self._closed and not self._interrupt_raised and self._past()

    def _interrupt_error(self) -> BaseException:
        self._interrupt_raised = True
        return _ScopeInterrupt(self.label, self.timeout_s)

    # -- shared entry/exit ----------------------------------------------------

    def _enter(self) -> None:
        if self._entered:
            raise RuntimeError("a deadline scope can be entered only once")
        self._entered = True
        now = self._clock()
        self._start = now
        if self._relative is not None:
            at: float | None = now + self._relative
        elif self._absolute is not None:
            delay = clamp_timeout(self._absolute - now, name="deadline")
            at = None if delay is None else now + delay
        else:
            at = None
        self._at = at
        parent = _bounding_scope()
        self._parent = parent
        outer = None if parent is None else parent._effective
        self._effective = at if outer is None else outer if at is None else min(at, outer)
        if at is not None:
            real_at = at if self._real else _core.monotonic() + (at - now)
            self._deadline = _core.Deadline(real_at)
        _innermost.set(self)

    def _disarm(self) -> None:
        """Stop everything this scope armed: timer, loop watch, interrupt."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._waker is not None:
            self._waker.stop()
            self._waker = None
        if self._signal_armed:
            self._signal_armed = False
            _signal_interrupt.disarm(self)

    def _leave(self) -> bool:
        """Disarm, restore the context; True if this scope's deadline expired.
        Raises RuntimeError (after closing) if an inner scope is still open."""
        if self._closed:
            # Abandoned when an outer scope was exited first; that exit raised.
            return bool(self._expired)
        innermost = _open_scope()
        expired = self._close()
        if innermost is self:
            _innermost.set(self._parent)
            return expired
        inner = innermost
        while inner is not None and inner is not self:
            inner = inner._parent
        if inner is None:
            # Exited in another context than the one it was entered in: that
            # context cannot be changed from here (and a copy of it in a
            # worker thread should stay bounded anyway).
            return expired
        # Misnesting: close the inner scopes still open, as trio does.
        assert innermost is not None
        error = RuntimeError(
            f"deadline scope stack corrupted: {self._describe()} was exited while "
            f"{innermost._describe()}, entered inside it, was still open (now closed); "
            f"{_MISNESTING_ADVICE}"
        )
        scope: DeadlineScope | None = innermost
        while scope is not None and scope is not self:
            scope._close()
            scope._abandoned = True
            scope = scope._parent
        _innermost.set(self._parent)
        raise error

    def _close(self) -> bool:
        """Disarm everything; True if the deadline expired."""
        d = self._deadline
        # cancel() first: after it returns no asynchronous interrupt of ours
        # can be set any more.
        fired = d is not None and not d.cancel()
        expired = fired or (self._at is not None and self._clock() >= self._at)
        self._expired = expired
        self._closed = True
        self._disarm()
        return expired

    # -- with ---------------------------------------------------------------

    def __enter__(self) -> DeadlineScope:
        # interrupt=True says the block is synchronous code (the gather runs a
        # sync call inline this way, even on an event loop's thread): it is
        # interrupted on its thread, and the task is not cancelled.
        running = None if self._interrupt else _running_task()
        self._enter()
        if running is not None:
            self._attach(*running)
        elif self._interrupt and self._deadline is not None:
            if _signal_interrupt.available():
                self._signal_armed = True
                _signal_interrupt.arm(self, self._deadline)
            else:
                self._deadline.interrupt_thread(threading.get_ident(), _ScopeInterrupt)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if self._abandoned:
            return False
        if self._task is not None:
            return self._exit_task(exc_type, exc)
        expired = self._leave()
        if not expired:
            return False
        if exc_type is not None and issubclass(exc_type, _ScopeInterrupt):
            if not self._raise:
                return True
            raise self._error() from None
        if exc_type is None and self._raise:
            raise self._error()
        # Any other exception propagates unchanged.
        return False

    # -- async with, and with inside a task ---------------------------------------

    async def __aenter__(self) -> DeadlineScope:
        if self._interrupt:
            raise ValueError(
                "interrupt=True is for `with` blocks; `async with` cancels the task instead"
            )
        running = _running_task()
        if running is None:
            raise RuntimeError("`async with` a deadline scope must run inside an asyncio task")
        self._enter()
        self._attach(*running)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if self._abandoned:
            return False
        return self._exit_task(exc_type, exc)

    def _attach(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        self._task = task
        if sys.version_info >= (3, 11):
            self._cancelling = task.cancelling()
        if self._deadline is None:
            return
        if self._past():
            # Already expired: cancel before the task's next step, as
            # asyncio.timeout does, not whenever the timer's wake-up arrives.
            self._handle = loop.call_soon(self._fire)
        else:
            self._waker = waker_for(loop).watch(self._deadline, self._fire)

    def _exit_task(self, exc_type: type[BaseException] | None, exc: BaseException | None) -> bool:
        misnested: RuntimeError | None = None
        try:
            expired = self._leave()
        except RuntimeError as e:
            misnested, expired = e, bool(self._expired)
        ours = self._cancel_requested
        if ours and sys.version_info >= (3, 11):
            task = self._task
            assert task is not None
            if task.uncancel() > self._cancelling:
                # Someone else cancelled the task too: theirs wins.
                ours = False
        if misnested is not None:
            raise misnested
        if ours and exc_type is not None:
            if issubclass(exc_type, asyncio.CancelledError):
                if not self._raise:
                    return True
                raise self._error() from exc
            if exc is not None and not isinstance(exc, DeadlineExpired):
                # A foreign exception raised while the cancellation unwound.
                _insert_expiry(exc, self._error())
                if _EXCEPTION_GROUP is not None and isinstance(exc, _EXCEPTION_GROUP):
                    for inner in cast(Any, exc).exceptions:
                        _insert_expiry(inner, self._error())
            return False
        if expired and self._raise and exc_type is None:
            raise self._error()
        return False

    def _fire(self) -> None:
        """On the loop's thread: this scope's deadline has expired."""
        self._handle = None
        task = self._task
        if task is None or self._closed or self._cancel_requested or task.done():
            return
        self._cancel_requested = True
        task.cancel()

    def _describe(self) -> str:
        kind = "fail" if self._raise else "move_on"
        return f"the {kind} scope {self.label!r}"

    def __repr__(self) -> str:
        kind = "fail" if self._raise else "move_on"
        parts = [f"<taut.DeadlineScope {kind} label={self.label!r}"]
        if not self._entered:
            if self._relative is not None:
                parts.append(f"timeout={_format_seconds(self._relative)}s")
            elif self._absolute is not None:
                left = max(0.0, self._absolute - self._clock())
                parts.append(f"remaining={_format_seconds(left)}s")
            else:
                parts.append("unbounded")
            parts.append("not entered")
        elif self._at is None:
            parts.append("unbounded exited" if self._closed else "unbounded active")
        elif self._closed:
            parts.append(f"timeout={_format_seconds(self.timeout_s or 0.0)}s")
            parts.append("exited expired" if self._expired else "exited in time")
        else:
            left = self.remaining() or 0.0
            parts.append(f"remaining={_format_seconds(left)}s")
            parts.append(f"timeout={_format_seconds(self.timeout_s or 0.0)}s")
            parts.append("active expired" if self._past() else "active")
        return " ".join(parts) + ">"


def _scope(
    relative: float | None,
    absolute: float | None,
    raise_on_expiry: bool,
    label: str,
    interrupt: bool,
) -> DeadlineScope:
    return DeadlineScope(
        relative=relative,
        absolute=absolute,
        raise_on_expiry=raise_on_expiry,
        label=label,
        interrupt=interrupt,
    )


def fail_after(
    seconds: object, label: str = "operation", *, interrupt: bool = False
) -> DeadlineScope:
    """A scope that raises ``DeadlineExpired`` on exit if ``seconds`` (counted
    from entry; clamped by ``clamp_timeout``; ``None`` = unbounded; ``<= 0``
    = already expired) passed; inside an asyncio task it cancels the task at
    expiry. ``interrupt=True`` (``with`` outside a task only) raises it inside
    the block at expiry: on the main thread even inside a blocking call, on
    other threads at the next bytecode (see the module docstring)."""
    return _scope(clamp_timeout(seconds, name="seconds"), None, True, label, interrupt)


def move_on_after(
    seconds: object, label: str = "operation", *, interrupt: bool = False
) -> DeadlineScope:
    """Like ``fail_after`` but exits quietly; ``scope.expired`` tells."""
    return _scope(clamp_timeout(seconds, name="seconds"), None, False, label, interrupt)


def fail_at(
    deadline: object, label: str = "operation", *, interrupt: bool = False
) -> DeadlineScope:
    """``fail_after`` with an absolute ``time.monotonic()`` deadline."""
    return _scope(None, _absolute(deadline, "deadline"), True, label, interrupt)


def move_on_at(
    deadline: object, label: str = "operation", *, interrupt: bool = False
) -> DeadlineScope:
    """``move_on_after`` with an absolute ``time.monotonic()`` deadline."""
    return _scope(None, _absolute(deadline, "deadline"), False, label, interrupt)


# No main-thread signal interrupt is raised inside scope entry and exit.
_signal_interrupt.protect(
    DeadlineScope.__enter__,
    DeadlineScope.__exit__,
    DeadlineScope.__aenter__,
    DeadlineScope.__aexit__,
)
