"""PostgresJournal: the journal shared by a fleet, on PostgreSQL through psycopg 3.

psycopg is imported when the first PostgresJournal is created, so ``import
taut`` never needs it (install it with the ``postgres`` extra).
"""

from __future__ import annotations

import math
import os
import threading
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
from taut.journal.lease import Lease, check_lease_seconds

__all__ = ["PostgresJournal"]

T = TypeVar("T")

_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS taut_journal (
        run      text   NOT NULL,
        position bigint NOT NULL,
        call_id  text   NOT NULL,
        status   text   NOT NULL,
        codec    text,
        value    bytea,
        error    bytea,
        PRIMARY KEY (run, position)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS taut_runs (
        run        text        PRIMARY KEY,
        owner      text,
        token      bigint      NOT NULL,
        expires_at timestamptz NOT NULL
    )
    """,
)
# CREATE TABLE IF NOT EXISTS is not safe against itself: two sessions creating
# the same new table both pass the check, and one fails on the catalog's unique
# index. A transaction-level advisory lock (this key: "taut" in ASCII) orders them.
_SCHEMA_LOCK = 0x74617574

_EXPIRES_IN = "EXTRACT(EPOCH FROM expires_at - clock_timestamp())::float8"

_RENEW = (
    "UPDATE taut_runs SET expires_at = clock_timestamp() + make_interval(secs => %(lease)s),"
    " owner = %(owner)s WHERE run = %(run)s AND token = %(token)s"
)
_SET_OUTCOME = (
    "UPDATE taut_journal SET status = %(status)s, codec = %(codec)s, value = %(value)s,"
    " error = %(error)s WHERE run = %(run)s AND position = %(position)s"
    " AND call_id = %(call_id)s AND status = %(pending)s"
)
# The usual outcome write in ONE statement (one round trip, atomic on its own in
# autocommit mode): the fence renews the lease only while the run still carries
# our token, and the outcome is written only if the fence matched. A concurrent
# takeover locks the same taut_runs row, so the two are ordered either way.
_FENCED_OUTCOME = (
    f"WITH fence AS ({_RENEW} RETURNING 1) {_SET_OUTCOME} AND EXISTS (SELECT 1 FROM fence)"
)

_live: weakref.WeakSet[PostgresJournal] = weakref.WeakSet()


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise ImportError(
            "taut.PostgresJournal needs psycopg 3: pip install 'taut[postgres]' "
            "(or psycopg[binary])"
        ) from exc
    return psycopg


class PostgresJournal:
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
        self._run = check_run(run)
        clamped = clamp_timeout(timeout, name="timeout")
        self._timeout = MAX_TIMEOUT if clamped is None else max(clamped, 0.001)
        self._lease = Lease(check_lease_seconds(lease))
        self._codec = Codec(check_codec(codec))
        self._psycopg = _import_psycopg()
        self._dsn = dsn
        self._where = f"the PostgreSQL journal (run {run!r})"
        self._cursor = 0
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._closed = False
        self._conn: Any = None
        with self._lock:
            self._connect()
        _live.add(self)

    @property
    def run(self) -> str:
        return self._run

    @property
    def cursor(self) -> int:
        """The position the next :meth:`reserve` starts at (0 for a new object)."""
        return self._cursor

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
            "tcp_user_timeout": math.ceil(self._timeout * 1000),
        }
        extra = {k: v for k, v in limits.items() if k not in given}
        try:
            conn = psycopg.connect(self._dsn, autocommit=True, **extra)
        except psycopg.Error as exc:
            raise JournalError(f"cannot open {self._where}: {exc}") from exc
        try:
            millis = str(math.ceil(self._timeout * 1000))
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

    def _connection(self) -> Any:
        # Called with self._lock held.
        if self._closed:
            raise JournalError(f"{self._where} is closed")
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._conn = None  # neutralised by _after_fork_in_child
        if self._conn is None or self._conn.closed:
            return self._connect()
        return self._conn

    def _detach_after_fork(self) -> None:
        # The child shares the parent's socket. Freeing the inherited connection
        # would send PostgreSQL a Terminate message on it and end the *parent's*
        # session; point the child's copy of the descriptor at /dev/null first.
        conn = self._conn
        if conn is None or conn.closed:
            return
        try:
            fd = conn.fileno()
            null = os.open(os.devnull, os.O_RDWR)
            try:
                os.dup2(null, fd)
            finally:
                os.close(null)
        except Exception:
            pass
        _orphans.append(conn)  # never freed while the child runs
        self._conn = None
        self._lock = threading.RLock()

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

    def __enter__(self) -> PostgresJournal:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _execute(self, action: str, body: Callable[[Any], T], *, fenced: bool = True) -> T:
        """Run ``body(conn)`` in one transaction that first checks (or takes)
        this runner's lease; psycopg errors become JournalError."""
        psycopg = self._psycopg
        with self._lock:
            conn = self._connection()
            had_lease = self._lease.token is not None
            try:
                with conn.transaction():
                    if fenced:
                        self._fence(conn)
                    result = body(conn)
                if fenced:
                    self._lease.held()  # only a committed write extended the lease
                return result
            except BaseException as exc:
                if fenced and not had_lease:
                    self._lease.token = None  # the lease taken here was rolled back
                if not isinstance(exc, psycopg.Error):
                    raise
                if conn.broken:
                    self._conn = None  # the next call reconnects
                raise JournalError(f"cannot {action} in {self._where}: {exc}") from exc

    # -- lease ----------------------------------------------------------
    def _fence(self, conn: Any) -> None:
        lease, run = self._lease, self._run
        if lease.lost is not None:
            raise JournalError(lease.lost)
        if lease.token is not None:
            cur = conn.execute(_RENEW, self._lease_params())
            if cur.rowcount != 1:
                lease.lost = stale_message(run, self._where, lease)
                raise JournalError(lease.lost)
            return
        conn.execute(
            "INSERT INTO taut_runs (run, owner, token, expires_at) VALUES (%s, NULL, 0, 'epoch')"
            " ON CONFLICT (run) DO NOTHING",
            (run,),
        )
        owner, expires_in = conn.execute(
            f"SELECT owner, {_EXPIRES_IN} FROM taut_runs WHERE run = %s FOR UPDATE", (run,)
        ).fetchone()
        if (
            owner is not None
            and owner != lease.owner
            and expires_in > 0
            and not _leases.holder_died_here(owner)
        ):
            raise JournalBusy(busy_message(run, self._where, owner, expires_in))
        (token,) = conn.execute(
            "UPDATE taut_runs SET owner = %s, token = token + 1,"
            " expires_at = clock_timestamp() + make_interval(secs => %s)"
            " WHERE run = %s RETURNING token",
            (lease.owner, lease.seconds, run),
        ).fetchone()
        lease.token = int(token)
        lease.held()
        _leases.keep_renewing(self)

    def _lease_params(self) -> dict[str, Any]:
        lease = self._lease
        return {
            "lease": lease.seconds,
            "owner": lease.owner,
            "run": self._run,
            "token": lease.token,
        }

    def _renew_lease(self) -> None:
        with self._lock:
            if self._closed or self._lease.token is None or self._lease.lost is not None:
                return
            self._execute("renew the lease", lambda conn: None)

    def _release_lease(self) -> None:
        _leases.stop_renewing(self)
        lease = self._lease
        with self._lock:
            if lease.token is None or lease.lost is not None or lease.pid != os.getpid():
                return

            def body(conn: Any) -> None:
                conn.execute(
                    "UPDATE taut_runs SET owner = NULL, expires_at = 'epoch'"
                    " WHERE run = %s AND token = %s",
                    (self._run, lease.token),
                )

            self._execute("release the lease", body, fenced=False)
            lease.lost = f"{self._where}: the lease was released"

    # -- the contract ---------------------------------------------------
    def reserve(self, call_ids: Sequence[str]) -> Reservation:
        ids = check_ids(call_ids)
        run = self._run

        def body(conn: Any) -> Reservation:
            rows = conn.execute(
                "SELECT position, call_id, status, codec, value, error FROM taut_journal"
                " WHERE run = %s AND position >= %s AND position < %s ORDER BY position",
                (run, start, start + len(ids)),
            ).fetchall()
            plan = plan_reserve(start, ids, {row[0]: row for row in rows})
            if plan.truncate_from is not None:
                conn.execute(
                    "DELETE FROM taut_journal WHERE run = %s AND position >= %s",
                    (run, plan.truncate_from),
                )
            if plan.fresh:
                # One statement for the whole batch, whatever its size.
                conn.execute(
                    "INSERT INTO taut_journal (run, position, call_id, status)"
                    " SELECT %s, p, c, %s FROM unnest(%s::bigint[], %s::text[]) AS t(p, c)"
                    " ON CONFLICT (run, position) DO UPDATE SET call_id = EXCLUDED.call_id,"
                    " status = EXCLUDED.status, codec = NULL, value = NULL, error = NULL",
                    (run, PENDING, [p for p, _ in plan.fresh], [c for _, c in plan.fresh]),
                )
            return Reservation(start, (None if r is None else self._record(r) for r in plan.replay))

        # The lock spans reading the cursor, the transaction and advancing the
        # cursor: that is what makes the returned slots this caller's own.
        with self._lock:
            start = self._cursor
            out = self._execute("reserve slots", body)
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
        self,
        position: int,
        call_id: str,
        status: str,
        value: object,
        error: BaseException | None,
    ) -> None:
        check_outcome(status, error)
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
        with self._lock:
            if (
                self._lease.token is not None
                and self._lease.lost is None
                and self._fast_write(outcome)
            ):
                return

        def body(conn: Any) -> None:
            # The first write (it takes the lease), or the fast write did not
            # match: this finds out why, in one transaction, or writes after all.
            if conn.execute(_SET_OUTCOME, outcome).rowcount == 1:
                return
            row = conn.execute(
                "SELECT call_id, status FROM taut_journal WHERE run = %s AND position = %s",
                (run, position),
            ).fetchone()
            if row is None or row[0] != call_id:
                raise JournalError(
                    f"position {position} of {self._where} is not reserved for call {call_id!r}"
                )
            raise JournalError(
                f"call {call_id!r} at position {position} already has outcome {row[1]!r}"
            )

        self._execute("record an outcome", body)

    def _fast_write(self, outcome: dict[str, Any]) -> bool:
        psycopg = self._psycopg
        conn = self._connection()
        try:
            cur = conn.execute(_FENCED_OUTCOME, {**outcome, **self._lease_params()})
        except psycopg.Error as exc:
            if conn.broken:
                self._conn = None  # the next call reconnects
            raise JournalError(f"cannot record an outcome in {self._where}: {exc}") from exc
        if cur.rowcount == 1:
            self._lease.held()
            return True
        return False

    def records(self) -> list[tuple[int, str, str]]:
        """``(position, call_id, status)`` of every slot of this run (incl. 'pending')."""

        def body(conn: Any) -> list[Any]:
            return list(
                conn.execute(
                    "SELECT position, call_id, status FROM taut_journal WHERE run = %s"
                    " ORDER BY position",
                    (self._run,),
                ).fetchall()
            )

        rows = self._execute("read", body, fenced=False)
        return [(int(p), str(c), str(s)) for p, c, s in rows]

    def clear(self) -> None:
        """Delete every slot of this run and reset the cursor."""

        def body(conn: Any) -> None:
            conn.execute("DELETE FROM taut_journal WHERE run = %s", (self._run,))

        with self._lock:
            self._execute("clear", body)
            self._cursor = 0


_orphans: list[Any] = []


def _after_fork_in_child() -> None:
    for journal in list(_live):
        journal._detach_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
