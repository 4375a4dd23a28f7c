"""SqliteJournal: the embedded durable journal, one SQLite file (WAL mode)."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Callable, TypeVar

from taut._core import MAX_TIMEOUT, clamp_timeout
from taut.journal import lease as _leases
from taut.journal.base import (
    PENDING,
    JournalBusy,
    JournalError,
    JournalRecord,
    Reservation,
    busy_message,
    check_ids,
    check_outcome,
    check_run,
    plan_reserve,
    stale_message,
)
from taut.journal.codec import Codec, check_codec
from taut.journal.lease import Lease, check_lease_seconds, holder_died_here

__all__ = ["SqliteJournal"]

T = TypeVar("T")

_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS taut_journal (
        run      TEXT    NOT NULL,
        position INTEGER NOT NULL,
        call_id  TEXT    NOT NULL,
        status   TEXT    NOT NULL,
        value    BLOB,
        error    BLOB,
        codec    TEXT,
        PRIMARY KEY (run, position)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE IF NOT EXISTS taut_runs (
        run        TEXT    PRIMARY KEY,
        owner      TEXT,
        token      INTEGER NOT NULL,
        expires_at REAL    NOT NULL
    ) WITHOUT ROWID
    """,
)


_live: weakref.WeakSet[SqliteJournal] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # Another thread of the parent may have held a journal's lock at the fork;
    # in the child nobody would ever release it.
    for journal in list(_live):
        journal._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class SqliteJournal:
    """A durable :class:`~taut.journal.Journal` in one SQLite file (WAL mode).

    ``run`` names an independent journal inside the file, so one file can hold
    the journals of many agent runs. A run has one live runner at a time (see
    :mod:`taut.journal.lease`): the first write of this object takes the run's
    lease for ``lease`` seconds, renewed in the background while the object is
    open; another live object or process on the same run gets
    :class:`JournalBusy`; ``close()`` and interpreter exit release it.

    ``synchronous="FULL"`` (the default) makes every reservation and outcome
    durable against power loss and OS crashes, not only against the process being
    killed: in WAL mode each commit then costs one fsync of the log, which is
    small next to a tool or model call, and a lost outcome would mean running a
    possibly non-idempotent call twice. ``"NORMAL"`` keeps process-crash safety
    (SIGKILL loses nothing) but may lose the last commits on power loss, where
    those calls then run again; choose it for high-rate journals of idempotent
    calls.

    ``timeout`` is how long a write waits for another process's transaction
    (``None``: up to ``taut.MAX_TIMEOUT``); opening a new file, creating the
    schema and every write retry "database is locked" until it runs out.

    ``codec="pickle"`` (the default here) stores any picklable value: the
    file is trusted local state, exactly like the program's own code; never
    point a pickle journal at a file someone else can write. ``codec="json"``
    stores data only (see :mod:`taut.journal.codec`).

    One connection is shared by all threads behind a lock (calls complete on
    worker threads); a forked child opens its own connection and writes as the
    same runner.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        run: str = "default",
        synchronous: str = "FULL",
        timeout: float | None = 5.0,
        lease: float = 30.0,
        codec: str = "pickle",
    ) -> None:
        if not isinstance(synchronous, str) or synchronous.upper() not in (
            "FULL",
            "NORMAL",
            "EXTRA",
        ):
            raise ValueError(
                f"synchronous must be 'FULL', 'NORMAL' or 'EXTRA', got {synchronous!r}"
            )
        self._run = check_run(run)
        clamped = clamp_timeout(timeout, name="timeout")
        self._timeout = MAX_TIMEOUT if clamped is None else clamped
        self._lease = Lease(check_lease_seconds(lease))
        self._codec = Codec(check_codec(codec))
        self._path = os.fspath(path)
        self._synchronous = synchronous.upper()
        self._cursor = 0
        # Re-entrant so reserve() can hold it across the transaction and the cursor
        # update: two threads reserving at once must get different positions.
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._closed = False
        self._conn: sqlite3.Connection | None = None
        with self._lock:
            self._connect()
        _live.add(self)

    @property
    def path(self) -> str:
        return self._path

    @property
    def run(self) -> str:
        return self._run

    @property
    def cursor(self) -> int:
        """The position the next :meth:`reserve` starts at (0 for a new object)."""
        return self._cursor

    def __repr__(self) -> str:
        return f"SqliteJournal({self._path!r}, run={self._run!r}, cursor={self._cursor})"

    # -- connection ----------------------------------------------------
    def _retry_busy(self, action: str, attempt: Callable[[], T]) -> T:
        """Run ``attempt`` until it is not refused with "database is locked" or
        the busy timeout has run out. SQLite's own busy handler does not cover
        every case: switching a new file to WAL and a read that must recover
        the WAL index fail at once while another process is doing the same."""
        give_up = time.monotonic() + self._timeout
        pause = 0.001
        while True:
            try:
                return attempt()
            except sqlite3.Error as exc:
                if not _is_busy(exc) or time.monotonic() >= give_up:
                    raise JournalError(f"cannot {action} {self._path!r}: {exc}") from exc
            time.sleep(min(pause, max(give_up - time.monotonic(), 0.0)))
            pause = min(pause * 2, 0.05)

    def _connect(self) -> sqlite3.Connection:
        def attempt() -> sqlite3.Connection:
            conn = sqlite3.connect(
                self._path,
                timeout=self._timeout,
                isolation_level=None,  # we issue BEGIN IMMEDIATE / COMMIT ourselves
                check_same_thread=False,  # guarded by self._lock
            )
            try:
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise JournalError(f"cannot switch {self._path!r} to WAL mode (got {mode!r})")
                conn.execute(f"PRAGMA synchronous={self._synchronous}")
                conn.execute("BEGIN IMMEDIATE")
                for statement in _SCHEMA:
                    conn.execute(statement)
                columns = {row[1] for row in conn.execute("PRAGMA table_info(taut_journal)")}
                if "codec" not in columns:  # a file written before codecs: its rows are pickle
                    conn.execute("ALTER TABLE taut_journal ADD COLUMN codec TEXT")
                conn.execute("COMMIT")
            except BaseException:
                conn.close()
                raise
            return conn

        try:
            self._conn = self._retry_busy("open journal", attempt)
        except JournalError:
            raise
        except sqlite3.Error as exc:  # pragma: no cover - _retry_busy converts these
            raise JournalError(f"cannot open journal {self._path!r}: {exc}") from exc
        return self._conn

    def _connection(self) -> sqlite3.Connection:
        # Called with self._lock held. A connection inherited through fork must not
        # be used by the child (SQLite's own rule), so the child opens its own.
        if self._closed:
            raise JournalError(f"journal {self._path!r} is closed")
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._conn = None
        if self._conn is None:
            return self._connect()
        return self._conn

    def close(self) -> None:
        """Release the run's lease and close the file; later writes raise."""
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

    def __enter__(self) -> SqliteJournal:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _write(self, action: str, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body(conn)`` in one IMMEDIATE transaction that first checks (or
        takes) this runner's lease; SQLite errors become JournalError."""

        def attempt() -> T:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            had_lease = self._lease.token is not None
            try:
                self._fence(conn)
                result = body(conn)
                conn.execute("COMMIT")
                self._lease.held()  # only a committed write extended the lease
            except BaseException:
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                if not had_lease:
                    self._lease.token = None  # the lease taken here was rolled back
                raise
            return result

        with self._lock:
            return self._retry_busy(f"{action} in journal", attempt)

    # -- lease ----------------------------------------------------------
    def _fence(self, conn: sqlite3.Connection) -> None:
        """Inside a write transaction: take the lease, or prove we still hold it."""
        lease, run, now = self._lease, self._run, time.time()
        if lease.lost is not None:
            raise JournalError(lease.lost)
        if lease.token is not None:
            cur = conn.execute(
                "UPDATE taut_runs SET expires_at = ?, owner = ? WHERE run = ? AND token = ?",
                (now + lease.seconds, lease.owner, run, lease.token),
            )
            if cur.rowcount != 1:
                lease.lost = stale_message(run, f"journal {self._path!r}", lease)
                raise JournalError(lease.lost)
            return
        row = conn.execute(
            "SELECT owner, token, expires_at FROM taut_runs WHERE run = ?", (run,)
        ).fetchone()
        if (
            row is not None
            and row[0] is not None
            and row[0] != lease.owner
            and row[2] > now
            and not holder_died_here(row[0])
        ):
            raise JournalBusy(busy_message(run, f"journal {self._path!r}", row[0], row[2] - now))
        token = (row[1] if row is not None else 0) + 1
        conn.execute(
            "INSERT OR REPLACE INTO taut_runs (run, owner, token, expires_at) VALUES (?, ?, ?, ?)",
            (run, lease.owner, token, now + lease.seconds),
        )
        lease.token = token
        lease.held()
        _leases.keep_renewing(self)

    def _renew_lease(self) -> None:
        def body(conn: sqlite3.Connection) -> None:
            pass  # _fence renews

        with self._lock:
            if self._closed or self._lease.token is None or self._lease.lost is not None:
                return
            self._write("renew the lease", body)

    def _release_lease(self) -> None:
        _leases.stop_renewing(self)
        lease = self._lease
        with self._lock:
            if lease.token is None or lease.lost is not None or lease.pid != os.getpid():
                return

            def attempt() -> None:
                conn = self._connection()
                conn.execute(
                    "UPDATE taut_runs SET owner = NULL, expires_at = 0 WHERE run = ? AND token = ?",
                    (self._run, lease.token),
                )

            self._retry_busy("release the lease in journal", attempt)
            lease.lost = f"journal {self._path!r} run {self._run!r}: the lease was released"

    # -- the contract ---------------------------------------------------
    def reserve(self, call_ids: Sequence[str]) -> Reservation:
        ids = check_ids(call_ids)
        run = self._run

        def body(conn: sqlite3.Connection) -> Reservation:
            rows = conn.execute(
                "SELECT position, call_id, status, codec, value, error FROM taut_journal "
                "WHERE run = ? AND position >= ? AND position < ? ORDER BY position",
                (run, start, start + len(ids)),
            ).fetchall()
            plan = plan_reserve(start, ids, {row[0]: row for row in rows})
            if plan.truncate_from is not None:
                conn.execute(
                    "DELETE FROM taut_journal WHERE run = ? AND position >= ?",
                    (run, plan.truncate_from),
                )
            if plan.fresh:
                conn.executemany(
                    "INSERT OR REPLACE INTO taut_journal (run, position, call_id, status) "
                    "VALUES (?, ?, ?, ?)",
                    [(run, pos, cid, PENDING) for pos, cid in plan.fresh],
                )
            return Reservation(start, (None if r is None else self._record(r) for r in plan.replay))

        # The lock spans reading the cursor, the transaction and advancing the
        # cursor: that is what makes the returned slots this caller's own.
        with self._lock:
            start = self._cursor
            out = self._write("reserve slots", body)
            self._cursor = start + len(ids)  # only once the transaction committed
            return out

    def _record(self, row: tuple[Any, ...]) -> JournalRecord:
        position, call_id, status, codec, value, error = row
        try:
            py_value, py_error = self._codec.load(codec, position, call_id, value, error)
        except JournalError as exc:
            raise JournalError(f"{exc} (journal {self._path!r})") from exc.__cause__
        return JournalRecord(position, call_id, status, py_value, py_error)

    def complete(
        self,
        position: int,
        call_id: str,
        status: str,
        value: object,
        error: BaseException | None,
    ) -> None:
        check_outcome(status, error)
        value_blob = self._codec.dump_value(position, call_id, value)
        error_blob = self._codec.dump_error(error)
        run, codec = self._run, self._codec.name

        def body(conn: sqlite3.Connection) -> None:
            cur = conn.execute(
                "UPDATE taut_journal SET status = ?, value = ?, error = ?, codec = ? "
                "WHERE run = ? AND position = ? AND call_id = ? AND status = ?",
                (status, value_blob, error_blob, codec, run, position, call_id, PENDING),
            )
            if cur.rowcount == 1:
                return
            row = conn.execute(
                "SELECT call_id, status FROM taut_journal WHERE run = ? AND position = ?",
                (run, position),
            ).fetchone()
            if row is None or row[0] != call_id:
                raise JournalError(
                    f"position {position} of journal {self._path!r} is not reserved for "
                    f"call {call_id!r}"
                )
            raise JournalError(
                f"call {call_id!r} at position {position} already has outcome {row[1]!r}"
            )

        self._write("record an outcome", body)

    def records(self) -> list[tuple[int, str, str]]:
        """``(position, call_id, status)`` of every slot of this run (incl. 'pending')."""

        def attempt() -> list[Any]:
            return (
                self._connection()
                .execute(
                    "SELECT position, call_id, status FROM taut_journal WHERE run = ? "
                    "ORDER BY position",
                    (self._run,),
                )
                .fetchall()
            )

        with self._lock:
            rows = self._retry_busy("read journal", attempt)
        return [(int(p), str(c), str(s)) for p, c, s in rows]

    def clear(self) -> None:
        """Delete every slot of this run and reset the cursor."""

        def body(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM taut_journal WHERE run = ?", (self._run,))

        with self._lock:
            self._write("clear", body)
            self._cursor = 0
