"""The one gate for every public timeout and every count/size parameter.

Every timeout, grace period, budget and absolute deadline a user can pass to
taut, and every ceiling or queue size, is checked here, so a parameter is
validated, and worded, the same way wherever it appears. Timeouts are built
on ``taut._core.clamp_timeout`` / ``_core._seconds`` (Rust), which accept
``int`` of any size, ``float``, ``Decimal``, ``Fraction``, ``timedelta`` and
numpy scalars and never raise ``OverflowError``.

The contract, for every function here:

* a value of the wrong type raises ``TypeError``, a value of the right type
  but out of range raises ``ValueError``; both name the parameter, the value
  and its type;
* an ``Exception`` raised by the value's own code (``__float__``,
  ``__index__``, ``__gt__``, ``__repr__``) is a wrong type (``TypeError``,
  caused by the original); a ``BaseException`` that is not an ``Exception``
  (``KeyboardInterrupt``, ``SystemExit``) propagates unchanged;
* timeouts are never shortened: up to ``MAX_TIMEOUT`` (2**32 s, 136 years)
  a value is kept exactly, beyond it it is clamped to ``MAX_TIMEOUT``; a
  long wait is made in pieces (:func:`wait_slice`), never cut;
* counts beyond ``MAX_COUNT`` are clamped to it: a ceiling of 2**31 - 1
  workers or queued calls is no ceiling in practice, and the Rust pool's
  arithmetic stays far from ``usize`` overflow on every platform.
"""

from __future__ import annotations

import math
import operator

from taut._core import MAX_TIMEOUT, OS_WAIT_SLICE, _seconds, clamp_timeout

__all__ = [
    "MAX_COUNT",
    "MAX_TIMEOUT",
    "OS_WAIT_SLICE",
    "check_count",
    "check_deadline",
    "check_duration",
    "check_max_parallel",
    "check_optional_count",
    "check_timeout",
    "describe",
    "earliest",
    "int_millis",
    "is_bool",
    "shown",
    "wait_slice",
]

MAX_COUNT = 2**31 - 1


def earliest(*limits: float | None) -> float | None:
    """The least of the limits that apply (``None``: no limit), ``None`` if
    none does: a timeout against the deadline scopes' ``remaining()``, a
    budget against its parent's."""
    bounds = [limit for limit in limits if limit is not None]
    return min(bounds) if bounds else None


def is_bool(value: object) -> bool:
    """A bool, Python's or NumPy's (``np.True_`` is no ``bool``, and before
    NumPy 2.1 its ``__index__`` gives 1): never a count, an id or an amount."""
    return isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", None) == "b"


