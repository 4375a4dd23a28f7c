"""Deadlines for Python code: ``DeadlineExpired``, ``BoundedResult``, the
timeout gate ``clamp_timeout`` and the deadline scopes ``fail_after``,
``move_on_after``, ``fail_at`` and ``move_on_at``.

Every scope arms one ``taut._core.Deadline`` on the process's Rust timer
thread, so expiry is noticed on time without the GIL and without an event
loop:

- ``with`` scopes: ``scope.expired`` is a cheap flag for cooperative code;
  with ``interrupt=True`` the timer has ``DeadlineExpired`` raised inside the
  block's Python code at its next bytecode boundary (not inside a blocking C
  call, and a bare ``except:`` in the block can swallow it). ``fail_*``
  scopes raise ``DeadlineExpired`` on exit if the deadline expired.
- ``async with`` scopes: at expiry the timer thread wakes the running loop
  through ``taut._loop_waker`` (no GIL needed to wake it), and the loop
  cancels the task as ``asyncio.timeout`` does; ``fail_*`` scopes turn that
  cancellation into ``DeadlineExpired``. This fires even when asyncio's own
  timers are starved; a loop blocked by synchronous code is
  ``run_bounded_async``'s concern.

Scopes keep the effective deadline (the earliest of all enclosing scopes) in a
``contextvars.ContextVar``, so ``remaining()`` works in nested code and in
worker threads that run in a copy of the caller's context.

Testing without waiting: scopes read time through a module-level clock,
``time.monotonic`` by default. ``set_clock(fake)`` swaps it (and returns the
previous clock); a scope created under a fake clock computes its deadline,
``remaining()``, ``expired`` and its exit decision from that clock, and still
arms the real timer the same number of seconds ahead.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import sys
import threading
import time
from types import TracebackType
from typing import Any, Callable, Generic, TypeVar, cast

from taut import _core
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


# The effective (earliest) deadline of the current context, on the clock the
# innermost scope used; None outside any bounded scope.
_effective: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "taut_effective_deadline", default=None
)


def remaining() -> float | None:
    """Seconds left before the earliest deadline of the enclosing scopes
    (never negative), or ``None`` outside any bounded scope."""
    at = _effective.get()
    if at is None:
        return None
    return max(0.0, at - _clock())


def current_deadline() -> float | None:
    """The effective absolute deadline of this context (clock seconds)."""
    return _effective.get()


def _absolute(value: object, name: str) -> float | None:
    """Validate an absolute deadline like a timeout (same types, same errors)."""
    if clamp_timeout(value, name=name) is None:
        return None
    try:
        return float(cast(Any, value))
    except OverflowError:
        # Beyond the float range: only the sign matters (entry clamps it).
        return 1e300 if value > 0 else -1e300  # type: ignore[operator]


class DeadlineScope:
    """A deadline over a ``with`` or ``async with`` block. Made by
    ``fail_after``/``move_on_after``/``fail_at``/``move_on_at``; enter once."""

    __slots__ = (
        "__weakref__",
        "_absolute",
        "_at",
        "_cancel_requested",
        "_cancelling",
        "_clock",
        "_deadline",
        "_entered",
        "_expired",
        "_interrupt",
        "_raise",
        "_real",
        "_relative",
        "_start",
        "_task",
        "_token",
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
        self._start = 0.0
        self._deadline: _core.Deadline | None = None
        self._token: contextvars.Token[float | None] | None = None
        self._entered = False
        self._expired: bool | None = None
        self._task: asyncio.Task[Any] | None = None
        self._waker: Watch | None = None
        self._cancel_requested = False
        self._cancelling = 0

    # -- inspection ---------------------------------------------------------

    @property
    def deadline(self) -> float | None:
        """The absolute deadline (clock seconds), known once entered."""
        return self._at

    @property
    def expired(self) -> bool:
        """True once this scope's own deadline has passed (a flag read)."""
        if self._expired is not None:
            return self._expired
        d = self._deadline
        if d is None:
            return False
        if d.expired:
            return True
        return not self._real and self._at is not None and self._clock() >= self._at

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
        outer = _effective.get()
        if at is not None:
            effective = at if outer is None else min(at, outer)
            self._token = _effective.set(effective)
            real_at = at if self._real else _core.monotonic() + (at - now)
            self._deadline = _core.Deadline(real_at)

    def _leave(self) -> bool:
        """Disarm, restore the context; True if this scope's deadline expired."""
        d = self._deadline
        # cancel() first: after it returns no interrupt of ours can be set.
        fired = d is not None and not d.cancel()
        if self._token is not None:
            try:
                _effective.reset(self._token)
            except ValueError:
                # Exited in another context than entered: leave that one alone.
                pass
            self._token = None
        expired = fired or (not self._real and self._at is not None and self._clock() >= self._at)
        self._expired = expired
        return expired

    # -- with ---------------------------------------------------------------

    def __enter__(self) -> DeadlineScope:
        self._enter()
        if self._interrupt and self._deadline is not None:
            self._deadline.interrupt_thread(threading.get_ident(), _ScopeInterrupt)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
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

    # -- async with -----------------------------------------------------------

    async def __aenter__(self) -> DeadlineScope:
        if self._interrupt:
            raise ValueError(
                "interrupt=True is for `with` blocks; `async with` cancels the task instead"
            )
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("`async with` a deadline scope must run inside an asyncio task")
        self._enter()
        self._task = task
        if sys.version_info >= (3, 11):
            self._cancelling = task.cancelling()
        if self._deadline is not None:
            self._waker = waker_for(loop).watch(self._deadline, self._fire)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if self._waker is not None:
            self._waker.stop()
            self._waker = None
        expired = self._leave()
        if self._cancel_requested:
            ours = exc_type is not None and issubclass(exc_type, asyncio.CancelledError)
            if sys.version_info >= (3, 11):
                task = self._task
                assert task is not None
                if task.uncancel() > self._cancelling:
                    # Someone else cancelled the task too: theirs wins.
                    ours = False
            if ours:
                if not self._raise:
                    return True
                raise self._error() from exc
        if not expired or not self._raise:
            return False
        if exc_type is None:
            raise self._error()
        return False

    def _fire(self) -> None:
        """On the loop's thread: this scope's deadline has expired."""
        task = self._task
        if task is None or self._cancel_requested or task.done():
            return
        self._cancel_requested = True
        task.cancel()

    def __repr__(self) -> str:
        kind = "fail" if self._raise else "move_on"
        return f"<taut.DeadlineScope {kind} label={self.label!r} at={self._at!r}>"


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
    from entry; clamped by ``clamp_timeout``; ``None`` = unbounded) passed.
    ``interrupt=True`` (``with`` only) raises it inside the block's Python
    code at expiry."""
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
