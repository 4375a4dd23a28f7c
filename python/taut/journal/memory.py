"""InMemoryJournal: the journal contract without durability (tests, or replay
within one process)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import NamedTuple

from taut.journal import lease as _leases
from taut.journal.base import (
    PENDING,
    JournalRecord,
    Reservation,
    check_complete,
    check_ids,
    plan_reserve,
)
from taut.journal.errors import JournalBusy, JournalError, busy_message, stale_message
from taut.journal.lease import Lease, check_lease_seconds

__all__ = ["InMemoryJournal"]


class _MemorySlot(NamedTuple):
    call_id: str
    status: str
    value: object
    error: BaseException | None


class _MemoryRun:
    """Slots and lease of one in-memory run, shared by reopened objects."""

    def __init__(self) -> None:
        # Keyed by position (like the SQL tables), so a truncation by one journal
        # object never shifts the positions another object has reserved.
        self.slots: dict[int, _MemorySlot] = {}
        self.lock = threading.Lock()
        self.owner: str | None = None
        self.token = 0
        self.expires = 0.0


class InMemoryJournal:
    """A non-durable :class:`Journal` with the same replay, truncate and lease
    semantics (one live runner per run, fenced writes; time from
    ``time.monotonic``).

    :meth:`reopen` returns a new journal object (cursor at 0) over the same
    slots, which is what a rerun of a program sees; it is a separate runner,
    so it can write once this one is closed or its lease ran out.
    """

    def __init__(self, *, lease: float = 30.0) -> None:
        self._run = _MemoryRun()
        self._lease = Lease(check_lease_seconds(lease))
        self._cursor = 0
        self._clears = 0  # how often clear() emptied the run
        self._closed = False

    @property
    def cursor(self) -> int:
        """The position the next :meth:`reserve` starts at (0 for a new object)."""
        return self._cursor

    def reopen(self, *, lease: float | None = None) -> InMemoryJournal:
        other = InMemoryJournal(lease=self._lease.seconds if lease is None else lease)
        other._run = self._run
        return other

    # -- lease ----------------------------------------------------------
    def _fence(self) -> None:
        """Called with the run's lock held, before every write."""
        run, lease, now = self._run, self._lease, time.monotonic()
        if self._closed:
            raise JournalError("in-memory journal is closed")
        if lease.lost is not None:
            raise JournalError(lease.lost)
        if lease.token is None:
            if run.owner is not None and run.owner != lease.owner and run.expires > now:
                raise JournalBusy(
                    busy_message("default", "an in-memory journal", run.owner, run.expires - now)
                )
            run.token += 1
            lease.token = run.token
            _leases.keep_renewing(self)
        elif run.token != lease.token:
            lease.lost = stale_message("default", "an in-memory journal", lease)
            raise JournalError(lease.lost)
        run.owner = lease.owner
        run.expires = now + lease.seconds
        lease.held()

    def _renew_lease(self) -> None:
        with self._run.lock:
            if self._lease.token is not None and self._run.token == self._lease.token:
                self._run.expires = time.monotonic() + self._lease.seconds
                self._lease.held()

    def _prove_lease_before_start(self) -> None:
        """As :meth:`SqlJournal._prove_lease_before_start`: raise JournalError
        if this runner's run was taken over while its lease was overdue."""
        lease = self._lease
        if lease.lost is not None:
            raise JournalError(lease.lost)
        if lease.token is None or self._closed or not lease.overdue():
            return
        with self._run.lock:
            self._fence()

    def _release_lease(self) -> None:
        with self._run.lock:
            if self._lease.token is not None and self._run.token == self._lease.token:
                self._run.owner = None
                self._run.expires = 0.0
        _leases.stop_renewing(self)

    def close(self) -> None:
        """Release the run's lease; further writes raise :class:`JournalError`."""
        if not self._closed:
            self._release_lease()
            self._closed = True

    # -- the contract ---------------------------------------------------
    def reserve(self, call_ids: Sequence[str]) -> Reservation:
        ids = check_ids(call_ids)
        run = self._run
        with run.lock:
            self._fence()
            start = self._cursor
            stored = {
                p: (p, s.call_id, s.status, s.value, s.error)
                for p in range(start, start + len(ids))
                if (s := run.slots.get(p)) is not None
            }
            plan = plan_reserve(start, ids, stored)
            if plan.truncate_from is not None:
                for later in [p for p in run.slots if p >= plan.truncate_from]:
                    del run.slots[later]
            for pos, cid in plan.fresh:
                run.slots[pos] = _MemorySlot(cid, PENDING, None, None)
            self._cursor = start + len(ids)
        return Reservation(
            start, (None if r is None else JournalRecord._make(r) for r in plan.replay)
        )

    def complete(
        self, position: int, call_id: str, status: str, value: object, error: BaseException | None
    ) -> None:
        position, call_id = check_complete(position, call_id, status, error)
        run = self._run
        with run.lock:
            self._fence()
            slot = run.slots.get(position)
            if slot is None or slot.call_id != call_id:
                raise JournalError(f"position {position} is not reserved for call {call_id!r}")
            if slot.status != PENDING:
                raise JournalError(
                    f"call {call_id!r} at position {position} already has outcome {slot.status!r}"
                )
            run.slots[position] = _MemorySlot(call_id, status, value, error)

    def records(self) -> list[tuple[int, str, str]]:
        """``(position, call_id, status)`` of every slot, ``status`` may be 'pending'."""
        with self._run.lock:
            return [(p, s.call_id, s.status) for p, s in sorted(self._run.slots.items())]

    def clear(self) -> None:
        """Delete every slot and reset the cursor."""
        with self._run.lock:
            self._fence()
            self._run.slots.clear()
            self._cursor = 0
            self._clears += 1  # slots handles remember are gone (taut.gather.slots)