def plain_str(value: object) -> str | None:
    """``value`` as a plain ``str`` when it is a str, else None. A subclass's
    characters are copied (``str.__str__``), so none of its own methods (a
    ``__repr__`` or ``__format__`` that raises) run later. ``type()``, not
    ``isinstance()``: an object whose ``__class__`` claims str is not one."""
    if type(value) is str:
        return value
    if issubclass(type(value), str):
        return str.__str__(value)  # a str subclass
    return None


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, and safe against a
    ``repr`` that raises (``describe`` without the type)."""
    try:
        text = repr(value)
    except (Exception, SystemExit):  # a hostile __repr__ must not end the caller
        # An int's only failure: more digits than sys.get_int_max_str_digits().
        text = "<int too long to print>" if type(value) is int else "<unrepresentable>"
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def describe(value: object, limit: int = 80) -> str:
    """``repr(value) (type)``, the repr cut to ``limit`` characters, and safe
    against a ``repr`` that raises."""
    return f"{shown(value, limit)} ({type(value).__name__})"


def check_timeout(value: object, name: str = "timeout") -> float | None:
    """A relative timeout: ``None``/``inf`` = no deadline, ``<= 0`` = already
    expired (``0.0``), otherwise seconds (clamped at ``MAX_TIMEOUT``)."""
    result: float | None = clamp_timeout(value, name=name)
    return result


def check_duration(
    value: object,
    name: str,
    *,
    none_ok: bool = True,
    zero_ok: bool = True,
) -> float | None:
    """A length of time that must not be negative (a grace period, a budget, an
    idle timeout): ``None``/``inf`` give ``None`` (``ValueError`` unless
    ``none_ok``), ``0`` is refused unless ``zero_ok``, the rest is clamped at
    ``MAX_TIMEOUT``."""
    sign = "positive" if not zero_ok else "non-negative"
    rule = f"a {sign} number of seconds" + (" or None" if none_ok else "")
    if not none_ok:
        rule = "a finite " + rule[2:]
    try:
        secs: float | None = _seconds(value, name=name)
    except TypeError as exc:
        raise TypeError(f"{name} must be {rule}, got {describe(value)}") from exc
    if secs is None or secs == math.inf:
        if none_ok:
            return None
        raise ValueError(f"{name} must be {rule}, got {describe(value)}")
    if secs < 0:
        raise ValueError(f"{name} must not be negative, got {describe(value)}")
    if secs == 0 and not zero_ok:
        raise ValueError(f"{name} must be {rule}, got {describe(value)}")
    return min(secs, MAX_TIMEOUT)


def check_deadline(value: object, name: str = "deadline") -> float | None:
    """An absolute deadline (``time.monotonic()`` seconds): ``None``/``inf`` =
    none; finite values beyond the float range become ``±1.8e308`` (a scope
    clamps the distance from now at entry)."""
    secs: float | None = _seconds(value, name=name)
    return None if secs is None or secs == math.inf else secs


def check_count(
    value: object,
    name: str,
    *,
    minimum: int,
    too_small: str | None = None,
    or_none: bool = False,
) -> int:
    """A count or size: an integer (``int``, numpy integers, anything with
    ``__index__``; never ``bool`` or ``float``) at least ``minimum``; values
    above ``MAX_COUNT`` are clamped to it. ``too_small`` makes the
    ``ValueError`` the stdlib's exact "NAME must be greater than 0" (no value
    shown, as there); ``or_none`` says in the
    messages that the caller also takes ``None`` (and replaced it already)."""
    or_none_text = " or None" if or_none else ""
    # "an integer": the standard library's word (3.14's map(buffersize=)).
    wrong_type = f"{name} must be an integer{or_none_text}"
    if type(value) is int:
        number = value
    else:
        if isinstance(value, (bool, str, bytes, bytearray, float)) or not hasattr(
            type(value), "__index__"
        ):
            raise TypeError(f"{wrong_type}, got {describe(value)}")
        try:
            # An exact int from 3.10 on; int.__int__ makes it one on 3.9 too,
            # so no overridden comparison of a subclass runs below.
            number = int.__int__(operator.index(value))  # type: ignore[arg-type]
        except Exception as exc:
            raise TypeError(f"{wrong_type}, got {describe(value)}") from exc
    if number < minimum:
        if too_small is not None:
            # The standard library's exact message (a drop-in raises the same).
            raise ValueError(f"{name} must be {too_small}")
        raise ValueError(
            f"{name} must be an integer >= {minimum}{or_none_text}, got {describe(value)}"
        )
    return min(number, MAX_COUNT)


def check_optional_count(value: object, name: str, *, minimum: int) -> int | None:
    """:func:`check_count`, or ``None`` for ``None`` (no limit)."""
    if value is None:
        return None
    return check_count(value, name, minimum=minimum, or_none=True)


def check_max_parallel(max_parallel: object) -> int | None:
    """How many calls of a batch may run at once: an int >= 1, or ``None`` for all."""
    return check_optional_count(max_parallel, "max_parallel", minimum=1)


INT_MILLIS_MAX = 2**31 - 1


def int_millis(seconds: float) -> int:
    """``seconds`` as the ``int`` of milliseconds that SQLite's busy timeout
    and PostgreSQL's/libpq's timeouts take, rounded up and capped at their
    limit (24.8 days); sqlite3 silently turns a larger value into 0."""
    return min(math.ceil(max(seconds, 0.0) * 1000), INT_MILLIS_MAX)


def wait_slice(seconds: float | None) -> float | None:
    """One piece of a wait for ``seconds`` that every platform's wait accepts
    (``OS_WAIT_SLICE``, 11.6 days; ``None`` stays ``None``). The caller loops
    until its own deadline, so nothing is cut short."""
    if seconds is None:
        return None
    return min(max(seconds, 0.0), OS_WAIT_SLICE)
