"""PostgresJournal specifics: lazy psycopg import, connection errors, fork,
and two OS processes racing for one run's lease."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

import pytest
from _journals import drop_run, postgres_dsn

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


@pytest.mark.timeout(120)
def test_two_processes_race_for_one_run_exactly_one_wins() -> None:
    dsn, run = postgres_dsn(), f"race-{uuid.uuid4().hex[:8]}"
    script = textwrap.dedent(
        f"""
        import os, sys, time
        from taut.journal import PostgresJournal, JournalBusy
        j = PostgresJournal(os.environ["TAUT_TEST_POSTGRES_DSN"], run={run!r})
        while not os.path.exists(sys.argv[1]):
            time.sleep(0.001)
        try:
            j.reserve(["a"])
        except JournalBusy:
            print("busy", flush=True)
            sys.exit(0)
        print("owner", flush=True)
        sys.stdin.read()  # hold the lease until the test is done
        """
    )
    gate = f"/tmp/taut-race-{uuid.uuid4().hex}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, gate],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        open(gate, "w").close()
        outs = [p.stdout.readline().strip() for p in procs if p.stdout is not None]
        assert sorted(outs) == ["busy", "busy", "busy", "owner"]
    finally:
        for p in procs:
            p.communicate(timeout=60)
        os.remove(gate)
        drop_run(dsn, run)
