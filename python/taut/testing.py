"""Helpers for testing code that uses taut's deadlines without real waiting.

:class:`MockClock` is a manual monotonic clock: it stands still until
:meth:`MockClock.advance` moves it. Pass it wherever taut takes a clock
(``PlanningConstraints.start(clock=...)``), or install it as the clock of the
deadline scopes with :func:`scope_clock` (or :meth:`MockClock.installed`)::

    from taut.testing import scope_clock

    def test_budget_runs_out():
        with scope_clock() as clock:
            with taut.move_on_after(5) as scope:
                clock.advance(6)
            assert scope.expired

A scope entered under a mock clock computes its deadline, ``remaining()``,
``expired`` and its exit decision from that clock; it still arms the real
timer the same number of seconds ahead, so interrupts and asyncio
cancellations keep working against real time. A scope made under another
clock (a real one around the block) keeps reading its own: ``remaining()``
takes the least of what each enclosing scope has left on its own clock.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from taut._checks import check_duration, describe
from taut._core import _seconds
from taut.deadline import set_clock

__all__ = ["MockClock", "scope_clock"]


def _check_start(start: object) -> float:
    """A clock reading: a finite number of seconds (float() alone turned
    10**400 into an OverflowError and let NaN stop the clock for good)."""
    rule = f"start must be a finite number of seconds, got {describe(start)}"
    try:
        at: float | None = _seconds(start, name="start")
    except TypeError:
        raise TypeError(rule) from None
    except ValueError:  # NaN
        raise ValueError(rule) from None
    # Beyond the float range _seconds saturates at +-float max.
    if at is None or not math.isfinite(at) or abs(at) >= sys.float_info.max:
        raise ValueError(rule)
    return at


class MockClock:
    """A monotonic clock that moves only when told: ``clock()`` reads it,
    ``clock.advance(seconds)`` moves it forward. Starts at ``start`` (an
    arbitrary origin, like ``time.monotonic()``'s)."""

    __slots__ = ("now",)

    def __init__(self, start: float = 1000.0) -> None:
        self.now = _check_start(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward; a monotonic clock never goes back."""
        step = check_duration(seconds, "seconds", none_ok=False)
        assert step is not None  # none_ok=False
        moved = self.now + step
        if step > 0 and moved == self.now:
            # So far out (say MockClock(2**53)) a float cannot hold the step:
            # the clock would silently stand still and no deadline come.
            raise ValueError(
                f"seconds={step!r} cannot move the clock at {self.now!r}: a float that "
                "large cannot hold so small a step; start the clock nearer to 0"
            )
        self.now = moved

    @contextmanager
    def installed(self) -> Iterator[MockClock]:
        """Make taut's deadline scopes read this clock while the block runs."""
        previous = set_clock(self)
        try:
            yield self
        finally:
            set_clock(previous)

    def __repr__(self) -> str:
        return f"<taut.testing.MockClock now={self.now!r}>"


@contextmanager
def scope_clock(start: float = 1000.0) -> Iterator[MockClock]:
    """A fresh :class:`MockClock`, installed as the deadline scopes' clock for
    the length of the block."""
    with MockClock(start).installed() as clock:
        yield clock
