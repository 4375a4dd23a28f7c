"""taut.testing.MockClock: a manual clock for deadline logic."""

from __future__ import annotations

import math

import pytest

import taut
from taut.deadline import set_clock
from taut.testing import MockClock, scope_clock


def test_mock_clock_moves_only_when_told() -> None:
    clock = MockClock(5.0)
    assert clock() == 5.0 == clock()
    clock.advance(2.5)
    assert clock() == 7.5
    for bad in (-1.0, math.nan):
        with pytest.raises(ValueError, match="seconds must be a non-negative number"):
            clock.advance(bad)
    assert clock() == 7.5


def test_scope_clock_drives_scopes_and_is_restored() -> None:
    before = set_clock(None)
    set_clock(before)
    with scope_clock() as clock:
        with taut.move_on_after(5) as scope:
            assert scope.remaining() == 5.0
            clock.advance(6)
        assert scope.expired
    assert set_clock(before) is before
