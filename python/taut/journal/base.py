"""The journal contract, its records and errors, and the in-memory journal.

See :mod:`taut.journal` for the semantics every journal shares.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from typing import NamedTuple, Optional, Protocol, runtime_checkable

from taut.journal import lease as _leases
from taut.journal.lease import Lease, check_lease_seconds

__all__ = [
    "TERMINAL_STATUSES",
    "InMemoryJournal",
    "Journal",
    "JournalBusy",
    "JournalError",
    "JournalRecord",
    "JournaledError",
    "Reservation",
]

TERMINAL_STATUSES = frozenset({"ok", "error", "timeout"})
PENDING = "pending"


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
        reserving on one object at the same moment may mix up their slots."""
        ...

    def complete(
        self, position: int, call_id: str, status: str, value: object, error: BaseException | None
    ) -> None:
        """Durably write the terminal outcome (``ok``/``error``/``timeout``) of a
        reserved slot. Failures raise; they are never swallowed."""
        ...


class JournalError(RuntimeError):
    """The journal could not be read or written (the call's outcome is not durable)."""


class JournalBusy(JournalError):
    """The run is leased by another live runner; retry once it has finished or
    its lease has run out."""


class JournaledError(Exception):
    """Stands in for a call's exception on replay when the exception itself was
    not stored (the ``json`` codec) or could not be pickled faithfully.

    ``original_type`` is the qualified name of the original exception type,
    ``message`` its ``str()`` and ``traceback_text`` the formatted traceback
    of the original failure ("" when unknown).
    """

    def __init__(self, original_type: str, message: str, traceback_text: str = "") -> None:
        super().__init__(original_type, message)
        self.original_type = original_type
        self.message = message
        self.traceback_text = traceback_text

    def __reduce__(self) -> tuple[type[JournaledError], tuple[str, str, str]]:
        return (JournaledError, (self.original_type, self.message, self.traceback_text))

    def __str__(self) -> str:
        return f"{self.original_type}: {self.message}"


def check_ids(call_ids: Sequence[str]) -> list[str]:
    if isinstance(call_ids, str):
        raise TypeError("call_ids must be a sequence of strings, got a single str")
    ids = list(call_ids)
    for cid in ids:
        if not isinstance(cid, str):
            raise TypeError(f"call_ids must be strings, got {cid!r} ({type(cid).__name__})")
    return ids


def check_run(run: object) -> str:
    if not isinstance(run, str):
        raise TypeError(f"run must be a string, got {run!r} ({type(run).__name__})")
    return run


def check_outcome(status: str, error: BaseException | None) -> None:
    if status not in TERMINAL_STATUSES:
        raise ValueError(
            f"status must be one of 'ok', 'error', 'timeout' (not_started and cancelled "
            f"are never journaled), got {status!r}"
        )
    if error is not None and not isinstance(error, BaseException):
        raise TypeError(f"error must be an exception or None, got {type(error).__name__}")


def busy_message(run: str, where: str, owner: str, expires_in: float) -> str:
    return (
        f"run {run!r} of {where} is leased by another live runner ({owner}) for "
        f"{max(expires_in, 0.0):.1f} s more; wait for it to finish, or for its lease to "
        f"run out if it died"
    )


def stale_message(run: str, where: str, lease: Lease) -> str:
    return (
        f"this runner's lease on run {run!r} of {where} ({lease.describe()}) was taken "
        f"over by another runner after it ran out; the write is refused so the new "
        f"owner's state is not clobbered"
    )


# --------------------------------------------------------------------------- in memory
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
            out = Reservation(start)
            for offset, cid in enumerate(ids):
                pos = start + offset
                slot = run.slots.get(pos)
                if slot is not None and slot.call_id != cid:
                    for later in [p for p in run.slots if p >= pos]:
                        del run.slots[later]
                    slot = None
                if slot is None:
                    run.slots[pos] = _MemorySlot(cid, PENDING, None, None)
                    out.append(None)
                elif slot.status in TERMINAL_STATUSES:
                    out.append(JournalRecord(pos, cid, slot.status, slot.value, slot.error))
                else:
                    out.append(None)
            self._cursor = start + len(ids)
        return out

    def complete(
        self, position: int, call_id: str, status: str, value: object, error: BaseException | None
    ) -> None:
        check_outcome(status, error)
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
