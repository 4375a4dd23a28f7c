"""PostgresJournal specifics: lazy psycopg import, connection errors, fork,
and two OS processes racing for one run's lease."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid

import pytest
from _journals import drop_run, postgres_dsn
from _waiting import wait_until

from taut.journal import JournalError, PostgresJournal
from taut.journal import sql as sql_journal


def test_import_taut_does_not_import_psycopg() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import sys, taut; print('psycopg' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert out.strip() == "False"


def test_unreachable_server_is_a_journal_error_without_the_password(tmp_path: object) -> None:
    with pytest.raises(JournalError, match="cannot open the PostgreSQL journal") as info:
        PostgresJournal(f"host={tmp_path} port=1 user=x password=s3cret connect_timeout=2")
    assert "s3cret" not in str(info.value)
    with pytest.raises(TypeError, match="dsn must be a connection string"):
        PostgresJournal(b"host=x")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("dsn", "match"),
    [
        ("not a dsn", r'missing "=" after "\.\.\."'),
        ("postgresql://h/db?x=%zz", r'invalid percent-encoded token: "\.\.\."'),
        # A password typed without "password=" before it is still not shown.
        ("host=h dbname=x s3cret", r'missing "=" after "\.\.\."'),
        # Before: libpq read up to the NUL and connected to /tmp's server.
        ("host=/tmp\x00/elsewhere", r"without NUL .* at index 9"),
        ("host=\ud800", r"lone surrogate at index 5"),
        ("user=x password=s3cret what", r'missing "=" after "\.\.\."'),
        ("postgresql://u:s3cret@h/db?x=%zz", r'invalid percent-encoded token: "\.\.\."'),
        ('password=s3"cret what', r"not shown: it may quote a password"),
    ],
)
def test_a_malformed_dsn_is_refused_up_front_without_the_password(dsn: str, match: str) -> None:
    # Before: psycopg's ProgrammingError from inside (quoting "s3 cret" back),
    # or worse, for a NUL, a connection to another server than the one named.
    with pytest.raises(ValueError, match=r"^dsn must be a PostgreSQL connection string") as info:
        PostgresJournal(dsn)
    assert re.search(match, str(info.value)), info.value
    assert "s3" not in str(info.value) and info.value.__context__ is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.timeout(60)
def test_forked_child_uses_its_own_connection_and_the_parents_survives() -> None:
    dsn, run = postgres_dsn(), f"fork-{uuid.uuid4().hex[:8]}"
    journal = PostgresJournal(dsn, run=run)
    try:
        journal.reserve(["a", "b"])
        parents = journal._conn
        session = parents.info.backend_pid
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            code = 1
            try:
                journal.complete(1, "b", "ok", "from child", None)
                if journal._conn is not parents and parents in sql_journal.inherited:
                    # Even closed in the child, what it inherited must not
                    # end the parent's session.
                    parents.close()
                    code = 0
            except BaseException:
                pass
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        journal.complete(0, "a", "ok", "from parent", None)
        # The parent's session is intact: the same one, not a reconnection.
        assert journal._conn is parents and parents.info.backend_pid == session
        journal.close()
        again = PostgresJournal(dsn, run=run)
        assert [r.value for r in again.reserve(["a", "b"]) if r is not None] == [
            "from parent",
            "from child",
        ]
        again.close()
    finally:
        drop_run(dsn, run)


def test_timeout_is_validated_and_bounds_a_lock_wait() -> None:
    dsn, run = postgres_dsn(), f"lock-{uuid.uuid4().hex[:8]}"
    for bad, error in ((float("nan"), ValueError), (True, TypeError), ("5", TypeError)):
        with pytest.raises(error, match="timeout must"):
            PostgresJournal(dsn, run=run, timeout=bad)  # type: ignore[arg-type]
    huge = PostgresJournal(dsn, run=run, timeout=10**400)  # clamped, not an OverflowError
    huge.close()
    import psycopg

    journal = PostgresJournal(dsn, run=run, timeout=0.5)
    try:
        journal.reserve(["a"])
        with psycopg.connect(dsn) as blocker:  # a transaction left open on the run's row
            blocker.execute("SELECT * FROM taut_runs WHERE run = %s FOR UPDATE", (run,))
            began = time.monotonic()
            with pytest.raises(JournalError, match=r"(statement|lock) timeout"):
                journal.complete(0, "a", "ok", 1, None)
            assert time.monotonic() - began < 20  # bounded by the timeout, not hanging
        journal.complete(0, "a", "ok", 1, None)  # the lock is gone: the write goes through
        assert journal.records() == [(0, "a", "ok")]
    finally:
        journal.close()
        drop_run(dsn, run)


def _terminate_session(dsn: str, journal: PostgresJournal) -> None:
    import psycopg

    pid = journal._conn.info.backend_pid
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        wait_until(
            lambda: (
                admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)
                ).fetchone()
                == (0,)
            )
        )


def test_a_dropped_connection_is_retried_once_on_a_new_session() -> None:
    dsn, run = postgres_dsn(), f"drop-{uuid.uuid4().hex[:8]}"
    journal = PostgresJournal(dsn, run=run)
    try:
        journal.reserve(["a", "b", "c"])
        _terminate_session(dsn, journal)
        journal.complete(0, "a", "ok", 1, None)  # a new session, the same runner
        _terminate_session(dsn, journal)
        # The server is gone for good: the retry fails too, and that reaches the caller.
        journal._dsn = "host=/nonexistent-taut-test user=x connect_timeout=2"
        with pytest.raises(JournalError, match="cannot open"):
            journal.complete(1, "b", "ok", 2, None)
        journal._dsn = dsn  # back: the next write reconnects
        journal.complete(1, "b", "ok", 2, None)
        assert journal.records() == [(0, "a", "ok"), (1, "b", "ok"), (2, "c", "pending")]
    finally:
        journal.close()
        drop_run(dsn, run)


def test_a_write_that_committed_before_the_connection_broke_is_not_refused() -> None:
    # The outcome committed, then the session ended before its answer came:
    # the retry finds it written, by this runner (the lease fences any other).
    dsn, run = postgres_dsn(), f"lost-{uuid.uuid4().hex[:8]}"
    journal = PostgresJournal(dsn, run=run)
    real = journal._write_at_once

    def commits_then_breaks(outcome: dict[str, object]) -> bool:
        assert real(outcome)
        _terminate_session(dsn, journal)
        journal._conn = None
        journal._retrying = True  # what _write_at_once does when its answer is lost
        return False

    try:
        journal.reserve(["a", "b"])
        journal._write_at_once = commits_then_breaks  # type: ignore[method-assign]
        journal.complete(0, "a", "ok", 1, None)
        journal._write_at_once = real  # type: ignore[method-assign]
        assert not journal._retrying
        with pytest.raises(JournalError, match="already has outcome 'ok'"):
            journal.complete(0, "a", "ok", 1, None)  # a real second write is still refused
        assert journal.records() == [(0, "a", "ok"), (1, "b", "pending")]
    finally:
        journal.close()
        drop_run(dsn, run)


@pytest.mark.timeout(60)
def test_a_gather_survives_its_journal_session_being_dropped_mid_batch() -> None:
    import taut

    dsn, run = postgres_dsn(), f"gather-{uuid.uuid4().hex[:8]}"
    journal = PostgresJournal(dsn, run=run)
    runs: list[int] = []

    def call(i: int) -> int:
        runs.append(i)
        if i == 0:
            _terminate_session(dsn, journal)  # while the batch runs
        return i

    try:
        outs = taut.gather([taut.call(call, i) for i in range(3)], journal=journal)
        assert [o.status for o in outs] == ["ok"] * 3
        assert [status for _, _, status in journal.records()] == ["ok"] * 3
        assert sorted(runs) == [0, 1, 2]
    finally:
        journal.close()
        drop_run(dsn, run)
