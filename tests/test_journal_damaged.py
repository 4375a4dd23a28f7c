"""A journal whose rows were changed by something other than taut (a hand
edit, another program, a table made beforehand with looser columns): reading
such a row raises a JournalError that says the journal is damaged, which row
and which column, never a TypeError or OverflowError from deep inside, and
nothing runs."""

from __future__ import annotations

import re
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _journals import drop_run, postgres_dsn

import taut
from taut.journal import JournalError, PostgresJournal, SqliteJournal


def damaged(table: str, column: str, position: object = None) -> str:
    """The start of the error for ``column`` of a damaged ``table`` row."""
    where = f"the {table} row of run 'default'"
    if position is not None:
        where += f" at position {position!r}"
    return re.escape(f" is damaged: {where} has {column} = ")


def recorded(path: Path) -> None:
    """A journal with call 'a' done at slot 0, its runner gone."""
    with SqliteJournal(path, codec="json") as journal:
        journal.reserve(["a"])
        journal.complete(0, "a", "ok", 1, None)


def tamper(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path)
    with conn:
        for statement in statements:
            conn.execute(statement)
    conn.close()


SLOT = "UPDATE taut_journal SET "
RUNS = "UPDATE taut_runs SET "


@pytest.mark.parametrize(
    ("statement", "column"),
    [
        # Before: run again as if pending, then "already has outcome 'bogus'".
        (SLOT + "status = 'bogus'", "status"),
        # Before: taken for another call id: the journal was truncated there.
        (SLOT + "call_id = x'61'", "call_id"),
        # Before: an unknown codec was decoded as JSON ("JSONDecodeError").
        (SLOT + "codec = 'weird'", "codec"),
        # Before: "TypeError: string argument without an encoding".
        (SLOT + "value = '{\"data\": 1}'", "value"),
        (SLOT + "status = 'error', error = 5", "error"),
    ],
)
def test_a_damaged_slot_row_is_named_and_nothing_runs(
    tmp_path: Path, statement: str, column: str
) -> None:
    path = tmp_path / "j.db"
    recorded(path)
    tamper(path, statement)
    ran: list[int] = []
    with SqliteJournal(path, codec="json") as journal:
        with pytest.raises(JournalError, match=damaged("taut_journal", column, 0)):
            taut.gather([taut.call(ran.append, 1, call_id="a")], journal=journal)
    assert ran == []


