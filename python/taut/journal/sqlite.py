"""SqliteJournal: the embedded durable journal, one SQLite file (WAL mode)."""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Callable, TypeVar

from taut._checks import describe, int_millis
from taut.journal.base import PENDING
from taut.journal.errors import JournalError
from taut.journal.sql import SqlJournal, tables
from taut.journal.sqlite_gate import GatedLock, close_later

__all__ = ["SqliteJournal"]

T = TypeVar("T")

# Expiry is seconds since the epoch (this host's wall clock); WITHOUT ROWID:
# both tables are looked up by their primary key only.
_SCHEMA = tables(
    text="TEXT", integer="INTEGER", blob="BLOB", instant="REAL", options="WITHOUT ROWID"
)

def _identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path``, or None if there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class SqliteJournal(SqlJournal):
    """A durable :class:`~taut.journal.Journal` in one SQLite file (WAL mode).

    ``path`` names the file; ``":memory:"`` is refused (the journal is for
    outliving the process: use :class:`~taut.InMemoryJournal` instead).
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
    same runner. A fork waits until no thread is inside SQLite through a
    journal (:mod:`taut.journal.sqlite_gate`): one caught inside would leave
    the child SQLite's locks held for good.
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
                f"synchronous must be 'FULL', 'NORMAL' or 'EXTRA', got {describe(synchronous)}"
            )
        try:
            fs_path = os.fspath(path)
        except TypeError:
            raise TypeError(
                f"path must name a file (a str or os.PathLike), got {describe(path)}"
            ) from None
        if not fs_path:
            # SQLite would open a temporary database, which WAL mode refuses.
            raise ValueError(f"path must name a file (a str or os.PathLike), got {fs_path!r}")
        if ("\x00" if isinstance(fs_path, str) else b"\x00") in fs_path:
            # No file name holds one (the OS reads C strings).
            raise ValueError(f"path must name a file without NUL ('\\x00'), got {fs_path!r}")
        if fs_path in (":memory:", b":memory:"):
            # Made absolute below, it would quietly become a file of that name;
            # and SQLite's own in-memory database could not do what this class
            # is for: outlive the process, and share the run's lease with others.
            raise ValueError(
                "path must name a file, got ':memory:': a SqliteJournal keeps its "
                "slots in a file that outlives the process and is shared by every "
                "process on the run; use taut.InMemoryJournal() for a journal in "
                "memory, or './:memory:' for a file of that name"
            )
        super().__init__(run=run, timeout=timeout, lease=lease, codec=codec)
        self._path = fs_path
        # Checked at each write: absolute, so a tool that changes the working
        # directory does not make the file look replaced.
        self._abs_path = os.path.abspath(fs_path)
        self._where = f"journal {self._path!r}"
        self._synchronous = synchronous.upper()
        self._conn: sqlite3.Connection | None = None
        self._file: tuple[int, int] | None = None  # (device, inode) of the open file
        with self._lock:
            self._connect()

    def _make_lock(self) -> GatedLock:
        return GatedLock()

    def __del__(self) -> None:
        # Freed without close(): closing here would enter SQLite on whatever
        # thread the collector runs, outside the gate a fork waits on.
        try:
            if self._conn is not None and self._pid == os.getpid():
                close_later(self._conn)
        except Exception:  # half-made, or the interpreter is shutting down
            pass

    @property
    def path(self) -> str:
        return self._path

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
                    raise JournalError(f"cannot {action} {self._where}: {exc}") from exc
            time.sleep(min(pause, max(give_up - time.monotonic(), 0.0)))
            pause = min(pause * 2, 0.05)

    def _connect(self) -> sqlite3.Connection:
        def attempt() -> sqlite3.Connection:
            conn = sqlite3.connect(
                # The absolute path, as _check_file looks at: after a chdir (a
                # tool, a forked child reconnecting) it is still the same file.
                self._abs_path,
                # SQLite's own busy wait takes int milliseconds; the retry
                # loop around it keeps waiting for the whole timeout.
                timeout=int_millis(self._timeout) / 1000,
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

        self._conn = self._retry_busy("open", attempt)
        self._file = _identity(self._abs_path)
        return self._conn

    def _check_file(self) -> None:
        """Inside a write transaction: the path must still name the file the
        connection writes to. SQLite keeps writing to a file deleted (or
        replaced) under it, and those writes would be lost without a word: a
        resumed run would find none of them and run the calls again."""
        if self._file is None or _identity(self._abs_path) != self._file:
            raise JournalError(
                f"{self._where} was deleted or replaced while it was open: what is "
                "written now would be lost; open the journal again"
            )

    def _transaction(self, action: str, body: Callable[[sqlite3.Connection], T]) -> T:
        def attempt() -> T:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")

            def fenced() -> T:
                try:
                    self._check_file()
                    self._fence(conn)
                    result = body(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        try:
                            conn.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass
                    raise
                return result

            return self._lease_kept(fenced)

        with self._lock:
            return self._retry_busy(f"{action} in", attempt)

    def _unfenced(self, action: str, body: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            return self._retry_busy(action, lambda: body(self._connection()))

    # -- the SQLite dialect ----------------------------------------------
    # Lease expiry is read from this host's wall clock: one file, one host.
    def _extend_lease(self, conn: sqlite3.Connection) -> bool:
        lease = self._lease
        cur = conn.execute(
            "UPDATE taut_runs SET expires_at = ?, owner = ? WHERE run = ? AND token = ?",
            (time.time() + lease.seconds, lease.owner, self._run, lease.token),
        )
        return cur.rowcount == 1

    def _take_lease(self, conn: sqlite3.Connection) -> int:
        lease, run, now = self._lease, self._run, time.time()
        row = conn.execute(
            "SELECT owner, token, expires_at FROM taut_runs WHERE run = ?", (run,)
        ).fetchone()
        token = 1
        if row is not None:
            owner, last, expires_in = self._check_lease_row(row[0], row[1], row[2], now)
            self._refuse_if_held(owner, expires_in)
            token = last + 1
        conn.execute(
            "INSERT OR REPLACE INTO taut_runs (run, owner, token, expires_at) VALUES (?, ?, ?, ?)",
            (run, lease.owner, token, now + lease.seconds),
        )
        return token

    _RELEASE = (
        "UPDATE taut_runs SET owner = NULL, expires_at = 0 WHERE run = :run AND token = :token"
    )
    _SELECT_SLOTS = (
        "SELECT position, call_id, status, codec, value, error FROM taut_journal "
        "WHERE run = ? AND position >= ? AND position < ? ORDER BY position"
    )
    _TRUNCATE = "DELETE FROM taut_journal WHERE run = ? AND position >= ?"
    _SET_OUTCOME = (
        "UPDATE taut_journal SET status = :status, value = :value, error = :error, "
        "codec = :codec WHERE run = :run AND position = :position AND call_id = :call_id "
        "AND status = :pending"
    )
    _SELECT_SLOT = "SELECT call_id, status FROM taut_journal WHERE run = ? AND position = ?"
    _SELECT_RECORDS = (
        "SELECT position, call_id, status FROM taut_journal WHERE run = ? ORDER BY position"
    )
    _DELETE_RUN = "DELETE FROM taut_journal WHERE run = ?"

    def _insert_pending(self, conn: sqlite3.Connection, fresh: list[tuple[int, str]]) -> None:
        conn.executemany(
            "INSERT OR REPLACE INTO taut_journal (run, position, call_id, status) "
            "VALUES (?, ?, ?, ?)",
            [(self._run, pos, cid, PENDING) for pos, cid in fresh],
        )
