"""What every SQL journal shares: the lease fence, reservations, outcome rows.

:class:`SqlJournal` implements the journal contract over two tables,
``taut_journal`` (one row per slot) and ``taut_runs`` (one row per run: its
lease), for any database. A backend (:mod:`taut.journal.sqlite`,
:mod:`taut.journal.postgres`) brings only what really differs: its SQL
dialect (the statements below, and how a lease is taken and extended against
the database's clock) and its connection handling (connecting, transactions,
retries, fork).
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Callable, ClassVar, TypeVar

from taut._checks import describe
from taut._core import MAX_TIMEOUT, clamp_timeout
from taut.journal import lease as _leases
from taut.journal.base import (
    MAX_INT64,
    PENDING,
    SLOT_STATUSES,
    JournalRecord,
    Reservation,
    check_complete,
    check_ids,
    check_run,
    plan_reserve,
)
from taut.journal.codec import CODECS, Codec, check_codec
from taut.journal.errors import JournalBusy, JournalError, busy_message, stale_message
from taut.journal.lease import Lease, check_lease_seconds

__all__ = ["SqlJournal", "inherited", "tables"]

T = TypeVar("T")

# Every journal not closed yet, for the fork hook at the end of this module.
_live: weakref.WeakSet[SqlJournal] = weakref.WeakSet()

# No lease is longer than MAX_TIMEOUT; twice that leaves room for a clock
# stepped back. An expiry further ahead was not written by a runner.
_LONGEST_EXPIRY = 2 * MAX_TIMEOUT

# Connections a forked child inherited: never used there, and never closed
# while it runs (closing one can end or undo the parent's session: see the
# backends' ``_detach_after_fork``).
inherited: list[Any] = []


def tables(
    *, text: str, integer: str, blob: str, instant: str, options: str = ""
) -> tuple[str, str]:
    """The two tables every SQL journal keeps, in a dialect's column types:
    ``taut_journal``, one row per slot (``value`` and ``error`` as the codec
    wrote them, ``codec`` naming it), and ``taut_runs``, one row per run
    holding its lease. ``instant`` is the type of a lease's expiry."""
    return (
        f"""
        CREATE TABLE IF NOT EXISTS taut_journal (
            run      {text} NOT NULL,
            position {integer} NOT NULL,
            call_id  {text} NOT NULL,
            status   {text} NOT NULL,
            value    {blob},
            error    {blob},
            codec    {text},
            PRIMARY KEY (run, position)
        ) {options}
        """,
        f"""
        CREATE TABLE IF NOT EXISTS taut_runs (
            run        {text} PRIMARY KEY,
            owner      {text},
            token      {integer} NOT NULL,
            expires_at {instant} NOT NULL
        ) {options}
        """,
    )


