"""Journal factories for the contract suite: one storage per test, a new
journal object (a new runner, as a rerun of the program is) per call.

PostgreSQL: the server named by ``TAUT_TEST_POSTGRES_DSN`` (``scripts/postgres.sh``
starts a throw-away one; ``.ci/run`` and ``scripts/test.sh`` do it for you).
Without it the PostgreSQL cases skip, saying so, except under ``CI=true``
where a missing server is a failure.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

from taut.journal import InMemoryJournal, PostgresJournal, SqliteJournal

DSN_VAR = "TAUT_TEST_POSTGRES_DSN"
KINDS = ["memory", "sqlite", "postgres"]


def postgres_dsn() -> str:
    """The test server's DSN, or skip (fail under CI) with the reason."""
    dsn = os.environ.get(DSN_VAR, "").strip()
    if dsn:
        return dsn
    reason = (
        f"{DSN_VAR} is not set: no PostgreSQL server to test against; run "
        f"`scripts/postgres.sh run python -m pytest ...` (or scripts/test.sh) to start one"
    )
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


def drop_run(dsn: str, run: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM taut_journal WHERE run = %s", (run,))
        conn.execute("DELETE FROM taut_runs WHERE run = %s", (run,))


class Store:
    """One journal storage of a given kind; ``open()`` makes a new runner."""

    def __init__(self, kind: str, tmp_path: Path, codec: str | None = None) -> None:
        self.kind = kind
        self.codec = codec
        self.path = tmp_path / "j.db"
        self.run = f"test-{uuid.uuid4().hex[:12]}"
        self.dsn = postgres_dsn() if kind == "postgres" else ""
        self._memory: InMemoryJournal | None = None
        self.opened: list[Any] = []

    def open(self, **kw: Any) -> Any:
        if self.codec is not None and self.kind != "memory":
            kw.setdefault("codec", self.codec)
        journal: Any
        if self.kind == "memory":
            if self._memory is None:
                journal = self._memory = InMemoryJournal(**kw)
            else:
                journal = self._memory.reopen(**kw)
        elif self.kind == "sqlite":
            journal = SqliteJournal(self.path, run=self.run, synchronous="NORMAL", **kw)
        else:
            journal = PostgresJournal(self.dsn, run=self.run, **kw)
        self.opened.append(journal)
        return journal

    def rerun(self, previous: Any, **kw: Any) -> Any:
        """What a rerun of the program sees: the previous runner is gone."""
        previous.close()
        return self.open(**kw)

    def spec(self) -> str:
        """How a subprocess opens this storage (see _journal_batch.py)."""
        if self.kind == "sqlite":
            return f"sqlite:{self.run}:{self.path}"
        if self.kind == "postgres":
            return f"postgres:{self.run}:"
        raise ValueError("an in-memory journal cannot be shared with another process")

    def cleanup(self) -> None:
        for journal in self.opened:
            try:
                journal.close()
            except Exception:
                pass
        if self.kind == "postgres":
            drop_run(self.dsn, self.run)


def store_fixture(kind: str, tmp_path: Path, codec: str | None = None) -> Iterator[Store]:
    store = Store(kind, tmp_path, codec)
    try:
        yield store
    finally:
        store.cleanup()


journal_store = contextlib.contextmanager(store_fixture)


Opener = Callable[..., Any]
