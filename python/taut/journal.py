"""Durable call journals: finished calls replay instead of running again.

A journal is an ordered list of *slots*, one per durable call, in the order the
calls were gathered. Before anything runs, :meth:`Journal.reserve` claims the next
slots for a batch in one transaction; when a call finishes, :meth:`Journal.complete`
writes its terminal outcome (``ok``, ``error`` or ``timeout``). When the same
program runs again after a crash, each journal object starts again at position 0:

* a slot with the same call id and a terminal outcome *replays* (the call is not
  run again);
* a slot with the same call id that is still pending runs again;
* a different call id means the program took another path: the journal is
  truncated from that position on and the rest is recorded afresh.

``not_started`` and ``cancelled`` are never written; those slots stay pending and
run again on the next attempt.

:class:`SqliteJournal` is the embedded durable implementation; :class:`InMemoryJournal`
has the same semantics without durability (tests, or a process that only wants
replay within itself).

Security: values and errors are stored with :mod:`pickle`, and replay unpickles
them. A journal file is trusted local state, exactly like the program's own code:
never point a journal at a file someone else can write.
"""

from __future__ import annotations

import os
import pickle
import sqlite3
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import Any, NamedTuple, Protocol, runtime_checkable

from taut._checks import check_timeout

__all__ = [
    "TERMINAL_STATUSES",
    "InMemoryJournal",
    "Journal",
    "JournalError",
    "JournalRecord",
    "JournaledError",
    "SqliteJournal",
]

TERMINAL_STATUSES = frozenset({"ok", "error", "timeout"})
_PENDING = "pending"
_PICKLE_PROTOCOL = 5  # readable by every supported CPython (3.8+)


class JournalRecord(NamedTuple):
    """The stored terminal outcome of one durable call."""

    position: int
    call_id: str
    status: str  # 'ok' | 'error' | 'timeout'
    value: object
    error: BaseException | None


@runtime_checkable
class Journal(Protocol):
    """What ``taut.gather(..., journal=...)`` needs from a journal."""

    def reserve(self, call_ids: Sequence[str]) -> list[JournalRecord | None]:
        """In ONE transaction, reserve the next ``len(call_ids)`` slots after those
        already reserved by this journal object (a cursor starting at 0 per object).
        For each position: the same call id with a terminal outcome returns its
        record (replay); the same id still pending returns None (run again); a
        different id truncates the journal from that position on and writes
        pending slots for the rest; no slot writes a pending slot and returns None."""
        ...

    def complete(
        self,
        position: int,
        call_id: str,
        status: str,
        value: object,
        error: BaseException | None,
    ) -> None:
        """Durably write the terminal outcome (``ok``/``error``/``timeout``) of a
        reserved slot. Failures raise; they are never swallowed."""
        ...


class JournalError(RuntimeError):
    """The journal could not be read or written (the call's outcome is not durable)."""


class JournaledError(Exception):
    """Stands in for a call's exception that could not be pickled faithfully.

    ``original_type`` is the qualified name of the original exception type and
    ``message`` its ``str()``.
    """

    def __init__(self, original_type: str, message: str) -> None:
        super().__init__(original_type, message)
        self.original_type = original_type
        self.message = message

    def __str__(self) -> str:
        return f"{self.original_type}: {self.message}"


def _check_ids(call_ids: Sequence[str]) -> list[str]:
    if isinstance(call_ids, str):
        raise TypeError("call_ids must be a sequence of strings, got a single str")
    ids = list(call_ids)
    for cid in ids:
        if not isinstance(cid, str):
            raise TypeError(f"call_ids must be strings, got {cid!r} ({type(cid).__name__})")
    return ids


def _check_outcome(status: str, error: BaseException | None) -> None:
    if status not in TERMINAL_STATUSES:
        raise ValueError(
            f"status must be one of 'ok', 'error', 'timeout' (not_started and cancelled "
            f"are never journaled), got {status!r}"
        )
    if error is not None and not isinstance(error, BaseException):
        raise TypeError(f"error must be an exception or None, got {type(error).__name__}")


def _dump_error(error: BaseException | None) -> bytes | None:
    """Pickle ``error`` so that it also *unpickles* (exceptions with custom
    ``__init__`` signatures often do not); otherwise store a :class:`JournaledError`."""
    if error is None:
        return None
    try:
        data = pickle.dumps(error, protocol=_PICKLE_PROTOCOL)
        pickle.loads(data)
        return data
    except Exception:
        name = f"{type(error).__module__}.{type(error).__qualname__}"
        try:
            message = str(error)
        except Exception:
            message = "<unprintable>"
        return pickle.dumps(JournaledError(name, message), protocol=_PICKLE_PROTOCOL)


def _dump_value(position: int, call_id: str, value: object) -> bytes:
    try:
        return pickle.dumps(value, protocol=_PICKLE_PROTOCOL)
    except Exception as exc:
        raise JournalError(
            f"cannot journal the value of call {call_id!r} at position {position}: "
            f"{type(value).__name__} is not picklable ({exc})"
        ) from exc


