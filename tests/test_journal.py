"""Durable call journals: reserve/replay/truncate semantics, durability, crash recovery."""

from __future__ import annotations

import collections
import os
import pickle
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import taut
from taut.journal import (
    InMemoryJournal,
    Journal,
    JournaledError,
    JournalError,
    JournalRecord,
    SqliteJournal,
)

Factory = Callable[[], Any]


@pytest.fixture(params=["sqlite", "memory"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    """Returns a function opening a new journal object over the same storage."""
    opened: list[SqliteJournal] = []
    if request.param == "sqlite":

        def factory() -> Any:
            journal = SqliteJournal(tmp_path / "j.db")
            opened.append(journal)
            return journal

    else:
        first = InMemoryJournal()
        used = [False]

        def factory() -> Any:
            if not used[0]:
                used[0] = True
                return first
            return first.reopen()

    yield factory
    for journal in opened:
        journal.close()


def test_protocol_and_exports(tmp_path: Path) -> None:
    with SqliteJournal(tmp_path / "j.db") as journal:
        assert isinstance(journal, Journal)
    assert isinstance(InMemoryJournal(), Journal)
    assert taut.SqliteJournal is SqliteJournal and taut.JournalRecord is JournalRecord


def test_fresh_reserve_is_all_pending(make: Factory) -> None:
    journal = make()
    assert journal.reserve(["a", "b", "c"]) == [None, None, None]
    assert journal.records() == [(0, "a", "pending"), (1, "b", "pending"), (2, "c", "pending")]
    assert journal.reserve([]) == []


def test_replay_terminal_rerun_pending(make: Factory) -> None:
    journal = make()
    journal.reserve(["a", "b", "c", "d"])
    journal.complete(0, "a", "ok", {"x": [1, 2]}, None)
    journal.complete(1, "b", "error", None, ValueError("bad b"))
    journal.complete(3, "d", "timeout", None, None)
    again = make()
    got = again.reserve(["a", "b", "c", "d"])
    assert got[0] == JournalRecord(0, "a", "ok", {"x": [1, 2]}, None)
    assert got[1] is not None and got[1].status == "error"
    assert isinstance(got[1].error, ValueError) and str(got[1].error) == "bad b"
    assert got[2] is None  # pending: run again
    assert got[3] == JournalRecord(3, "d", "timeout", None, None)
    again.complete(2, "c", "ok", 3, None)
    third = make().reserve(["a", "b", "c", "d"])
    assert all(r is not None for r in third)


def test_cursor_continues_across_reserve_calls(make: Factory) -> None:
    journal = make()
    assert journal.cursor == 0
    journal.reserve(["a", "b"])
    assert journal.cursor == 2
    journal.reserve(["c"])
    assert journal.cursor == 3
    assert make().cursor == 0
    journal.complete(2, "c", "ok", "C", None)
    journal.complete(0, "a", "ok", "A", None)
    again = make()
    first = again.reserve(["a", "b"])
    second = again.reserve(["c"])
    assert first[0] is not None and first[0].value == "A" and first[1] is None
    assert second == [JournalRecord(2, "c", "ok", "C", None)]


def test_mismatch_truncates_from_that_position(make: Factory) -> None:
    journal = make()
    journal.reserve(["a", "b", "c"])
    journal.reserve(["d", "e"])
    for pos, cid in enumerate("abcde"):
        journal.complete(pos, cid, "ok", cid.upper(), None)
    again = make()
    got = again.reserve(["a", "X", "c"])
    assert got[0] is not None and got[0].value == "A"
    # Position 1 differs: it and everything after it (even "c", and the later
    # batch "d", "e") is dropped and recorded afresh.
    assert got[1:] == [None, None]
    assert again.records() == [(0, "a", "ok"), (1, "X", "pending"), (2, "c", "pending")]
    assert again.reserve(["d", "e"]) == [None, None]


def test_mismatch_in_later_batch(make: Factory) -> None:
    journal = make()
    journal.reserve(["a", "b"])
    journal.complete(0, "a", "ok", 1, None)
    journal.complete(1, "b", "ok", 2, None)
    again = make()
    assert again.reserve(["Z"]) == [None]
    assert again.records() == [(0, "Z", "pending")]


def test_complete_validation(make: Factory) -> None:
    journal = make()
    journal.reserve(["a", "b"])
    for status in ("not_started", "cancelled", "pending", "OK"):
        with pytest.raises(ValueError, match="status must be one of"):
            journal.complete(0, "a", status, None, None)
    with pytest.raises(JournalError, match="not reserved for call 'zz'"):
        journal.complete(0, "zz", "ok", None, None)
    with pytest.raises(JournalError, match="not reserved"):
        journal.complete(7, "a", "ok", None, None)
    journal.complete(0, "a", "ok", 1, None)
    with pytest.raises(JournalError, match="already has outcome 'ok'"):
        journal.complete(0, "a", "timeout", None, None)
    with pytest.raises(TypeError, match="call_ids must be"):
        journal.reserve("abc")
    with pytest.raises(TypeError, match="call_ids must be strings"):
        journal.reserve([1])


class Unpicklable(Exception):
    def __reduce__(self) -> Any:
        raise TypeError("no pickling")


def _refuse_to_load(message: str) -> Exception:
    raise RuntimeError(f"cannot rebuild: {message}")


def test_errors_that_do_not_unpickle_become_journaled_errors(tmp_path: Path) -> None:
    # Defined here, at run time: importing dask.distributed installs tblib's
    # pickling support for every exception class that exists at that moment,
    # which would make a module-level class round-trip after all.
    class NeedsTwoArgs(Exception):
        def __reduce__(self) -> Any:
            return (_refuse_to_load, (str(self),))

        def __init__(self, a: int, b: int) -> None:
            super().__init__(f"{a}/{b}")

    journal = SqliteJournal(tmp_path / "j.db")
    journal.reserve(["a", "b"])
    journal.complete(0, "a", "error", None, NeedsTwoArgs(1, 2))
    journal.complete(1, "b", "error", None, Unpicklable("nope"))
    got = SqliteJournal(tmp_path / "j.db").reserve(["a", "b"])
    for record, name, message in ((got[0], "NeedsTwoArgs", "1/2"), (got[1], "Unpicklable", "nope")):
        assert record is not None
        assert isinstance(record.error, JournaledError)
        assert record.error.original_type.endswith(name)
        assert record.error.message == message


def test_unpicklable_value_raises_to_the_caller(tmp_path: Path) -> None:
    journal = SqliteJournal(tmp_path / "j.db")
    journal.reserve(["a"])
    with pytest.raises(JournalError, match="not picklable"):
        journal.complete(0, "a", "ok", threading.Lock(), None)
    assert journal.records() == [(0, "a", "pending")]


def test_write_failure_reaches_the_caller(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    journal = SqliteJournal(path, timeout=0.05)
    journal.reserve(["a"])
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(JournalError, match="database is locked"):
            journal.complete(0, "a", "ok", 1, None)
        with pytest.raises(JournalError, match="database is locked"):
            journal.reserve(["b"])
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    # The failed reserve did not advance the cursor; the failed complete left the slot pending.
    assert journal.reserve(["b"]) == [None]
    assert journal.records() == [(0, "a", "pending"), (1, "b", "pending")]
    journal.complete(0, "a", "ok", 1, None)


def test_corrupt_file_raises(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(JournalError, match="cannot open journal"):
        SqliteJournal(path)


def test_unreadable_stored_value_raises_on_replay(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    journal = SqliteJournal(path)
    journal.reserve(["a"])
    journal.complete(0, "a", "ok", 1, None)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE taut_journal SET value = ?", (b"garbage",))
    with pytest.raises(JournalError, match="cannot replay call 'a'"):
        SqliteJournal(path).reserve(["a"])


def test_closed_journal_raises(tmp_path: Path) -> None:
    journal = SqliteJournal(tmp_path / "j.db")
    journal.close()
    with pytest.raises(JournalError, match="closed"):
        journal.reserve(["a"])


def test_wal_mode_and_synchronous(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    journal = SqliteJournal(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn = journal._conn
    assert conn is not None
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    normal = SqliteJournal(path, synchronous="normal")
    assert normal._conn is not None
    assert normal._conn.execute("PRAGMA synchronous").fetchone()[0] == 1
    with pytest.raises(ValueError, match="synchronous must be"):
        SqliteJournal(path, synchronous="OFF")


def test_runs_are_independent(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    one = SqliteJournal(path, run="one")
    two = SqliteJournal(path, run="two")
    one.reserve(["a"])
    two.reserve(["b"])
    one.complete(0, "a", "ok", 1, None)
    assert SqliteJournal(path, run="two").reserve(["b"]) == [None]
    assert SqliteJournal(path, run="one").reserve(["a"])[0] is not None
    one.clear()
    assert one.records() == []
    assert two.records() == [(0, "b", "pending")]


def test_parallel_completions_and_reservations(make: Factory) -> None:
    journal = make()
    n = 200
    ids = [f"c{i}" for i in range(n)]
    journal.reserve(ids)
    errors: list[BaseException] = []

    def finish(i: int) -> None:
        try:
            journal.complete(i, ids[i], "ok", i * 2, None)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=finish, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    got = make().reserve(ids)
    assert [r.value for r in got if r is not None] == [i * 2 for i in range(n)]
    # Reservations from many threads never hand out the same position twice.
    other = make()
    other.reserve(ids)
    positions: list[int] = []
    lock = threading.Lock()

    def grab(k: int) -> None:
        other.reserve([f"x{k}"])
        with lock:
            positions.append(len(positions))

    threads = [threading.Thread(target=grab, args=(k,)) for k in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = other.records()
    assert len(records) == n + 20
    assert sorted(p for p, _, _ in records) == list(range(n + 20))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.timeout(60)
def test_forked_child_opens_its_own_connection(tmp_path: Path) -> None:
    journal = SqliteJournal(tmp_path / "j.db")
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
    journal.complete(0, "a", "ok", "from parent", None)
    got = SqliteJournal(tmp_path / "j.db").reserve(["a", "b"])
    assert [r.value for r in got if r is not None] == ["from parent", "from child"]


def test_journal_file_is_pickle_trusted_state_documented() -> None:
    import taut.journal as mod

    assert mod.__doc__ is not None and "trusted local state" in mod.__doc__
    assert "trusted local state" in (SqliteJournal.__doc__ or "")
    assert pickle.loads(pickle.dumps(JournaledError("x.Y", "m"))).message == "m"


# --------------------------------------------------------------------------- crash
BATCH = Path(__file__).with_name("_journal_batch.py")


def executions(counter_dir: Path) -> collections.Counter[str]:
    return collections.Counter(name.split(".")[0] for name in os.listdir(counter_dir))


def run_batch(
    db: Path, counter: Path, n: int, gated_from: int, gate: Path
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(BATCH), str(db), str(counter), str(n), str(gated_from), str(gate)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.timeout(120)
def test_sigkill_halfway_then_rerun(tmp_path: Path) -> None:
    db, counter, gate = tmp_path / "j.db", tmp_path / "counter", tmp_path / "gate"
    counter.mkdir()
    n, gated_from = 40, 20
    ids = [f"call-{i}" for i in range(n)]

    # Run 1: calls 0..19 finish; 20.. block on the gate. Kill it once every call
    # before the gate is done and 4 gated calls are in flight.
    proc = run_batch(db, counter, n, gated_from, gate)
    assert proc.stdout is not None
    done: set[int] = set()
    for line in proc.stdout:
        if line.startswith("done "):
            done.add(int(line.split()[1]))
        if len(done) == gated_from:
            break
    assert done == set(range(gated_from))
    deadline = time.monotonic() + 60
    while sum(executions(counter)[c] for c in ids[gated_from:]) < 4:
        assert time.monotonic() < deadline, "gated calls never started"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    before = executions(counter)
    status = {cid: st for _, cid, st in SqliteJournal(db).records()}
    finished = {cid for cid, st in status.items() if st != "pending"}
    assert finished == set(ids[:gated_from])
    assert len(status) == n  # every slot was reserved before anything ran
    in_flight = {cid for cid in ids[gated_from:] if before[cid]}
    assert len(in_flight) == 4  # started but never journaled: must run again

    # Run 2: the gate is open; finished calls replay, all others execute.
    gate.touch()
    proc = run_batch(db, counter, n, gated_from, gate)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    after = executions(counter)
    for cid in ids[:gated_from]:
        assert after[cid] == 1, f"{cid} ran again although it had finished"
    for cid in ids[gated_from:]:
        assert after[cid] == before[cid] + 1, f"{cid} did not run exactly once more"
    replayed = sorted(
        int(line.split()[1]) for line in out.splitlines() if line.startswith("replay")
    )
    assert replayed == list(range(gated_from))

    # Nothing lost or duplicated: one terminal slot per call, in order, right outcomes.
    journal = SqliteJournal(db)
    records = journal.reserve(ids)
    assert journal.records() == [(i, ids[i], records[i].status) for i in range(n)]  # type: ignore[union-attr]
    for i, record in enumerate(records):
        assert record is not None and record.call_id == ids[i] and record.position == i
        if i % 7 == 3:
            assert record.status == "error" and isinstance(record.error, ValueError)
            assert str(record.error) == f"boom {i}"
        else:
            assert record.status == "ok" and record.value == {"i": i, "square": i * i}

    # Run 3: everything replays; nothing executes.
    proc = run_batch(db, counter, n, gated_from, gate)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert executions(counter) == after
    assert sum(line.startswith("replay") for line in out.splitlines()) == n


def test_two_live_objects_keep_positions(make: Factory) -> None:
    first = make()
    first.reserve(["a", "b", "c"])
    second = make()
    assert second.reserve(["X"]) == [None]  # truncates from 0
    assert first.reserve(["d"]) == [None]  # still position 3, not shifted
    first.complete(3, "d", "ok", 4, None)
    assert first.records() == [(0, "X", "pending"), (3, "d", "ok")]
