"""PostgresJournal specifics: lazy psycopg import, connection errors, fork,
and two OS processes racing for one run's lease."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest
from _journals import drop_run, postgres_dsn
from _waiting import wait_until

from taut.journal import JournalError, PostgresJournal


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


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.timeout(60)
def test_forked_child_uses_its_own_connection_and_the_parents_survives() -> None:
    dsn, run = postgres_dsn(), f"fork-{uuid.uuid4().hex[:8]}"
    journal = PostgresJournal(dsn, run=run)
    try:
        journal.reserve(["a", "b"])
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            code = 0
            try:
                journal.complete(1, "b", "ok", "from child", None)
            except BaseException:
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        journal.complete(0, "a", "ok", "from parent", None)  # the parent's session is intact
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


def test_a_dropped_connection_fails_one_write_and_the_next_reconnects() -> None:
    dsn, run = postgres_dsn(), f"drop-{uuid.uuid4().hex[:8]}"
    import psycopg

    journal = PostgresJournal(dsn, run=run)
    try:
        journal.reserve(["a", "b"])
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
        with pytest.raises(JournalError, match="cannot record an outcome"):
            journal.complete(0, "a", "ok", 1, None)  # the failure reaches the caller
        journal.complete(0, "a", "ok", 1, None)  # a new session, the same runner
        journal.complete(1, "b", "ok", 2, None)
        assert journal.records() == [(0, "a", "ok"), (1, "b", "ok")]
    finally:
        journal.close()
        drop_run(dsn, run)
