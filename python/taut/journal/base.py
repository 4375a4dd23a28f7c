"""The journal contract and its records, and the checks and the reservation
decision every journal shares.

See :mod:`taut.journal` for the semantics every journal shares.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, KeysView, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import NamedTuple, Optional, Protocol, runtime_checkable

from taut._checks import describe, plain_str

__all__ = [
    "TERMINAL_STATUSES",
    "Journal",
    "JournalRecord",
    "Reservation",
    "check_call_id",
    "check_complete",
    "check_ids",
    "check_position",
    "check_run",
    "check_storable",
    "plan_reserve",
]

TERMINAL_STATUSES = frozenset({"ok", "error", "timeout"})
PENDING = "pending"
SLOT_STATUSES = TERMINAL_STATUSES | {PENDING}  # what a stored slot can hold
# Positions and lease tokens are stored as 64-bit signed integers (SQLite
# INTEGER, PostgreSQL bigint); no cursor gets near this, so a larger position
# is a caller's bug.
MAX_INT64 = 2**63 - 1


class JournalRecord(NamedTuple):
    """The stored terminal outcome of one durable call."""

    position: int
    call_id: str
    status: str  # 'ok' | 'error' | 'timeout'
    value: object
    error: BaseException | None


class Reservation(list[Optional[JournalRecord]]):  # Optional: a runtime base on 3.9
    """What :meth:`Journal.reserve` returns: one entry per call id, in order
    (a :class:`JournalRecord` to replay, or None to run), and ``start``, the
    position of the first slot reserved. The slots are ``positions``:
    contiguous, and decided in the same atomic step as the reservation, so
    two batches reserving on one journal object at the same moment each know
    their own slots."""

    start: int

    def __init__(self, start: int, records: Iterable[JournalRecord | None] = ()) -> None:
        super().__init__(records)
        self.start = start

    @property
    def positions(self) -> range:
        return range(self.start, self.start + len(self))

    def __repr__(self) -> str:
        return f"Reservation(start={self.start}, {list.__repr__(self)})"


@runtime_checkable
class Journal(Protocol):
    """What ``taut.gather(..., journal=...)`` needs from a journal."""

    def reserve(self, call_ids: Sequence[str]) -> list[JournalRecord | None]:
        """Atomically (one transaction, one lock) reserve the next
        ``len(call_ids)`` slots after those already reserved by this journal
        object (a cursor starting at 0 per object) and return them as a
        :class:`Reservation` (its ``start`` says which slots). For each position:
        the same call id with a terminal outcome returns its record (replay);
        the same id still pending returns None (run again); a different id
        truncates the journal from that position on and writes pending slots
        for the rest; no slot writes a pending slot and returns None. A plain
        list is accepted from third-party journals, but then two batches
        reserving on one object at the same moment may mix up their slots,
        and taut counts the object's slots itself (one that cannot be weakly
        referenced is then kept alive for good)."""
        ...

    def complete(
        self, position: int, call_id: str, status: str, value: object, error: BaseException | None
    ) -> None:
        """Durably write the terminal outcome (``ok``/``error``/``timeout``) of a
        reserved slot. Failures raise; they are never swallowed."""
        ...


def check_storable(text: str, name: str) -> str:
    """``text`` (a call id or run name) if every journal can store it.

    Refused, whichever journal is used, so that a run behaves the same in
    memory, in SQLite and in PostgreSQL: a lone surrogate (not valid Unicode:
    sqlite3 and psycopg fail deep inside with UnicodeEncodeError when they
    encode it as UTF-8) and NUL (PostgreSQL text cannot hold it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{name} {text!r} cannot be journaled: {text[exc.start]!r} at index "
            f"{exc.start} is a lone surrogate, not valid Unicode text"
        ) from None
    if "\x00" in text:
        raise ValueError(
            f"{name} {text!r} cannot be journaled: it holds NUL ('\\x00') at index "
            f"{text.index(chr(0))}, which PostgreSQL text cannot store"
        )
    return text


