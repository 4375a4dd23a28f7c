"""Journal slots of a batch: where its slots start, and reserving them.

Each journal object counts its own slots from 0. A journal that exposes that
count as ``cursor`` is asked; otherwise the slots reserved through gathers are
counted here. Every reservation a gather or a durable await makes goes through
:func:`reserve_slots`.
"""

from __future__ import annotations

import weakref
from typing import Any

from taut.journal import TERMINAL_STATUSES, Journal, JournalError, JournalRecord

__all__ = ["reserve_slots"]

_cursors: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_cursors_by_id: dict[int, int] = {}


def _journal_cursor(journal: Any) -> int:
    cursor = getattr(journal, "cursor", None)
    value = cursor() if callable(cursor) else cursor
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return _cursors.get(journal, 0)
    except TypeError:  # not weak-referenceable
        return _cursors_by_id.get(id(journal), 0)


def _advance_cursor(journal: Any, base: int, count: int) -> None:
    try:
        _cursors[journal] = base + count
    except TypeError:
        _cursors_by_id[id(journal)] = base + count


def reserve_slots(journal: Journal, call_ids: list[str]) -> list[tuple[int, JournalRecord | None]]:
    """Reserve one slot per call id, in order: ``(position, record)`` each,
    ``record`` being the terminal record to replay or ``None`` (run the call)."""
    base = _journal_cursor(journal)
    records = journal.reserve(call_ids)
    if len(records) != len(call_ids):
        raise RuntimeError(
            f"journal.reserve returned {len(records)} records for {len(call_ids)} call ids"
        )
    # A taut journal says which slots it reserved (a Reservation's start),
    # decided atomically with the reservation: a concurrent gather on the same
    # journal object cannot shift them. The cursor read above is the fallback
    # for third-party journals that return a plain list.
    start = getattr(records, "start", None)
    if isinstance(start, int) and not isinstance(start, bool):
        base = start
    _advance_cursor(journal, base, len(call_ids))
    for rec in records:
        # A journal keeps terminal outcomes only; anything else would be
        # replayed as the call's result (a third-party journal's bug, or a
        # damaged store), so the batch stops before anything runs.
        if rec is not None and rec.status not in TERMINAL_STATUSES:
            raise JournalError(
                f"journal.reserve returned call {rec.call_id!r} at position {rec.position} "
                f"with status {rec.status!r} to replay; a journal replays only 'ok', "
                f"'error' and 'timeout'"
            )
    return [(rec.position if rec is not None else base + i, rec) for i, rec in enumerate(records)]
