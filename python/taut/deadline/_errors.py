"""What a deadline reports: ``DeadlineExpired`` (raised) and ``BoundedResult``
(returned by bounded runs)."""

from __future__ import annotations

import dataclasses
from typing import Any, Generic, TypeVar, cast

from taut._checks import plain_str
from taut._core import _seconds, clamp_timeout

__all__ = ["BoundedResult", "DeadlineExpired"]

T = TypeVar("T")


def format_seconds(seconds: float) -> str:
    """Seconds for a message: three significant digits, whole seconds from 1000 s."""
    if seconds >= 1000:
        return f"{seconds:.0f}"
    return f"{seconds:.3g}"


class DeadlineExpired(TimeoutError):
    """A taut deadline expired: ``label`` names the bounded operation,
    ``timeout_s`` the budget and ``elapsed_s`` the time it had run.

    A ``TimeoutError`` subclass, but a distinct type: a provider's or a
    network library's ``TimeoutError`` is never a ``DeadlineExpired``."""

    # Its public home (pickles and reprs name it, as before the package split).
    __module__ = "taut.deadline"

    label: str
    timeout_s: float | None
    elapsed_s: float | None

    def __init__(
        self,
        label: str = "operation",
        timeout_s: float | None = None,
        elapsed_s: float | None = None,
    ) -> None:
        # Plain text, as taut.call keeps a call_id: a str subclass's own
        # __format__/__str__/__repr__ (one that raises) must not run in this
        # message, nor later in a log line, in place of the expiry. Anything
        # else a user raises this with is kept as given.
        text = plain_str(label)
        if text is not None:
            label = text
        self.label = label
        # Through the gate of every timeout (a user may raise one of these
        # too): 10**400 is clamped as fail_after(10**400) is, and a bad
        # value is refused by name, not an OverflowError in the message's
        # formatting.
        self.timeout_s = timeout_s = clamp_timeout(timeout_s, name="timeout_s")
        self.elapsed_s = _seconds(elapsed_s, name="elapsed_s")
        if timeout_s is None:
            message = f"deadline expired: {label}"
        else:
            message = f"deadline expired after {format_seconds(timeout_s)}s: {label}"
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.label, self.timeout_s, self.elapsed_s))


class ScopeInterrupt(DeadlineExpired):
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
        _fill(self, timed_out, value, elapsed_s, timeout_s, label)

    def unwrap(self) -> T:
        """The value; ``DeadlineExpired`` if the run timed out."""
        if self.timed_out:
            raise DeadlineExpired(self.label, self.timeout_s, self.elapsed_s)
        return cast(T, self.value)


# Set after the dataclass is made (which resolves names in its own module).
BoundedResult.__module__ = "taut.deadline"


def _fill(
    result: BoundedResult[Any],
    timed_out: bool,
    value: Any,
    elapsed_s: float,
    timeout_s: float | None,
    label: str,
) -> None:
    # Into the instance dict directly: every bounded call makes one, and
    # this is half the cost of object.__setattr__ per field (frozen).
    fields = result.__dict__
    fields["timed_out"] = timed_out
    fields["value"] = value
    fields["elapsed_s"] = elapsed_s
    fields["timeout_s"] = timeout_s
    fields["label"] = label


def bounded_result(
    timed_out: bool, value: Any, elapsed_s: float, timeout_s: float | None, label: str
) -> BoundedResult[Any]:
    """A ``BoundedResult`` as every bounded run returns one: without the
    keyword binding of ``__init__``, which cost as much as a fast call's
    whole check of its arguments."""
    result: BoundedResult[Any] = object.__new__(BoundedResult)
    _fill(result, timed_out, value, elapsed_s, timeout_s, label)
    return result
