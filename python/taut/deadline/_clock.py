"""The clock deadline scopes read: ``time.monotonic`` unless a test swaps it.

A scope created under a fake clock computes its deadline, ``remaining()``,
``expired`` and its exit decision from that clock, and still arms the real
timer the same number of seconds ahead.
"""

from __future__ import annotations

import math
import time
from typing import Callable

from taut._checks import describe

__all__ = ["set_clock"]

# The clock, as the one item of a list: the Rust fast path that makes a
# scope per request reads an item of a list it holds, cheaper than a module
# global (a dict lookup).
current: list[Callable[[], float]] = [time.monotonic]


def set_clock(clock: Callable[[], float] | None) -> Callable[[], float]:
    """Make deadline scopes read time from ``clock`` (``None`` restores
    ``time.monotonic``). Returns the clock that was in use. For tests."""
    if clock is not None and not callable(clock):
        # Refused here, not at the next scope's entry ("'str' object is
        # not callable", far from the mistake).
        raise TypeError(
            f"clock must be a callable returning seconds, or None, got {describe(clock)}"
        )
    previous = current[0]
    current[0] = time.monotonic if clock is None else clock
    return previous


def read(clock: Callable[[], float], name: str = "clock (set with set_clock)") -> float:
    """A reading of ``clock``, checked: a clock (one passed to
    ``set_clock``, or a budget's) that returns NaN, an infinity or no number
    at all would otherwise fail further on, naming a variable of taut's own
    ("at must be a time.monotonic() value"), or, NaN, quietly compare as
    never expiring. ``name`` says which clock in the message."""
    now = clock()
    if type(now) is float and math.isfinite(now):
        return now
    if isinstance(now, bool) or not isinstance(now, (int, float)):
        raise TypeError(_bad_reading(name, now))
    try:
        seconds = float(now)
    except OverflowError:  # an int beyond the float range
        raise ValueError(_bad_reading(name, now)) from None
    if not math.isfinite(seconds):
        raise ValueError(_bad_reading(name, now))
    return seconds


def _bad_reading(name: str, now: object) -> str:
    return f"{name} must return a finite number of seconds, got {describe(now)}"
