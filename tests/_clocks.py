"""A fake monotonic clock for deadline logic, and a way to install it as
taut's scope clock for the length of a test."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@contextmanager
def installed_scope_clock() -> Iterator[FakeClock]:
    """A FakeClock that taut's deadline scopes read while the block runs."""
    from taut.deadline import set_clock

    clock = FakeClock()
    previous = set_clock(clock)
    try:
        yield clock
    finally:
        set_clock(previous)
