"""Property test: SqliteJournal and PostgresJournal behave like InMemoryJournal
(the reference) on random programs of reserve / complete / rerun."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from _journals import drop_run, postgres_dsn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taut.journal import InMemoryJournal, JournalError, PostgresJournal, SqliteJournal

IDS = st.sampled_from(["a", "b", "c"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("reserve"), st.lists(IDS, max_size=3)),
        st.tuples(
            st.just("complete"),
            st.integers(0, 6),
            IDS,
            st.sampled_from(["ok", "error", "timeout"]),
            st.integers(-5, 5),
        ),
        st.tuples(st.just("rerun")),
    ),
    max_size=12,
)


def observe(record: Any) -> Any:
    if record is None:
        return None
    return (record.position, record.call_id, record.status, record.value, record.error is None)


def play(open_journal: Any, ops: list[tuple[Any, ...]]) -> list[Any]:
    """Run ``ops``; every result and error class, then the final slots."""
    seen: list[Any] = []
    journal = open_journal()
    for op in ops:
        try:
            if op[0] == "reserve":
                got = journal.reserve(op[1])
                seen.append(("reserved", got.start, [observe(r) for r in got]))
            elif op[0] == "complete":
                _, pos, cid, status, value = op
                error = ValueError(f"v{value}") if status == "error" else None
                journal.complete(pos, cid, status, value if status == "ok" else None, error)
                seen.append("completed")
            else:
                journal.close()
                journal = open_journal()
                seen.append("rerun")
        except JournalError as exc:
            seen.append(("refused", type(exc).__name__))
    seen.append(journal.records())
    journal.close()
    return seen


def reference(ops: list[tuple[Any, ...]]) -> list[Any]:
    storage = InMemoryJournal()  # never writes itself: each reopen is a runner
    return play(storage.reopen, ops)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, codec=st.sampled_from(["json", "pickle"]))
def test_sqlite_behaves_like_the_reference(ops: list[tuple[Any, ...]], codec: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "j.db"
        got = play(lambda: SqliteJournal(path, synchronous="NORMAL", codec=codec), ops)
    assert got == reference(ops)


@pytest.fixture(scope="module")
def dsn() -> str:
    return postgres_dsn()


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=OPS, codec=st.sampled_from(["json", "pickle"]))
def test_postgres_behaves_like_the_reference(
    dsn: str, ops: list[tuple[Any, ...]], codec: str
) -> None:
    run = f"model-{uuid.uuid4().hex[:12]}"
    try:
        got = play(lambda: PostgresJournal(dsn, run=run, codec=codec), ops)
    finally:
        drop_run(dsn, run)
    assert got == reference(ops)
