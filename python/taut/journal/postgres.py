"""PostgresJournal: the journal shared by a fleet, on PostgreSQL through psycopg 3.

psycopg is imported when the first PostgresJournal is created, so ``import
taut`` never needs it (install it with the ``postgres`` extra).
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Callable, TypeVar

from taut import _lazy_import
from taut._checks import int_millis
from taut.journal.base import PENDING
from taut.journal.errors import JournalError
from taut.journal.sql import SqlJournal, tables

__all__ = ["PostgresJournal"]

T = TypeVar("T")

_SCHEMA = tables(text="text", integer="bigint", blob="bytea", instant="timestamptz")
# CREATE TABLE IF NOT EXISTS is not safe against itself: two sessions creating
# the same new table both pass the check, and one fails on the catalog's unique
# index. A transaction-level advisory lock (this key: "taut" in ASCII) orders them.
_SCHEMA_LOCK = 0x74617574

# Each instant converted on its own: a hand-written 'infinity' then reads as
# a number (refused as damage), where subtracting it fails inside the server.
_EXPIRES_IN = (
    "(EXTRACT(EPOCH FROM expires_at) - EXTRACT(EPOCH FROM clock_timestamp()))::float8"
)

_RENEW = (
    "UPDATE taut_runs SET expires_at = clock_timestamp() + make_interval(secs => %(lease)s),"
    " owner = %(owner)s WHERE run = %(run)s AND token = %(token)s"
)
_OUTCOME_UPDATE = (
    "UPDATE taut_journal SET status = %(status)s, codec = %(codec)s, value = %(value)s,"
    " error = %(error)s WHERE run = %(run)s AND position = %(position)s"
    " AND call_id = %(call_id)s AND status = %(pending)s"
)
# The usual outcome write in ONE statement (one round trip, atomic on its own in
# autocommit mode): the fence renews the lease only while the run still carries
# our token, and the outcome is written only if the fence matched. A concurrent
# takeover locks the same taut_runs row, so the two are ordered either way.
_FENCED_OUTCOME = (
    f"WITH fence AS ({_RENEW} RETURNING 1) {_OUTCOME_UPDATE} AND EXISTS (SELECT 1 FROM fence)"
)

def _import_psycopg() -> Any:
    try:
        # Counted: fork-safe (see taut._lazy_import).
        psycopg = _lazy_import.load("psycopg")
    except ImportError as exc:
        raise ImportError(
            "taut.PostgresJournal needs psycopg 3: pip install 'taut[postgres]' "
            "(or psycopg[binary])"
        ) from exc
    return psycopg


def _check_dsn(psycopg: Any, dsn: str) -> str:
    """``dsn`` if libpq can read it; a ValueError naming it otherwise, which
    never shows a password the DSN holds."""
    if "\x00" in dsn:
        # libpq reads C strings: all after the NUL would be dropped without a
        # word ("host=/a\x00b" connects to /a).
        raise ValueError(
            f"dsn must be a PostgreSQL connection string without NUL ('\\x00'), got one "
            f"with NUL at index {dsn.index(chr(0))}"
        )
    surrogate = next((i for i, ch in enumerate(dsn) if "\ud800" <= ch <= "\udfff"), None)
    if surrogate is not None:  # libpq gets UTF-8, which cannot hold it
        raise ValueError(
            f"dsn must be a PostgreSQL connection string of valid Unicode text, got one "
            f"with a lone surrogate at index {surrogate}"
        )
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
        return dsn
    except psycopg.Error as exc:
        reason = f"libpq cannot read it: {str(exc).strip()}"
    # Raised here, not in the except block: psycopg's exception, which may
    # quote the password, must not ride along as the context. libpq quotes
    # the part of the DSN it could not read, which may be a password, with
    # or without "password=" before it ("host=h s3cret"): never shown.
    if '"' in dsn:  # the quotes cannot be told apart: say nothing of the part
        reason = "libpq cannot read it (its message is not shown: it may quote a password)"
    else:
        reason = re.sub(r'"([^"]*)"', lambda m: m[0] if m[1] == "=" else '"..."', reason)
    raise ValueError(
        f"dsn must be a PostgreSQL connection string ('host=... dbname=...' or "
        f"'postgresql://...'), and {reason}"
    )


class PostgresJournal(SqlJournal):
    """A durable :class:`~taut.journal.Journal` in PostgreSQL, shared by many
    processes on many hosts (the tables ``taut_journal`` and ``taut_runs`` of
    the DSN's database and ``search_path``, created when missing).

    The journal contract of :class:`~taut.SqliteJournal`; a run has one live
    runner at a time (see :mod:`taut.journal.lease`), with lease expiry on the
    server's clock so hosts' clocks never matter. ``codec="json"`` (the
    default) stores data, never code; ``codec="pickle"`` stores any picklable
    value but replaying it runs whatever a writer of the table put there:
    opt in only when everyone who can write the database is trusted (see
    :mod:`taut.journal.codec`).

    ``timeout`` bounds each database operation: connecting, waiting for a
    lock, running a statement, and (over TCP) a server or network that stops
    answering; past it the operation raises :class:`JournalError`. ``None``
    means ``taut.MAX_TIMEOUT``.

    One connection per journal object, shared by its threads behind a lock;
    a forked child opens its own connection and writes as the same runner.
    When the server ends the session (a restart, a proxy cutting an idle
    connection), the operation is run once more on a new connection: a batch
    does not fail for it. Only when that fails too does the caller get the
    :class:`JournalError`.
    """

    def __init__(
        self,
        dsn: str,
        *,
        run: str = "default",
        lease: float = 30.0,
        codec: str = "json",
        timeout: float | None = 30.0,
    ) -> None:
        if not isinstance(dsn, str):
            raise TypeError(f"dsn must be a connection string, got {type(dsn).__name__}")
        super().__init__(run=run, timeout=timeout, lease=lease, codec=codec)
        self._timeout = max(self._timeout, 0.001)
        self._psycopg = _import_psycopg()
        self._dsn = _check_dsn(self._psycopg, dsn)
        self._where = f"the PostgreSQL journal (run {run!r})"
        with self._lock:
            self._connect()

    def __repr__(self) -> str:
        return f"PostgresJournal(run={self._run!r}, cursor={self._cursor})"

    # -- connection ----------------------------------------------------
    def _connect(self) -> Any:
        psycopg = self._psycopg
        given = psycopg.conninfo.conninfo_to_dict(self._dsn)
        limits = {
            # Without these a dead server or network makes a write hang for hours
            # (TCP's own retries); the DSN's own settings win.
            "connect_timeout": max(1, math.ceil(self._timeout)),
            "keepalives_idle": max(1, math.ceil(self._timeout / 3)),
            "keepalives_interval": max(1, math.ceil(self._timeout / 9)),
            "keepalives_count": 3,
            "tcp_user_timeout": int_millis(self._timeout),
        }
        extra = {k: v for k, v in limits.items() if k not in given}
        try:
            conn = psycopg.connect(self._dsn, autocommit=True, **extra)
        except psycopg.Error as exc:
            raise JournalError(f"cannot open {self._where}: {exc}") from exc
        try:
            millis = str(int_millis(self._timeout))  # the server's int milliseconds
            # idle_in_transaction: a runner frozen inside a transaction (a
            # stopped VM) must not hold the run's row lock, and so the run, for ever.
            conn.execute(
                "SELECT set_config('statement_timeout', %s, false),"
                " set_config('lock_timeout', %s, false),"
                " set_config('idle_in_transaction_session_timeout', %s, false)",
                (millis, millis, millis),
            )
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                for statement in _SCHEMA:
                    conn.execute(statement)
        except psycopg.Error as exc:
            conn.close()
            raise JournalError(f"cannot create the tables of {self._where}: {exc}") from exc
        self._conn = conn
        return conn

    def _is_gone(self, conn: Any) -> bool:
        return bool(conn.closed)

    def _set_aside_inherited_connection(self) -> None:
        # The child shares the parent's socket. psycopg does not end a session
        # when a connection made in another process is freed, but close() on
        # it in the child (by code that found it in `inherited`, say) would
        # send PostgreSQL a Terminate message on that socket and end the
        # *parent's* session: point the child's copy of the descriptor at
        # /dev/null first.
        conn = self._conn
        if conn is not None and not conn.closed:
            try:
                fd = conn.fileno()
                null = os.open(os.devnull, os.O_RDWR)
                try:
                    os.dup2(null, fd)
                finally:
                    os.close(null)
            except Exception:
                pass
        super()._set_aside_inherited_connection()

    def _transaction(self, action: str, body: Callable[[Any], T]) -> T:
        return self._execute(f"{action} in", body, fenced=True)

    def _unfenced(self, action: str, body: Callable[[Any], T]) -> T:
        return self._execute(action, body, fenced=False)

    def _execute(self, action: str, body: Callable[[Any], T], *, fenced: bool) -> T:
        psycopg = self._psycopg
        with self._lock:
            try:
                for attempt in (1, 2):
                    conn = self._connection()

                    def transaction(conn: Any = conn) -> T:
                        with conn.transaction():
                            if fenced:
                                self._fence(conn)
                            return body(conn)

                    try:
                        return self._lease_kept(transaction) if fenced else transaction()
                    except psycopg.Error as exc:
                        if not conn.broken:
                            raise JournalError(f"cannot {action} {self._where}: {exc}") from exc
                        self._conn = None  # the next attempt (or call) reconnects
                        if attempt == 2:
                            raise JournalError(f"cannot {action} {self._where}: {exc}") from exc
                        # The server ended the session (a restart, an idle
                        # connection cut by a proxy, pg_terminate_backend): the
                        # transaction was rolled back, or committed just before
                        # the break; run it once more on a new connection
                        # rather than fail the batch.
                        self._retrying = True
                raise AssertionError("unreachable")  # the loop returns or raises
            finally:
                self._retrying = False

    # -- the PostgreSQL dialect ------------------------------------------
    # Lease expiry is read from the server's clock, so hosts' clocks never matter.
    def _extend_lease(self, conn: Any) -> bool:
        return bool(conn.execute(_RENEW, self._lease_params()).rowcount == 1)

    def _take_lease(self, conn: Any) -> int:
        run = self._run
        conn.execute(
            "INSERT INTO taut_runs (run, owner, token, expires_at) VALUES (%s, NULL, 0, 'epoch')"
            " ON CONFLICT (run) DO NOTHING",
            (run,),
        )
        row = conn.execute(
            f"SELECT owner, token, {_EXPIRES_IN} FROM taut_runs WHERE run = %s FOR UPDATE", (run,)
        ).fetchone()
        owner, _, expires_in = self._check_lease_row(row[0], row[1], row[2], 0.0)
        self._refuse_if_held(owner, expires_in)
        (token,) = conn.execute(
            "UPDATE taut_runs SET owner = %s, token = token + 1,"
            " expires_at = clock_timestamp() + make_interval(secs => %s)"
            " WHERE run = %s RETURNING token",
            (self._lease.owner, self._lease.seconds, run),
        ).fetchone()
        return int(token)

    _RELEASE = (
        "UPDATE taut_runs SET owner = NULL, expires_at = 'epoch'"
        " WHERE run = %(run)s AND token = %(token)s"
    )
    _SELECT_SLOTS = (
        "SELECT position, call_id, status, codec, value, error FROM taut_journal"
        " WHERE run = %s AND position >= %s AND position < %s ORDER BY position"
    )
    _TRUNCATE = "DELETE FROM taut_journal WHERE run = %s AND position >= %s"
    _SET_OUTCOME = _OUTCOME_UPDATE
    _SELECT_SLOT = "SELECT call_id, status FROM taut_journal WHERE run = %s AND position = %s"
    _SELECT_RECORDS = (
        "SELECT position, call_id, status FROM taut_journal WHERE run = %s ORDER BY position"
    )
    _DELETE_RUN = "DELETE FROM taut_journal WHERE run = %s"

    def _insert_pending(self, conn: Any, fresh: list[tuple[int, str]]) -> None:
        # One statement for the whole batch, whatever its size.
        conn.execute(
            "INSERT INTO taut_journal (run, position, call_id, status)"
            " SELECT %s, p, c, %s FROM unnest(%s::bigint[], %s::text[]) AS t(p, c)"
            " ON CONFLICT (run, position) DO UPDATE SET call_id = EXCLUDED.call_id,"
            " status = EXCLUDED.status, codec = NULL, value = NULL, error = NULL",
            (self._run, PENDING, [p for p, _ in fresh], [c for _, c in fresh]),
        )

    def _write_at_once(self, outcome: dict[str, Any]) -> bool:
        """The usual outcome write, once the lease is held: one round trip
        (:data:`_FENCED_OUTCOME`). False when it did not match (or no lease
        is held yet): the caller's transaction then takes the lease or finds
        out why."""
        psycopg = self._psycopg
        with self._lock:
            if self._lease.token is None or self._lease.lost is not None:
                return False
            conn = self._connection()
            try:
                cur = conn.execute(_FENCED_OUTCOME, {**outcome, **self._lease_params()})
            except psycopg.Error as exc:
                if conn.broken:
                    # The session ended: _transaction retries on a new
                    # connection (and knows the write may have committed).
                    self._conn = None
                    self._retrying = True
                    return False
                raise JournalError(
                    f"cannot {self._what_is_recorded(outcome)} in {self._where}: {exc}"
                ) from exc
            if cur.rowcount == 1:
                self._lease.held()
                return True
            return False