def check_ids(call_ids: Sequence[str]) -> list[str]:
    """What every journal's :meth:`Journal.reserve` takes: the call ids, in order."""
    if isinstance(call_ids, (str, bytes)):
        raise TypeError(
            f"call_ids must be a sequence of strings, got a single one: {describe(call_ids)}"
        )
    if isinstance(call_ids, AbstractSet) and not isinstance(call_ids, KeysView):
        # Slots follow the ids' order; a set of str has another order in
        # every process (hash randomization), so a rerun would not replay. A
        # dict's keys keep the order they were put in.
        raise TypeError(
            f"call_ids must be a sequence of strings in call order, got a set, which has "
            f"no order: {describe(call_ids)}"
        )
    try:
        items = iter(call_ids)
    except TypeError:
        raise TypeError(
            f"call_ids must be a sequence of strings, got {describe(call_ids)}"
        ) from None
    ids = []
    for cid in items:
        text = plain_str(cid)
        if text is None:
            # describe(): the program's object, whose __repr__ may raise.
            raise TypeError(f"call_ids must be strings, got {describe(cid)}")
        ids.append(check_storable(text, "call id"))
    return ids


def check_run(run: object) -> str:
    text = plain_str(run)
    if text is None:
        raise TypeError(f"run must be a string, got {describe(run)}")
    return check_storable(text, "run")


def check_call_id(call_id: object) -> str:
    text = plain_str(call_id)
    if text is None:
        raise TypeError(f"call_id must be a string, got {describe(call_id)}")
    return check_storable(text, "call id")


def check_position(position: object) -> int:
    """A slot position as :meth:`Journal.complete` takes it: an integer
    (never a bool or float, which a database would quietly compare as a slot)
    that a slot can have."""
    if isinstance(position, bool) or not hasattr(type(position), "__index__"):
        raise TypeError(f"position must be an integer (a reserved slot), got {describe(position)}")
    try:
        number = operator.index(position)  # type: ignore[arg-type]
    except Exception as exc:  # the value's own __index__ failed
        raise TypeError(
            f"position must be an integer (a reserved slot), got {describe(position)}"
        ) from exc
    if not 0 <= number <= MAX_INT64:
        raise ValueError(
            f"position must be an integer from 0 to 2**63 - 1 (a reserved slot), "
            f"got {describe(position)}"
        )
    return int(number)


def check_complete(
    position: object, call_id: object, status: str, error: BaseException | None
) -> tuple[int, str]:
    """The arguments of :meth:`Journal.complete`, checked before anything is
    written: the position and call id as the journal stores them."""
    if not isinstance(status, str) or status not in TERMINAL_STATUSES:
        raise ValueError(
            f"status must be one of 'ok', 'error', 'timeout' (not_started and cancelled "
            f"are never journaled), got {describe(status)}"
        )
    if error is not None and not isinstance(error, BaseException):
        raise TypeError(f"error must be an exception or None, got {type(error).__name__}")
    return check_position(position), check_call_id(call_id)


# ----------------------------------------------------------- reserving over stored slots
class ReservePlan(NamedTuple):
    """What a reservation over stored rows must do, decided in one place for
    every journal: ``truncate_from`` (delete slots from there on, or None),
    ``fresh`` pending slots to write, and per call the stored row to replay
    (a terminal row) or None (run)."""

    truncate_from: int | None
    fresh: list[tuple[int, str]]
    replay: list[tuple[object, ...] | None]


def plan_reserve(
    start: int, ids: Sequence[str], stored: Mapping[int, tuple[object, ...]]
) -> ReservePlan:
    """``stored`` maps position to a row ``(position, call_id, status, ...)``."""
    truncate_from: int | None = None
    fresh: list[tuple[int, str]] = []
    replay: list[tuple[object, ...] | None] = []
    for offset, cid in enumerate(ids):
        pos = start + offset
        row = None if truncate_from is not None else stored.get(pos)
        if row is not None and row[1] != cid:
            truncate_from = pos
            row = None
        if row is None:
            fresh.append((pos, cid))
            replay.append(None)
        elif row[2] in TERMINAL_STATUSES:
            replay.append(row)
        else:
            replay.append(None)
    return ReservePlan(truncate_from, fresh, replay)