# --------------------------------------------------------------------------- in memory
class _MemorySlot(NamedTuple):
    call_id: str
    status: str
    value: object
    error: BaseException | None


class InMemoryJournal:
    """A non-durable :class:`Journal` with the same replay/truncate semantics.

    :meth:`reopen` returns a new journal object (cursor at 0) over the same slots,
    which is what a rerun of a program sees.
    """

    def __init__(self) -> None:
        # Keyed by position (like the SQLite table), so a truncation by one journal
        # object never shifts the positions another object has reserved.
        self._slots: dict[int, _MemorySlot] = {}
        self._lock = threading.Lock()
        self._cursor = 0

    @property
    def cursor(self) -> int:
        """The position the next :meth:`reserve` starts at (0 for a new object)."""
        return self._cursor

    def reopen(self) -> InMemoryJournal:
        other = InMemoryJournal()
        other._slots = self._slots
        other._lock = self._lock
        return other

    def reserve(self, call_ids: Sequence[str]) -> list[JournalRecord | None]:
        ids = _check_ids(call_ids)
        out: list[JournalRecord | None] = []
        with self._lock:
            start = self._cursor
            for offset, cid in enumerate(ids):
                pos = start + offset
                slot = self._slots.get(pos)
                if slot is not None and slot.call_id != cid:
                    for later in [p for p in self._slots if p >= pos]:
                        del self._slots[later]
                    slot = None
                if slot is None:
                    self._slots[pos] = _MemorySlot(cid, _PENDING, None, None)
                    out.append(None)
                elif slot.status in TERMINAL_STATUSES:
                    out.append(JournalRecord(pos, cid, slot.status, slot.value, slot.error))
                else:
                    out.append(None)
            self._cursor = start + len(ids)
        return out

    def complete(
        self,
        position: int,
        call_id: str,
        status: str,
        value: object,
        error: BaseException | None,
    ) -> None:
        _check_outcome(status, error)
        with self._lock:
            slot = self._slots.get(position)
            if slot is None or slot.call_id != call_id:
                raise JournalError(f"position {position} is not reserved for call {call_id!r}")
            if slot.status != _PENDING:
                raise JournalError(
                    f"call {call_id!r} at position {position} already has outcome {slot.status!r}"
                )
            self._slots[position] = _MemorySlot(call_id, status, value, error)

    def records(self) -> list[tuple[int, str, str]]:
        """``(position, call_id, status)`` of every slot, ``status`` may be 'pending'."""
        with self._lock:
            return [(p, s.call_id, s.status) for p, s in sorted(self._slots.items())]


# --------------------------------------------------------------------------- sqlite
_SCHEMA = """
CREATE TABLE IF NOT EXISTS taut_journal (
    run      TEXT    NOT NULL,
    position INTEGER NOT NULL,
    call_id  TEXT    NOT NULL,
    status   TEXT    NOT NULL,
    value    BLOB,
    error    BLOB,
    PRIMARY KEY (run, position)
) WITHOUT ROWID;
"""


_SQLITE_MAX_BUSY_S = (2**31 - 1) / 1000


