"""Journal slots of a batch: where its slots start, and reserving them.

Each journal object counts its own slots from 0. A journal that exposes that
count as ``cursor`` is asked; otherwise the slots reserved through gathers are
counted here. Every reservation a gather or a durable await makes goes through
:func:`reserve_slots`.

A handle remembers the slot a batch reserved for it (:func:`hold`). Gathered
again on the same journal object (the way back from a batch a passing journal
failure halted), the same handles in the same order write to those slots
(:func:`held_slots`) instead of reserving new ones after them: a rerun of the
program, which without the failure gathers once, walks the journal's slots
from the start and must find every outcome where that one gather put it.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

from taut.journal import TERMINAL_STATUSES, Journal, JournalError, JournalRecord

__all__ = ["HeldSlot", "held_slots", "hold", "reserve_slots"]

_cursors: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
# Journals that cannot be weakly referenced, by id, with the object itself:
# kept alive, so that no new object is ever given the id, and the count, of
# one gone (CPython reuses addresses: a new journal went on from an old
# one's count, and a rerun found its outcomes nowhere). Only third-party
# journals that also return plain lists are counted here.
_cursors_by_id: dict[int, tuple[Any, int]] = {}


def _journal_cursor(journal: Any) -> int:
    cursor = getattr(journal, "cursor", None)
    value = cursor() if callable(cursor) else cursor
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return _cursors.get(journal, 0)
    except TypeError:  # not weak-referenceable
        return _cursors_by_id.get(id(journal), (journal, 0))[1]


def _advance_cursor(journal: Any, base: int, count: int) -> None:
    try:
        _cursors[journal] = base + count
    except TypeError:
        _cursors_by_id[id(journal)] = (journal, base + count)


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


class HeldSlot(NamedTuple):
    """The slot a batch reserved for a handle: on which journal object, at
    which position, and whether its outcome is in the journal yet."""

    journal: weakref.ref[Any]
    clears: int  # the journal's clear() count then: a clear deletes the slot
    position: int
    recorded: bool


def hold(handle: Any, journal: Journal, position: int, recorded: bool) -> None:
    """Remember on ``handle`` its slot on ``journal`` (nothing for a journal
    that cannot be weakly referenced: an id could name another object later)."""
    try:
        ref = weakref.ref(journal)
    except TypeError:
        return
    handle._slot = HeldSlot(ref, _clears(journal), position, recorded)


def _clears(journal: Any) -> int:
    count = getattr(journal, "_clears", 0)
    return count if isinstance(count, int) else 0


def held_slots(journal: Journal, handles: Sequence[Any]) -> list[HeldSlot] | None:
    """The slots ``journal`` already reserved for exactly these handles, one
    after another in this order, or None (then the batch reserves new ones)."""
    held: list[HeldSlot] = []
    clears = _clears(journal)
    for i, handle in enumerate(handles):
        slot = handle._slot
        if not isinstance(slot, HeldSlot) or slot.journal() is not journal:
            return None
        if slot.clears != clears:
            return None
        if i and slot.position != held[0].position + i:
            return None
        held.append(slot)
    # Reserved by this object's cursor (not a cursor that a clear() put back).
    if not held or held[0].position + len(held) > _journal_cursor(journal):
        return None
    return held
