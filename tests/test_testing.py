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
    for bad, match in ((-1.0, "must not be negative"), (math.nan, "must not be NaN")):
        with pytest.raises(ValueError, match=f"^seconds {match}"):
            clock.advance(bad)
    with pytest.raises(TypeError, match=r"^seconds must be a finite non-negative.*'1' \(str\)"):
        clock.advance("1")  # type: ignore[arg-type]
    assert clock() == 7.5


def test_mock_clock_refuses_a_step_too_small_to_move_it() -> None:
    # At 2**53 seconds a float cannot hold half a second: advancing must say
    # so, not leave the clock standing still with every deadline never due.
    clock = MockClock(2.0**53)
    with pytest.raises(ValueError, match=r"^seconds=0\.5 cannot move the clock at 9007199"):
        clock.advance(0.5)
    assert clock() == 2.0**53
    clock.advance(2.0)  # a step the float can hold still moves it
    assert clock() == 2.0**53 + 2.0
    clock.advance(0)  # standing still on purpose is fine
    assert clock() == 2.0**53 + 2.0


@pytest.mark.parametrize(
    ("start", "error"),
    [
        (10**400, ValueError),  # was OverflowError: int too large to convert to float
        (math.nan, ValueError),  # was accepted: a clock stuck at NaN
        (math.inf, ValueError),
        (None, ValueError),
        ("x", TypeError),  # was ValueError: could not convert string to float: 'x'
        (True, TypeError),
    ],
)
def test_mock_clock_start_must_be_a_finite_number_named_in_the_error(
    start: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match=r"^start must be a finite number of seconds, got "):
        MockClock(start)  # type: ignore[arg-type]
    with pytest.raises(error, match=r"^start must be a finite number of seconds, got "):
        with scope_clock(start):  # type: ignore[arg-type]
            pass


def test_scope_clock_drives_scopes_and_is_restored() -> None:
    before = set_clock(None)
    set_clock(before)
    with scope_clock() as clock:
        with taut.move_on_after(5) as scope:
            assert scope.remaining() == 5.0
            clock.advance(6)
        assert scope.expired
    assert set_clock(before) is before


@pytest.mark.parametrize("clock", ["monotonic", 5.0, True])
def test_set_clock_refuses_what_is_not_a_clock(clock: object) -> None:
    # Was accepted, and every later scope entry failed far from the mistake
    # ("'str' object is not callable"), until set_clock(None).
    before = set_clock(None)
    try:
        with pytest.raises(
            TypeError, match=r"^clock must be a callable returning seconds, or None, got "
        ):
            set_clock(clock)  # type: ignore[arg-type]
        with taut.move_on_after(5) as scope:
            pass
        assert not scope.expired
    finally:
        set_clock(before)