class SqliteJournal:
    """A durable :class:`Journal` in one SQLite file (WAL mode).

    ``run`` names an independent journal inside the file, so one file can hold the
    journals of many agent runs.

    ``synchronous="FULL"`` (the default) makes every reservation and outcome
    durable against power loss and OS crashes, not only against the process being
    killed: in WAL mode each commit then costs one fsync of the log, which is
    small next to a tool or model call, and a lost outcome would mean running a
    possibly non-idempotent call twice. ``"NORMAL"`` keeps process-crash safety
    (SIGKILL loses nothing) but may lose the last commits on power loss, where
    those calls then run again; choose it for high-rate journals of idempotent
    calls.

    ``timeout`` is how long a write waits for another process's lock (seconds,
    through taut's timeout gate; ``None``/``inf`` and anything beyond SQLite's
    own limit of 24.8 days wait that limit).

    One connection is shared by all threads behind a lock (calls complete on
    worker threads); a forked child reopens its own connection. Values and
    errors are pickled: the file is trusted local state (see the module docs).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        run: str = "default",
        synchronous: str = "FULL",
        timeout: float | None = 5.0,
    ) -> None:
        if synchronous.upper() not in ("FULL", "NORMAL", "EXTRA"):
            raise ValueError(
                f"synchronous must be 'FULL', 'NORMAL' or 'EXTRA', got {synchronous!r}"
            )
        if not isinstance(run, str):
            raise TypeError(f"run must be a string, got {type(run).__name__}")
        self._path = os.fspath(path)
        self._run = run
        self._synchronous = synchronous.upper()
        # SQLite's busy wait takes an int of milliseconds (24.8 days at most);
        # sqlite3 silently makes a larger or infinite one 0 (never wait).
        busy = check_timeout(timeout, "timeout")
        self._timeout = _SQLITE_MAX_BUSY_S if busy is None else min(busy, _SQLITE_MAX_BUSY_S)
        self._cursor = 0
        # Re-entrant so reserve() can hold it across the transaction and the cursor
        # update: two threads reserving at once must get different positions.
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._closed = False
        self._conn: sqlite3.Connection | None = None
        with self._lock:
            self._connect()

    @property
    def path(self) -> str:
        return self._path

    @property
    def cursor(self) -> int:
        """The position the next :meth:`reserve` starts at (0 for a new object)."""
        return self._cursor

    def __repr__(self) -> str:
        return f"SqliteJournal({self._path!r}, run={self._run!r}, cursor={self._cursor})"

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self._path,
                timeout=self._timeout,
                isolation_level=None,  # we issue BEGIN IMMEDIATE / COMMIT ourselves
                check_same_thread=False,  # guarded by self._lock
            )
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise JournalError(f"cannot switch {self._path!r} to WAL mode (got {mode!r})")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.execute(_SCHEMA)
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open journal {self._path!r}: {exc}") from exc
        self._conn = conn
        return conn

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
        with self._lock:
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

    def _write(self, action: str, body: Any) -> Any:
        """Run ``body(conn)`` in one IMMEDIATE transaction; errors become JournalError."""
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = body(conn)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                return result
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                raise JournalError(f"cannot {action} in journal {self._path!r}: {exc}") from exc

    def reserve(self, call_ids: Sequence[str]) -> list[JournalRecord | None]:
        ids = _check_ids(call_ids)
        run = self._run

        def body(conn: sqlite3.Connection) -> list[JournalRecord | None]:
            start = self._cursor
            rows = conn.execute(
                "SELECT position, call_id, status, value, error FROM taut_journal "
                "WHERE run = ? AND position >= ? AND position < ? ORDER BY position",
                (run, start, start + len(ids)),
            ).fetchall()
            stored = {row[0]: row for row in rows}
            out: list[JournalRecord | None] = []
            fresh: list[tuple[str, int, str, str]] = []
            truncated = False
            for offset, cid in enumerate(ids):
                pos = start + offset
                row = None if truncated else stored.get(pos)
                if row is not None and row[1] != cid:
                    conn.execute(
                        "DELETE FROM taut_journal WHERE run = ? AND position >= ?", (run, pos)
                    )
                    truncated = True
                    row = None
                if row is None:
                    fresh.append((run, pos, cid, _PENDING))
                    out.append(None)
                elif row[2] in TERMINAL_STATUSES:
                    out.append(self._record(row))
                else:
                    out.append(None)
            if fresh:
                conn.executemany(
                    "INSERT OR REPLACE INTO taut_journal (run, position, call_id, status) "
                    "VALUES (?, ?, ?, ?)",
                    fresh,
                )
            return out

        with self._lock:
            out: list[JournalRecord | None] = self._write("reserve slots", body)
            # Advanced only once the transaction has committed.
            self._cursor += len(ids)
        return out

    def _record(self, row: tuple[Any, ...]) -> JournalRecord:
        position, call_id, status, value, error = row
        try:
            py_value = pickle.loads(value) if value is not None else None
            py_error = pickle.loads(error) if error is not None else None
        except Exception as exc:
            raise JournalError(
                f"cannot replay call {call_id!r} at position {position} from journal "
                f"{self._path!r}: {type(exc).__name__}: {exc}"
            ) from exc
        return JournalRecord(position, call_id, status, py_value, py_error)

    def complete(
        self,
        position: int,
        call_id: str,
        status: str,
        value: object,
        error: BaseException | None,
    ) -> None:
        _check_outcome(status, error)
        value_blob = _dump_value(position, call_id, value)
        error_blob = _dump_error(error)
        run = self._run

        def body(conn: sqlite3.Connection) -> None:
            cur = conn.execute(
                "UPDATE taut_journal SET status = ?, value = ?, error = ? "
                "WHERE run = ? AND position = ? AND call_id = ? AND status = ?",
                (status, value_blob, error_blob, run, position, call_id, _PENDING),
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
        with self._lock:
            conn = self._connection()
            try:
                rows = conn.execute(
                    "SELECT position, call_id, status FROM taut_journal WHERE run = ? "
                    "ORDER BY position",
                    (self._run,),
                ).fetchall()
            except sqlite3.Error as exc:
                raise JournalError(f"cannot read journal {self._path!r}: {exc}") from exc
        return [(int(p), str(c), str(s)) for p, c, s in rows]

    def clear(self) -> None:
        """Delete every slot of this run and reset the cursor."""

        def body(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM taut_journal WHERE run = ?", (self._run,))

        self._write("clear", body)
        with self._lock:
            self._cursor = 0