def test_a_damaged_position_is_named_by_records(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    recorded(path)
    # Before: ValueError "invalid literal for int() with base 10: 'zero'".
    tamper(path, SLOT + "position = 'zero'")
    with (
        SqliteJournal(path) as journal,
        pytest.raises(
            JournalError,
            match=damaged("taut_journal", "position", "zero") + re.escape("'zero' (str)"),
        ),
    ):
        journal.records()


def test_a_fractional_position_is_damage_not_a_slot(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    recorded(path)
    # Before: ignored by reserve, and records() listed it as slot 0 twice.
    tamper(
        path,
        "INSERT INTO taut_journal (run, position, call_id, status) "
        "VALUES ('default', 0.5, 'b', 'pending')",
    )
    refused = damaged("taut_journal", "position", 0.5) + re.escape("0.5 (float)")
    with SqliteJournal(path) as journal:
        with pytest.raises(JournalError, match=refused):
            journal.reserve(["a"])
        with pytest.raises(JournalError, match=refused):
            journal.records()


@pytest.mark.parametrize(
    ("statement", "column"),
    [
        # Before: TypeError "unsupported operand type(s) for -: 'str' and 'float'".
        (RUNS + "expires_at = 'abc', owner = 'someone'", "expires_at"),
        # Before: TypeError "can only concatenate str (not "int") to str".
        (RUNS + "token = 'zz', owner = NULL", "token"),
        # Before: OverflowError "Python int too large to convert to SQLite INTEGER".
        (RUNS + "token = 9223372036854775807, owner = NULL", "token"),
        (RUNS + "token = -1, owner = NULL", "token"),
        # Before: TypeError from bytes.rsplit (is the holder a dead local process?).
        (RUNS + "owner = x'01', expires_at = 1e300", "owner"),
        # Before: JournalBusy "leased ... for inf s more" / a 309-digit number of seconds.
        (RUNS + "expires_at = 9e999, owner = 'someone'", "expires_at"),
        (RUNS + "expires_at = 1e308, owner = 'vm:1:abc'", "expires_at"),
    ],
)
def test_a_damaged_lease_row_is_named_and_nothing_runs(
    tmp_path: Path, statement: str, column: str
) -> None:
    path = tmp_path / "j.db"
    recorded(path)
    tamper(path, statement)
    ran: list[int] = []
    with SqliteJournal(path) as journal:
        with pytest.raises(JournalError, match=damaged("taut_runs", column)):
            taut.gather([taut.call(ran.append, 1, call_id="b")], journal=journal)
    assert ran == []


@pytest.mark.parametrize(
    ("values", "column"),
    [("'someone', NULL, 0", "token"), ("'someone', 1, NULL", "expires_at")],
)
def test_nulls_in_a_table_made_with_looser_columns_are_damage(
    tmp_path: Path, values: str, column: str
) -> None:
    # CREATE TABLE IF NOT EXISTS keeps a table someone made beforehand without
    # NOT NULL. Before: TypeError ("unsupported operand type(s) for -/+").
    path = tmp_path / "j.db"
    tamper(
        path,
        "CREATE TABLE taut_runs (run TEXT PRIMARY KEY, owner TEXT, token INTEGER, expires_at REAL)",
        f"INSERT INTO taut_runs VALUES ('default', {values})",
    )
    with (
        SqliteJournal(path) as journal,
        pytest.raises(JournalError, match=damaged("taut_runs", column) + "None"),
    ):
        journal.reserve(["a"])


# ------------------------------------------------------------------ PostgreSQL
@pytest.fixture
def pg_run() -> Iterator[tuple[str, str]]:
    dsn = postgres_dsn()
    run = f"test-{uuid.uuid4().hex[:12]}"
    yield dsn, run
    drop_run(dsn, run)


def pg_tamper(dsn: str, statement: str, *params: Any) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement, params)


@pytest.mark.parametrize(
    ("statement", "column"),
    [
        # Before: run again as if pending, then "already has outcome 'bogus'".
        ("UPDATE taut_journal SET status = 'bogus' WHERE run = %s", "status"),
        # Before: an unknown codec was decoded as JSON ("JSONDecodeError").
        ("UPDATE taut_journal SET codec = 'weird' WHERE run = %s", "codec"),
    ],
)
def test_postgres_a_damaged_slot_row_is_named(
    pg_run: tuple[str, str], statement: str, column: str
) -> None:
    dsn, run = pg_run
    with PostgresJournal(dsn, run=run) as journal:
        journal.reserve(["a"])
        journal.complete(0, "a", "ok", 1, None)
    pg_tamper(dsn, statement, run)
    with (
        PostgresJournal(dsn, run=run) as journal,
        pytest.raises(
            JournalError, match=damaged("taut_journal", column, 0).replace("'default'", repr(run))
        ),
    ):
        journal.reserve(["a"])


@pytest.mark.parametrize(
    ("statement", "column"),
    [
        # Before: JournalError "bigint out of range", the row not named.
        ("UPDATE taut_runs SET token = 9223372036854775807, owner = NULL WHERE run = %s", "token"),
        # Before: JournalBusy "leased by another live runner (x) for inf s more".
        ("UPDATE taut_runs SET expires_at = 'infinity', owner = 'x' WHERE run = %s", "expires_at"),
    ],
)
def test_postgres_a_damaged_lease_row_is_named(
    pg_run: tuple[str, str], statement: str, column: str
) -> None:
    dsn, run = pg_run
    with PostgresJournal(dsn, run=run) as journal:
        journal.reserve(["a"])
    pg_tamper(dsn, statement, run)
    with (
        PostgresJournal(dsn, run=run) as journal,
        pytest.raises(
            JournalError, match=damaged("taut_runs", column).replace("'default'", repr(run))
        ),
    ):
        journal.reserve(["a"])
