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


# -- scopes on different clocks: each is measured on its own -------------------------

LONG = 60.0


def test_a_real_scope_keeps_its_own_clock_inside_scope_clock() -> None:
    # remaining() once subtracted a mock reading from the real scope's
    # monotonic deadline (tens of thousands of seconds "left", or 0).
    with taut.fail_after(LONG, label="real") as outer:
        with scope_clock() as clock:
            left = taut.remaining()
            assert left is not None and LONG - 10 < left <= LONG
            with taut.move_on_after(10, label="mock") as inner:
                assert taut.remaining() == 10.0
                clock.advance(4)
                assert taut.remaining() == 6.0
                clock.advance(100)
                assert taut.remaining() == 0.0
            assert inner.expired
            left = taut.remaining()
            assert left is not None and LONG - 10 < left <= LONG
    assert not outer.expired


def test_a_mock_scope_keeps_its_clock_after_the_clock_is_restored() -> None:
    with scope_clock() as clock:
        scope = taut.fail_after(5, label="mock")
        scope.__enter__()
    try:
        assert taut.remaining() == 5.0  # was 0.0: its deadline read on the real clock
        clock.advance(1)
        assert taut.remaining() == 4.0
    finally:
        assert scope.__exit__(None, None, None) is False
    assert taut.remaining() is None


def test_a_real_scope_inside_a_mock_scope_is_bounded_by_it_on_the_mock_clock() -> None:
    # The real scope takes the Rust fast entry, which reads its parent's
    # deadline: a mock one must not be taken for a monotonic time.
    with scope_clock() as clock:
        with taut.move_on_after(5, label="mock"):
            previous = set_clock(None)
            try:
                with taut.fail_after(LONG, label="real") as real:
                    assert taut.remaining() == 5.0
                    clock.advance(3)
                    assert taut.remaining() == 2.0
                    with taut.fail_after(LONG, label="real, nested"):
                        assert taut.remaining() == 2.0
            finally:
                set_clock(previous)
            assert not real.expired