class SqlJournal:
    """The journal contract over SQL tables; a backend subclasses it.

    The SQL of the backend's dialect, in its placeholder style: positional
    parameters in the order named, named ones (``_SET_OUTCOME``) from the
    outcome mapping built by :meth:`complete`.
    """

    _SELECT_SLOTS: ClassVar[str]  # run, first, end -> position, call_id, status, codec, ...
    _TRUNCATE: ClassVar[str]  # run, position: delete the slots from there on
    _SET_OUTCOME: ClassVar[str]  # named: fill a pending slot (the outcome mapping)
    _SELECT_SLOT: ClassVar[str]  # run, position -> call_id, status
    _SELECT_RECORDS: ClassVar[str]  # run -> position, call_id, status of every slot
    _DELETE_RUN: ClassVar[str]  # run: delete every slot
    _RELEASE: ClassVar[str]  # named (lease params): clear the owner if the token is ours

    _where: str  # "journal '/path'": names the journal in every error

    def __init__(self, *, run: object, timeout: float | None, lease: float, codec: str) -> None:
        self._run = check_run(run)
        clamped = clamp_timeout(timeout, name="timeout")
        self._timeout = MAX_TIMEOUT if clamped is None else clamped
        self._lease = Lease(check_lease_seconds(lease))
        self._codec = Codec(check_codec(codec))
        self._cursor = 0
        self._clears = 0  # how often clear() emptied the run
        # Re-entrant so reserve() can hold it across the transaction and the cursor
        # update: two threads reserving at once must get different positions.
        self._lock = self._make_lock()
        self._pid = os.getpid()
        self._closed = False
        self._conn: Any = None
        # True while a write is retried after the connection broke: the first
        # attempt may have committed before the break (its answer was lost).
        self._retrying = False
        # Known to the fork hook before it has a connection to leave behind.
        _live.add(self)

    @property
    def run(self) -> str:
        return self._run

    @property
    def cursor(self) -> int:
        """The position the next :meth:`reserve` starts at (0 for a new object)."""
        return self._cursor

    # -- what a backend provides -----------------------------------------
    def _make_lock(self) -> AbstractContextManager[object]:
        """The lock every call into the database is made under."""
        return threading.RLock()

    def _connect(self) -> Any:
        """Open the connection (creating the tables when missing) and keep it."""
        raise NotImplementedError

    def _transaction(self, action: str, body: Callable[[Any], T]) -> T:
        """Run ``body(conn)`` in one transaction that first checks (or takes)
        this runner's lease (:meth:`_fence`); database errors become
        ``JournalError("cannot {action} in {where}: ...")``."""
        raise NotImplementedError

    def _unfenced(self, action: str, body: Callable[[Any], T]) -> T:
        """Run ``body(conn)`` without the lease check; database errors become
        ``JournalError("cannot {action} {where}: ...")``."""
        raise NotImplementedError

    def _extend_lease(self, conn: Any) -> bool:
        """Push the run's expiry ahead if it still carries this runner's token."""
        raise NotImplementedError

    def _take_lease(self, conn: Any) -> int:
        """Take the run's lease (:meth:`_refuse_if_held` first): the new token."""
        raise NotImplementedError

    def _insert_pending(self, conn: Any, fresh: list[tuple[int, str]]) -> None:
        """Write pending slots ``(position, call_id)``, replacing what is there."""
        raise NotImplementedError

    def _write_at_once(self, outcome: dict[str, Any]) -> bool:
        """A backend's fast path for an outcome while the lease is held: True
        when it wrote it; False sends it through :meth:`_transaction`."""
        return False

    def _is_gone(self, conn: Any) -> bool:
        """Whether a kept connection can no longer be used (reconnect)."""
        return False

    def _set_aside_inherited_connection(self) -> None:
        """In a forked child: leave the parent's connection unused in
        :data:`inherited`; the next call opens the child's own. A backend
        whose connection must not even be closed in the child makes it
        harmless first, then calls this."""
        if self._conn is not None:
            inherited.append(self._conn)
            self._conn = None

    def _detach_after_fork(self) -> None:
        """The fork hook's part: the connection set aside, and a fresh lock
        (one a thread of the parent held at the fork would never be let go
        in the child)."""
        self._set_aside_inherited_connection()
        self._lock = self._make_lock()

    # -- connection ------------------------------------------------------
    def _connection(self) -> Any:
        # Called with self._lock held. A connection inherited through fork must not
        # be used by the child, so the child opens its own (the fork hook has
        # normally set it aside already; this covers a fork it did not see).
        if self._closed:
            raise JournalError(f"{self._where} is closed")
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._set_aside_inherited_connection()
        if self._conn is None or self._is_gone(self._conn):
            return self._connect()
        return self._conn

    def close(self) -> None:
        """Release the run's lease and the connection; later writes raise."""
        with self._lock:
            if self._closed:
                return
            try:
                self._release_lease()
            except JournalError:
                pass  # the lease runs out by itself
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
            self._closed = True
        _live.discard(self)

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- lease -----------------------------------------------------------
    def _fence(self, conn: Any) -> None:
        """Inside a write transaction: take the lease, or prove we still hold it."""
        lease = self._lease
        if lease.lost is not None:
            raise JournalError(lease.lost)
        if lease.token is not None:
            if not self._extend_lease(conn):
                lease.lost = stale_message(self._run, self._where, lease)
                raise JournalError(lease.lost)
            return
        lease.take_here()
        lease.token = self._take_lease(conn)
        lease.held()
        _leases.keep_renewing(self)

    def _refuse_if_held(self, owner: str | None, expires_in: float) -> None:
        """Raise JournalBusy while another live runner holds the run. A holder
        that died on this host need not be waited out."""
        if (
            owner is not None
            and owner != self._lease.owner
            and expires_in > 0
            and not _leases.holder_died_here(owner)
        ):
            raise JournalBusy(busy_message(self._run, self._where, owner, expires_in))

    def _lease_kept(self, body: Callable[[], T]) -> T:
        """``body()`` (a fenced transaction): only a committed write extended
        the lease; a lease taken by a transaction that failed was never held."""
        had_lease = self._lease.token is not None
        try:
            result = body()
        except BaseException:
            if not had_lease:
                self._lease.token = None  # the lease taken here was rolled back
            raise
        self._lease.held()
        return result

    def _lease_params(self) -> dict[str, Any]:
        lease = self._lease
        return dict(lease=lease.seconds, owner=lease.owner, run=self._run, token=lease.token)

    def _renew_lease(self) -> None:
        with self._lock:
            if self._closed or self._lease.token is None or self._lease.lost is not None:
                return
            self._transaction("renew the lease", lambda conn: None)  # _fence renews

    def _prove_lease_before_start(self) -> None:
        """Called by a batch before each of its calls begins: raise
        JournalError if this runner may no longer hold the run. Free while
        the lease is renewed on time; once it is overdue (see
        :meth:`Lease.overdue`), one renewal proves it, or finds it taken over,
        before a call that would then run next to the new owner's begins."""
        lease = self._lease
        if lease.lost is not None:
            raise JournalError(lease.lost)
        if lease.token is None or not lease.overdue():
            return
        with self._lock:
            if self._closed or lease.pid != os.getpid():
                return  # its writes say so; a forked child writes as the parent's runner
            self._transaction("renew the lease before a call begins", lambda conn: None)

    def _release_lease(self) -> None:
        _leases.stop_renewing(self)
        lease = self._lease
        with self._lock:
            if lease.token is None or lease.lost is not None or lease.pid != os.getpid():
                return
            self._unfenced(
                "release the lease in",
                lambda conn: conn.execute(self._RELEASE, self._lease_params()),
            )
            lease.lost = f"{self._where}: the lease was released"

    # -- rows as stored ----------------------------------------------------
    # Everything read back from the tables is checked before it is used: a row
    # someone else changed (by hand, another program, a table made beforehand
    # with looser columns) must say so, not fail deep inside with a TypeError
    # or OverflowError, nor be taken for something it is not (an unknown
    # status for a pending slot, a blob call id for another call).
    def _damaged(self, row: str, column: str, value: object, expected: str) -> JournalError:
        return JournalError(
            f"{self._where} is damaged: {row} has {column} = {describe(value)} where "
            f"{expected} belongs; it was written by something other than taut: repair or "
            f"delete that row, or restore the journal from a backup"
        )

    def _check_slot(self, row: Sequence[Any]) -> None:
        """A ``taut_journal`` row: ``(position, call_id, status)``, then
        ``codec, value, error`` when they were read too."""
        position, call_id, status = row[:3]
        where = f"the taut_journal row of run {self._run!r} at position {position!r}"
        if type(position) is not int:
            raise self._damaged(where, "position", position, "an integer")
        if not isinstance(call_id, str):
            raise self._damaged(where, "call_id", call_id, "a string")
        if status not in SLOT_STATUSES:
            raise self._damaged(where, "status", status, "'pending', 'ok', 'error' or 'timeout'")
        if len(row) > 3:
            codec, value, error = row[3:6]
            if codec is not None and codec not in CODECS:
                raise self._damaged(where, "codec", codec, "'json', 'pickle' or NULL")
            for column, data in (("value", value), ("error", error)):
                if data is not None and not isinstance(data, (bytes, bytearray, memoryview)):
                    raise self._damaged(where, column, data, "bytes (a BLOB) or NULL")

    def _check_lease_row(
        self, owner: object, token: object, expires: object, now: float
    ) -> tuple[str | None, int, float]:
        """The ``taut_runs`` row of this run as ``(owner, token, seconds
        left)``; ``expires`` and ``now`` are read on one clock (SQLite: this
        host's epoch seconds; PostgreSQL gives the seconds left, and 0)."""
        where = f"the taut_runs row of run {self._run!r}"
        if owner is not None and not isinstance(owner, str):
            raise self._damaged(where, "owner", owner, "a string or NULL")
        # The next runner's token is this one + 1: it must still fit the column.
        if type(token) is not int or not 0 <= token < MAX_INT64:
            raise self._damaged(where, "token", token, "an integer from 0 to 2**63 - 2")
        left = math.nan  # not a number: refused below
        if isinstance(expires, (int, float)) and not isinstance(expires, bool):
            left = expires - now
        if not math.isfinite(left) or left > _LONGEST_EXPIRY:
            raise self._damaged(where, "expires_at", expires, "a time within the longest lease")
        return owner, token, left

    # -- the contract ----------------------------------------------------
    def reserve(self, call_ids: Sequence[str]) -> Reservation:
        ids = check_ids(call_ids)
        run = self._run

        def body(conn: Any) -> Reservation:
            rows = conn.execute(self._SELECT_SLOTS, (run, start, start + len(ids))).fetchall()
            for row in rows:
                self._check_slot(row)
            plan = plan_reserve(start, ids, {row[0]: row for row in rows})
            if plan.truncate_from is not None:
                conn.execute(self._TRUNCATE, (run, plan.truncate_from))
            if plan.fresh:
                self._insert_pending(conn, plan.fresh)
            return Reservation(start, (None if r is None else self._record(r) for r in plan.replay))

        # The lock spans reading the cursor, the transaction and advancing the
        # cursor: that is what makes the returned slots this caller's own.
        with self._lock:
            start = self._cursor
            out = self._transaction("reserve slots", body)
            self._cursor = start + len(ids)  # only once the transaction committed
            return out

    def _record(self, row: tuple[Any, ...]) -> JournalRecord:
        position, call_id, status, codec, value, error = row
        try:
            py_value, py_error = self._codec.load(codec, int(position), call_id, value, error)
        except JournalError as exc:
            raise JournalError(f"{exc} ({self._where})") from exc.__cause__
        return JournalRecord(int(position), call_id, status, py_value, py_error)

    def complete(
        self, position: int, call_id: str, status: str, value: object, error: BaseException | None
    ) -> None:
        position, call_id = check_complete(position, call_id, status, error)
        run = self._run
        outcome = {
            "status": status,
            "codec": self._codec.name,
            "value": self._codec.dump_value(position, call_id, value),
            "error": self._codec.dump_error(error),
            "run": run,
            "position": position,
            "call_id": call_id,
            "pending": PENDING,
        }
        with self._lock:  # a retry after a broken connection spans both steps
            if self._write_at_once(outcome):
                return
            self._transaction(self._what_is_recorded(outcome), self._outcome_body(outcome))

    @staticmethod
    def _what_is_recorded(outcome: dict[str, Any]) -> str:
        """The action an error names: which call, and how big its stored
        outcome is (a value past the database's size limit is refused with
        only "string or blob too big")."""
        size = sum(len(outcome[k]) for k in ("value", "error") if outcome[k] is not None)
        return (
            f"record the outcome of call {outcome['call_id']!r} at position "
            f"{outcome['position']} ({size} bytes)"
        )

    def _outcome_body(self, outcome: dict[str, Any]) -> Callable[[Any], None]:
        run, position, call_id, status = (
            outcome["run"],
            outcome["position"],
            outcome["call_id"],
            outcome["status"],
        )

        def body(conn: Any) -> None:
            if conn.execute(self._SET_OUTCOME, outcome).rowcount == 1:
                return
            # Not written: find out why, in the same transaction.
            row = conn.execute(self._SELECT_SLOT, (run, position)).fetchone()
            if row is None or row[0] != call_id:
                raise JournalError(
                    f"position {position} of {self._where} is not reserved for call {call_id!r}"
                )
            if self._retrying and row[1] == status:
                # Our first attempt committed, then the connection broke before
                # its answer came: the lease (held throughout: the fence in this
                # transaction proved it) lets no other runner write this run.
                return
            raise JournalError(
                f"call {call_id!r} at position {position} already has outcome {row[1]!r}"
            )

        return body

    def records(self) -> list[tuple[int, str, str]]:
        """``(position, call_id, status)`` of every slot of this run (incl. 'pending')."""
        rows = self._unfenced(
            "read", lambda conn: list(conn.execute(self._SELECT_RECORDS, (self._run,)).fetchall())
        )
        for row in rows:
            self._check_slot(row)
        return [(p, c, s) for p, c, s in rows]

    def clear(self) -> None:
        """Delete every slot of this run and reset the cursor."""
        with self._lock:
            self._transaction("clear", lambda conn: conn.execute(self._DELETE_RUN, (self._run,)))
            self._cursor = 0
            self._clears += 1  # slots handles remember are gone (taut.gather.slots)


def _after_fork_in_child() -> None:
    for journal in list(_live):
        try:
            journal._detach_after_fork()
        except Exception:
            # One backend's failure must not leave the journals after it on
            # the parent's connection and lock: this one gets the plain part.
            SqlJournal._detach_after_fork(journal)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
