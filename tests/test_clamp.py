"""taut.clamp_timeout and taut.MAX_TIMEOUT: the one gate every timeout passes."""

from __future__ import annotations

import asyncio
import datetime
import math
import select
import socket
import threading
import time
from decimal import Decimal
from fractions import Fraction

# numpy is in the test extra: imported plainly, so a missing numpy fails
# instead of quietly skipping the numpy cases.
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import taut
from taut import MAX_TIMEOUT, clamp_timeout

ACCEPTED = [
    (None, None),
    (0, 0.0),
    (0.0, 0.0),
    (-0.0, 0.0),
    (-5, 0.0),
    (-5.5, 0.0),
    (0.25, 0.25),
    (7, 7.0),
    (math.inf, None),
    (-math.inf, 0.0),
    (10**18, MAX_TIMEOUT),
    (10**400, MAX_TIMEOUT),
    (-(10**400), 0.0),
    (1e300, MAX_TIMEOUT),
    (Decimal("1.5"), 1.5),
    (Decimal("-3"), 0.0),
    (Decimal("1e400"), MAX_TIMEOUT),
    (Decimal("-1e400"), 0.0),
    (Decimal("Infinity"), None),
    (Decimal("-Infinity"), 0.0),
    (Fraction(3, 2), 1.5),
    (Fraction(10**400, 3), MAX_TIMEOUT),
    (Fraction(-(10**400), 3), 0.0),
    (datetime.timedelta(seconds=2.5), 2.5),
    (datetime.timedelta(days=-1), 0.0),
    (datetime.timedelta.max, MAX_TIMEOUT),
]


@pytest.mark.parametrize(("value", "expected"), ACCEPTED, ids=repr)
def test_accepted_values(value: object, expected: float | None) -> None:
    result = clamp_timeout(value)
    assert result == expected
    assert result is None or type(result) is float


class IntLike:
    def __index__(self) -> int:
        return 10**500


class FloatLike:
    def __float__(self) -> float:
        return 4.5


def test_duck_typed_numbers() -> None:
    assert clamp_timeout(IntLike()) == MAX_TIMEOUT
    assert clamp_timeout(FloatLike()) == 4.5


def test_numpy_scalars() -> None:
    assert clamp_timeout(np.float64(0.5)) == 0.5
    assert clamp_timeout(np.float32(2.0)) == 2.0
    assert clamp_timeout(np.int64(3)) == 3.0
    assert clamp_timeout(np.uint64(2**64 - 1)) == MAX_TIMEOUT
    assert clamp_timeout(np.int8(-4)) == 0.0
    assert clamp_timeout(np.float64("inf")) is None
    with pytest.raises(ValueError, match=r"^timeout must not be NaN, got "):
        clamp_timeout(np.float64("nan"))
    with pytest.raises(TypeError, match=r"^timeout must be a number of seconds or None, got "):
        clamp_timeout(np.bool_(True))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "timeout must be a number of seconds or None, got True (bool)"),
        (False, "timeout must be a number of seconds or None, got False (bool)"),
        ("5", "timeout must be a number of seconds or None, got '5' (str)"),
        (b"5", "timeout must be a number of seconds or None, got b'5' (bytes)"),
        ([1], "timeout must be a number of seconds or None, got [1] (list)"),
        (1j, "timeout must be a number of seconds or None, got 1j (complex)"),
    ],
)
def test_rejected_types(value: object, message: str) -> None:
    with pytest.raises(TypeError) as info:
        clamp_timeout(value)
    assert str(info.value) == message


def test_rejected_object_names_its_type() -> None:
    with pytest.raises(TypeError, match=r"got <object object at .*> \(object\)$"):
        clamp_timeout(object())


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (math.nan, "timeout must not be NaN, got nan (float)"),
        (Decimal("NaN"), "timeout must not be NaN, got Decimal('NaN') (Decimal)"),
        (Decimal("sNaN"), "timeout must not be NaN, got Decimal('sNaN') (Decimal)"),
    ],
)
def test_nan_is_rejected(value: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        clamp_timeout(value)
    assert str(info.value) == message


def test_name_appears_in_messages() -> None:
    with pytest.raises(TypeError, match=r"^grace must be a number of seconds or None, got True"):
        clamp_timeout(True, name="grace")
    with pytest.raises(ValueError, match=r"^grace must not be NaN"):
        clamp_timeout(math.nan, name="grace")


def test_int_subclass_is_read_as_int() -> None:
    class BadBig(int):
        def __index__(self) -> int:
            raise TypeError("no")

    assert clamp_timeout(BadBig(10**400)) == MAX_TIMEOUT


def test_long_reprs_are_truncated_in_messages() -> None:
    with pytest.raises(TypeError) as info:
        clamp_timeout([10**400])
    assert str(info.value).endswith("... (list)")
    assert len(str(info.value)) < 200


def test_max_timeout_is_exported_and_conservative() -> None:
    assert taut.MAX_TIMEOUT == MAX_TIMEOUT == 1_000_000.0
    assert MAX_TIMEOUT + 3600 < threading.TIMEOUT_MAX
    # poll()/epoll() take int milliseconds: leave room for a day of grace.
    assert (MAX_TIMEOUT + 86400) * 1000 < 2**31 - 1


def _safe_everywhere(value: float) -> None:
    """Pass value (and value plus grace) to waits that return at once but
    still validate their timeout argument."""
    for v in (value, value + 5, value + 3600):
        lock = threading.Lock()
        assert lock.acquire(timeout=v)
        lock.release()
        event = threading.Event()
        event.set()
        assert event.wait(v)
        a, b = socket.socketpair()
        try:
            b.send(b"x")
            assert select.select([a], [], [], v)[0] == [a]
            poller = select.poll()
            poller.register(a, select.POLLIN)
            assert poller.poll(v * 1000)
            if hasattr(select, "epoll"):
                ep = select.epoll()
                ep.register(a.fileno(), select.EPOLLIN)
                assert ep.poll(v)
                ep.close()
        finally:
            a.close()
            b.close()
        time.gmtime(time.time() + v)
        datetime.datetime.now() + datetime.timedelta(seconds=v)

        async def main(v: float = v) -> None:
            loop = asyncio.get_running_loop()
            loop.call_later(v, lambda: None).cancel()
            fut = loop.create_future()
            fut.set_result(1)
            assert await asyncio.wait_for(fut, v) == 1

        asyncio.run(main())


@pytest.mark.parametrize(("value", "expected"), ACCEPTED, ids=repr)
def test_every_clamped_value_is_safe_for_os_waits(value: object, expected: float | None) -> None:
    result = clamp_timeout(value)
    if result is not None:
        _safe_everywhere(result)


@given(st.one_of(st.floats(allow_nan=False), st.integers(), st.fractions(), st.decimals()))
def test_any_number_clamps_into_range(value: object) -> None:
    if isinstance(value, Decimal) and value.is_nan():
        with pytest.raises(ValueError):
            clamp_timeout(value)
        return
    result = clamp_timeout(value)
    assert result is None or 0.0 <= result <= MAX_TIMEOUT
    if result is not None:
        lock = threading.Lock()
        assert lock.acquire(timeout=result + 5)
        lock.release()
