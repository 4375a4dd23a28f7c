"""Hostile arguments to what the deadline scopes are made of: the
``DeadlineScope`` constructor itself, ``DeadlineExpired`` and the clock
installed with ``set_clock``. Each gets an error naming the parameter the
user passed and the value (or the same clamping as the rest of taut), never an
``OverflowError`` or a message naming an internal variable."""

from __future__ import annotations

import math
import threading
from typing import Callable

import pytest

import taut
from taut import MAX_TIMEOUT, DeadlineExpired, fail_after, remaining
from taut.deadline import DeadlineScope, set_clock

# -- DeadlineScope(seconds, absolute, raise_on_expiry, label, interrupt) ---------


def test_an_absolute_deadline_beyond_the_float_range_is_taken_as_fail_at_takes_it() -> None:
    # fail_at(10**400) is a deadline that never comes (clamped to MAX_TIMEOUT
    # at entry); the class itself must agree, not raise OverflowError.
    far = DeadlineScope(None, 10**400)
    with far:
        # at - start on this clock's reading: exact only to the float's grain
        # at 2**32 s (about 1e-6 s), so not compared exactly.
        assert far.timeout_s == pytest.approx(MAX_TIMEOUT, abs=1e-3)
    assert far.expired is False
    long_gone = DeadlineScope(None, -(10**400), False)
    with long_gone:
        pass
    assert long_gone.expired is True


@pytest.mark.parametrize(
    ("absolute", "error", "message"),
    [
        ("5", TypeError, r"absolute must be a number of seconds or None, got '5' \(str\)"),
        (True, TypeError, r"absolute must be a number of seconds or None, got True \(bool\)"),
        (math.nan, ValueError, r"absolute must not be NaN, got nan \(float\)"),
    ],
)
def test_a_bad_absolute_deadline_is_refused_naming_the_parameter(
    absolute: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        DeadlineScope(None, absolute)  # type: ignore[arg-type]


def test_raise_on_expiry_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match=r"raise_on_expiry must be a bool, got 1 \(int\)"):
        DeadlineScope(5, None, 1)  # type: ignore[arg-type]


# -- DeadlineExpired(label, timeout_s, elapsed_s) ---------------------------------


def test_deadline_expired_clamps_a_huge_timeout_as_every_timeout_is_clamped() -> None:
    err = DeadlineExpired("x", 10**400)
    assert err.timeout_s == MAX_TIMEOUT
    assert str(err) == "deadline expired after 4294967296s: x"
    err = DeadlineExpired("x", 1, 10**400)
    assert err.timeout_s == 1.0
    assert err.elapsed_s == pytest.approx(1.7976931348623157e308)


@pytest.mark.parametrize("name", ["timeout_s", "elapsed_s"])
def test_deadline_expired_refuses_bad_numbers_naming_the_parameter(name: str) -> None:
    with pytest.raises(TypeError, match=rf"{name} must be a number of seconds or None, got '1'"):
        DeadlineExpired("x", **{name: "1"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=rf"{name} must not be NaN"):
        DeadlineExpired("x", **{name: math.nan})


# -- the clock of set_clock ----------------------------------------------------------


@pytest.mark.parametrize(
    ("reading", "error"),
    [
        (lambda: math.nan, ValueError),
        (lambda: math.inf, ValueError),
        (lambda: -math.inf, ValueError),
        (lambda: "x", TypeError),
        (lambda: None, TypeError),
        (lambda: True, TypeError),
    ],
)
@pytest.mark.parametrize("interrupt", [False, True])
def test_a_clock_that_reads_no_number_is_named_as_the_clock(
    reading: Callable[[], object], error: type[Exception], interrupt: bool
) -> None:
    previous = set_clock(reading)  # type: ignore[arg-type]
    try:
        with pytest.raises(error, match=r"^clock \(set with set_clock\) must return a finite"):
            with fail_after(0.05, interrupt=interrupt):
                pass  # pragma: no cover - refused at entry
    finally:
        set_clock(previous)
    assert remaining() is None  # nothing was entered


def test_an_int_clock_is_a_clock() -> None:
    previous = set_clock(lambda: 5)
    try:
        with taut.move_on_after(10) as scope:
            assert remaining() == 5.0 + 10 - 5
    finally:
        set_clock(previous)
    assert scope.expired is False


class _HostileLabel(str):
    """A str subclass whose own text methods raise (a subclass's methods may
    run arbitrary code: a lazy translation string, say)."""

    def __str__(self) -> str:
        raise RuntimeError("from the label's __str__")

    def __format__(self, spec: str) -> str:
        raise RuntimeError("from the label's __format__")

    def __repr__(self) -> str:
        raise RuntimeError("from the label's __repr__")


def test_a_str_subclass_label_is_kept_as_plain_text() -> None:
    # Before: the expiry's message ran the label's __format__, so leaving
    # the scope raised its RuntimeError in place of DeadlineExpired; the
    # scope's repr ran its __repr__.
    with pytest.raises(taut.DeadlineExpired, match=r"^deadline expired after 0s: fetch$") as info:
        with taut.fail_after(0, _HostileLabel("fetch")) as scope:
            pass
    assert type(info.value.label) is str and info.value.label == "fetch"
    assert "label='fetch'" in repr(scope)
    assert type(scope.label) is str and scope.label == "fetch"
    error = taut.DeadlineExpired(_HostileLabel("fetch"), 1.0)
    assert str(error) == "deadline expired after 1s: fetch" and type(error.label) is str


def test_a_str_subclass_label_of_a_bounded_run_is_kept_as_plain_text() -> None:
    release = threading.Event()
    try:
        result = taut.run_bounded_sync(lambda: release.wait(5), 0.05, label=_HostileLabel("fetch"))
    finally:
        release.set()
    assert result.timed_out and type(result.label) is str and result.label == "fetch"
    with pytest.raises(taut.DeadlineExpired, match=r": fetch$"):
        result.unwrap()
