"""The journal contract, one suite for InMemoryJournal, SqliteJournal and
PostgresJournal: reserve/replay/truncate, atomic reservations under
concurrency, run leases with fencing, and SIGKILL halfway then rerun."""

from __future__ import annotations

import collections
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _journals import KINDS, Store, journal_store, store_fixture
from _waiting import LONG, wait_until

import taut
from taut.journal import JournalBusy, JournalError, JournalRecord, Reservation
from taut.journal import lease as leases


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_fixture(request.param, tmp_path)


def test_fresh_reserve_is_all_pending(store: Store) -> None:
    journal = store.open()
    got = journal.reserve(["a", "b", "c"])
    assert isinstance(got, Reservation) and got.start == 0 and got.positions == range(3)
    assert got == [None, None, None]
    assert journal.records() == [(0, "a", "pending"), (1, "b", "pending"), (2, "c", "pending")]
    empty = journal.reserve([])
    assert empty == [] and empty.start == 3


def test_replay_terminal_rerun_pending(store: Store) -> None:
    journal = store.open()
    journal.reserve(["a", "b", "c", "d"])
    journal.complete(0, "a", "ok", {"x": [1, 2]}, None)
    journal.complete(1, "b", "error", None, ValueError("bad b"))
    journal.complete(3, "d", "timeout", None, None)
    again = store.rerun(journal)
    got = again.reserve(["a", "b", "c", "d"])
    assert got[0] == JournalRecord(0, "a", "ok", {"x": [1, 2]}, None)
    assert got[1] is not None and got[1].status == "error"
    assert isinstance(got[1].error, Exception) and "bad b" in str(got[1].error)
    assert got[2] is None  # pending: run again
    assert got[3] == JournalRecord(3, "d", "timeout", None, None)
    again.complete(2, "c", "ok", 3, None)
    third = store.rerun(again).reserve(["a", "b", "c", "d"])
    assert all(r is not None for r in third)


def test_cursor_continues_across_reserve_calls(store: Store) -> None:
    journal = store.open()
    assert journal.cursor == 0
    assert journal.reserve(["a", "b"]).start == 0
    assert journal.cursor == 2
    assert journal.reserve(["c"]).start == 2
    assert journal.cursor == 3
    journal.complete(2, "c", "ok", "C", None)
    journal.complete(0, "a", "ok", "A", None)
    again = store.rerun(journal)
    assert again.cursor == 0
    first = again.reserve(["a", "b"])
    second = again.reserve(["c"])
    assert first[0] is not None and first[0].value == "A" and first[1] is None
    assert second == [JournalRecord(2, "c", "ok", "C", None)]


def test_mismatch_truncates_from_that_position(store: Store) -> None:
    journal = store.open()
    journal.reserve(["a", "b", "c"])
    journal.reserve(["d", "e"])
    for pos, cid in enumerate("abcde"):
        journal.complete(pos, cid, "ok", cid.upper(), None)
    again = store.rerun(journal)
    got = again.reserve(["a", "X", "c"])
    assert got[0] is not None and got[0].value == "A"
    # Position 1 differs: it and everything after it (even "c", and the later
    # batch "d", "e") is dropped and recorded afresh.
    assert got[1:] == [None, None]
    assert again.records() == [(0, "a", "ok"), (1, "X", "pending"), (2, "c", "pending")]
    assert again.reserve(["d", "e"]) == [None, None]


def test_complete_validation(store: Store) -> None:
    journal = store.open()
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


class _BrokenRepr:
    """A wrong argument whose own ``__repr__`` raises."""

    def __repr__(self) -> str:
        raise RuntimeError("from the argument's __repr__")


def test_a_wrong_call_id_or_status_with_a_broken_repr_is_refused_by_name(store: Store) -> None:
    journal = store.open()
    # Before: the argument's own RuntimeError, naming no parameter.
    with pytest.raises(TypeError, match=r"call_ids must be strings, got <unrepresentable> \("):
        journal.reserve([_BrokenRepr()])
    journal.reserve(["a"])
    with pytest.raises(ValueError, match=r"status must be one of .*got <unrepresentable> \("):
        journal.complete(0, "a", _BrokenRepr(), None, None)  # type: ignore[arg-type]
    assert journal.records() == [(0, "a", "pending")]


class _HostileText(str):
    """A str subclass whose own text forms raise."""

    def __repr__(self) -> str:
        raise RuntimeError("from the subclass's __repr__")

    __str__ = __format__ = __repr__  # type: ignore[assignment]


def test_str_subclass_run_and_call_ids_are_kept_as_plain_text(tmp_path: Path) -> None:
    # Before: kept as given, so repr(journal) and the storable check's own
    # message ran the subclass's __repr__ (its RuntimeError, naming nothing).
    journal = taut.SqliteJournal(tmp_path / "j.db", run=_HostileText("r1"))
    assert "r1" in repr(journal)
    assert journal.reserve([_HostileText("a")]) == [None]  # nothing recorded yet
    journal.complete(0, _HostileText("a"), "ok", 1, None)
    assert journal.records() == [(0, "a", "ok")] and type(journal.records()[0][1]) is str
    with pytest.raises(ValueError, match=r"^run 'a\\udc80' cannot be journaled"):
        taut.SqliteJournal(tmp_path / "k.db", run=_HostileText("a\udc80"))
    journal.close()


def test_sqlite_arguments_with_a_broken_repr_are_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    for name, error in (("run", TypeError), ("codec", ValueError), ("synchronous", ValueError)):
        with pytest.raises(
            error, match=rf"^{name} must be .*got <unrepresentable> \(_BrokenRepr\)"
        ):
            taut.SqliteJournal(path, **{name: _BrokenRepr()})


@pytest.mark.parametrize(
    ("call_ids", "shown"),
    [
        # Before: a bare "'NoneType' object is not iterable" from inside.
        (None, "got None (NoneType)"),
        (7, "got 7 (int)"),
        # Before: one slot per byte ("call_ids must be strings, got 97").
        (b"ab", "a single one: b'ab' (bytes)"),
        # Before: taken in the set's order, another one in every process.
        ({"a", "b"}, "got a set, which has no order"),
        (frozenset({"a"}), "got a set, which has no order"),
    ],
)
def test_reserve_refuses_call_ids_that_are_not_a_sequence_naming_them(
    store: Store, call_ids: Any, shown: str
) -> None:
    journal = store.open()
    refused = r"^call_ids must be a sequence of strings.*" + re.escape(shown)
    with pytest.raises(TypeError, match=refused):
        journal.reserve(call_ids)
    assert journal.records() == []
    assert list(journal.reserve(("a", "b"))) == [None, None]  # a tuple is fine


def test_reserve_takes_a_dicts_keys_in_their_order(store: Store) -> None:
    # A set to isinstance, but ordered as the keys were put in, the same in
    # every process: refused for a while as "a set, which has no order".
    journal = store.open()
    calls = {"b": 1, "a": 2}
    journal.reserve(calls.keys())
    assert journal.records() == [(0, "b", "pending"), (1, "a", "pending")]


@pytest.mark.parametrize(
    ("position", "error", "shown"),
    [
        # Before: OverflowError from sqlite3 ("too large to convert to SQLite
        # INTEGER"); on PostgreSQL and in memory a JournalError "not reserved".
        (2**63, ValueError, "9223372036854775808 (int)"),
        (2**64, ValueError, "18446744073709551616 (int)"),
        (-1, ValueError, "-1 (int)"),
        (-(2**63) - 1, ValueError, "-9223372036854775809 (int)"),
        # Before: SQLite took True as slot 1 and 0.0 as slot 0; PostgreSQL
        # failed inside the server ("operator does not exist: bigint = boolean").
        (True, TypeError, "True (bool)"),
        (0.0, TypeError, "0.0 (float)"),
        ("x", TypeError, "'x' (str)"),
        (None, TypeError, "None (NoneType)"),
    ],
)
def test_complete_checks_the_position_naming_it(
    store: Store, position: Any, error: type, shown: str
) -> None:
    journal = store.open()
    journal.reserve(["a", "b"])
    with pytest.raises(error, match=r"^position must be an integer .*got " + re.escape(shown)):
        journal.complete(position, "a", "ok", 1, None)
    assert journal.records() == [(0, "a", "pending"), (1, "b", "pending")]


@pytest.mark.parametrize("call_id", [None, 0, b"a"])
def test_complete_checks_the_call_id_naming_it(store: Store, call_id: Any) -> None:
    journal = store.open()
    journal.reserve(["a"])
    # Before: JournalError "position 0 ... is not reserved for call None".
    with pytest.raises(
        TypeError, match=r"^call_id must be a string, got " + re.escape(repr(call_id))
    ):
        journal.complete(0, call_id, "ok", 1, None)


@pytest.mark.parametrize(
    ("call_id", "why"),
    [
        # Before: UnicodeEncodeError from sqlite3 and psycopg (in memory: accepted).
        ("tool-\udc80", r"'\\udc80' at index 5 is a lone surrogate"),
        ("\ud800", r"'\\ud800' at index 0 is a lone surrogate"),
        # Before: PostgreSQL's own error, while SQLite and memory accepted it.
        ("a\x00b", r"NUL \('\\x00'\) at index 1"),
    ],
)
def test_call_ids_a_journal_cannot_store_are_refused_up_front(
    store: Store, call_id: str, why: str
) -> None:
    journal = store.open()
    journal.reserve(["first"])
    with pytest.raises(ValueError, match=r"^call id " + re.escape(repr(call_id)) + ".*" + why):
        journal.reserve(["ok", call_id])
    assert journal.cursor == 1  # nothing reserved, nothing truncated
    assert journal.records() == [(0, "first", "pending")]
    with pytest.raises(ValueError, match=why):
        journal.complete(0, call_id, "ok", 1, None)


def test_a_gather_with_an_unstorable_call_id_runs_nothing(store: Store) -> None:
    ran: list[int] = []
    handles = [taut.call(ran.append, 1), taut.call(ran.append, 2, call_id="tool-\udc80")]
    with pytest.raises(ValueError, match=r"^call id 'tool-\\udc80' cannot be journaled"):
        taut.gather(handles, journal=store.open())
    assert ran == []
    # The handles went cold again: without a journal the id is only a label.
    assert [o.status for o in taut.gather(handles)] == ["ok", "ok"]
    assert sorted(ran) == [1, 2]  # they ran in parallel


@pytest.mark.parametrize("run", ["r\udc80", "r\x00"])
def test_a_run_name_a_journal_cannot_store_is_refused(store: Store, run: str) -> None:
    if store.kind == "memory":
        pytest.skip("an in-memory journal has no run names")
    # Before: UnicodeEncodeError at the first write (PostgreSQL: its NUL error).
    with pytest.raises(ValueError, match=r"^run " + re.escape(repr(run)) + " cannot be journaled"):
        if store.kind == "sqlite":
            taut.SqliteJournal(store.path, run=run)
        else:
            taut.PostgresJournal(store.dsn, run=run)


def test_clear_and_closed(store: Store) -> None:
    journal = store.open()
    journal.reserve(["a"])
    journal.clear()
    assert journal.records() == [] and journal.cursor == 0
    journal.close()
    with pytest.raises(JournalError, match="closed"):
        journal.reserve(["a"])


# --------------------------------------------------------------------------- concurrency
def test_concurrent_reservations_get_their_own_slots(store: Store) -> None:
    # issue 7 §3: the slots a reserve returns are the ones it reserved, even when
    # many threads reserve on one journal object at once.
    journal = store.open()
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for trial in range(20):
            got: dict[int, Reservation] = {}
            barrier = threading.Barrier(4)

            def grab(
                k: int,
                trial: int = trial,
                barrier: threading.Barrier = barrier,
                got: dict[int, Reservation] = got,
            ) -> None:
                barrier.wait()
                got[k] = journal.reserve([f"t{trial}-{k}-{i}" for i in range(3)])

            threads = [threading.Thread(target=grab, args=(k,)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for k, reservation in got.items():
                for offset, pos in enumerate(reservation.positions):
                    journal.complete(pos, f"t{trial}-{k}-{offset}", "ok", k, None)
    finally:
        sys.setswitchinterval(old)
    records = journal.records()
    assert [p for p, _, _ in records] == list(range(20 * 4 * 3))
    assert {s for _, _, s in records} == {"ok"}


@pytest.mark.timeout(600)
def test_concurrent_gathers_on_one_journal_stress(store: Store) -> None:
    # Two gathers at the same moment on one journal object, hundreds of times,
    # with a tiny switch interval: every outcome lands in its own gather's slot,
    # and a rerun replays every call (nothing left pending to run twice).
    trials = 300 if store.kind != "postgres" else 150
    journal = store.open()
    ran = collections.Counter[str]()
    lock = threading.Lock()

    def work(cid: str) -> str:
        with lock:
            ran[cid] += 1
        return cid.upper()

    errors: list[BaseException] = []
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with taut.ThreadPoolExecutor(4) as pool:
            for trial in range(trials):
                barrier = threading.Barrier(2)

                def batch(
                    side: str, trial: int = trial, barrier: threading.Barrier = barrier
                ) -> None:
                    ids = [f"{trial}-{side}-{i}" for i in range(2)]
                    handles = [taut.call(work, cid, call_id=cid) for cid in ids]
                    barrier.wait()
                    try:
                        outs = taut.gather(handles, executor=pool, journal=journal)
                        assert [o.value for o in outs] == [c.upper() for c in ids]
                    except BaseException as exc:
                        errors.append(exc)

                threads = [threading.Thread(target=batch, args=(s,)) for s in "ab"]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    records = journal.records()
    assert len(records) == trials * 4 and {s for _, _, s in records} == {"ok"}
    ids = [cid for _, cid, _ in records]
    again = store.rerun(journal)
    replay = again.reserve(ids)
    assert all(r is not None and r.value == r.call_id.upper() for r in replay)
    assert set(ran.values()) == {1}


# --------------------------------------------------------------------------- leases
def test_second_live_runner_is_busy_promptly(store: Store) -> None:
    first = store.open()
    first.reserve(["a"])
    second = store.open()
    began = time.monotonic()
    with pytest.raises(JournalBusy, match="leased by another live runner") as info:
        second.reserve(["a"])
    assert time.monotonic() - began < LONG / 3  # promptly, not after the lease
    assert isinstance(info.value, JournalError)
    assert second.records() == [(0, "a", "pending")]  # reading needs no lease
    first.complete(0, "a", "ok", 1, None)
    first.close()  # releasing the lease lets the next runner in at once
    assert second.reserve(["a"])[0] is not None


def test_lease_is_renewed_while_the_runner_lives(store: Store) -> None:
    first = store.open(lease=2.0)
    first.reserve(["a"])
    time.sleep(3.0)  # past the lease: only the renewal keeps it
    with pytest.raises(JournalBusy):
        store.open().reserve(["a"])
    first.complete(0, "a", "ok", 1, None)


def test_expired_lease_is_taken_over_and_the_stale_runner_is_fenced(store: Store) -> None:
    stale = store.open(lease=0.3)
    stale.reserve(["a", "b"])
    stale.complete(0, "a", "ok", "A", None)
    leases.stop_renewing(stale)  # as if the runner froze (GC pause, stopped VM)
    fresh = store.open()
    wait_until(lambda: _takes_lease(fresh))
    got = fresh.reserve(["a", "b"])
    assert got[0] is not None and got[0].value == "A" and got[1] is None
    with pytest.raises(JournalError, match="taken over") as info:
        stale.complete(1, "b", "ok", "from the stale runner", None)
    assert not isinstance(info.value, JournalBusy)
    with pytest.raises(JournalError, match="taken over"):
        stale.reserve(["c"])
    fresh.complete(1, "b", "ok", "B", None)
    last = store.rerun(fresh).reserve(["a", "b"])
    assert [r.value for r in last if r is not None] == ["A", "B"]


def _takes_lease(journal: Any) -> bool:
    try:
        journal.reserve([])  # even an empty reservation takes the lease
    except JournalBusy:
        return False
    return True


def test_a_failed_first_write_does_not_leave_a_phantom_lease(store: Store) -> None:
    first = store.open()
    first.reserve(["a"])
    first.complete(0, "a", "ok", 1, None)
    again = store.rerun(first)
    with pytest.raises(JournalError, match="not reserved"):
        again.complete(5, "zz", "ok", 1, None)  # takes the lease, fails, rolls back
    got = again.reserve(["a"])  # neither "taken over" nor busy
    assert got[0] is not None and got[0].value == 1


def test_lease_is_validated(store: Store) -> None:
    for bad in (0, -1, float("nan"), None, float("inf")):
        with pytest.raises(ValueError, match="lease must"):
            store.open(lease=bad)
    with pytest.raises(TypeError, match="lease"):
        store.open(lease=True)
    # The message must not offer None, which is refused (it said "or None").
    with pytest.raises(TypeError, match=r"lease must be a finite positive number of seconds, got"):
        store.open(lease="5")


@pytest.mark.parametrize("tiny", [1e-6, 5e-324, 0.099])
def test_a_lease_too_short_to_renew_is_refused(store: Store, tiny: float) -> None:
    # Before: lease=1e-6 was taken; the renewal thread then renewed it about
    # 700 times a second (a write transaction each, an fsync on SQLite), and
    # the lease was over before any write could prove it.
    with pytest.raises(ValueError, match=rf"^lease must be at least 0.1 seconds.*got {tiny!r}"):
        store.open(lease=tiny)
    assert store.open(lease=0.1) is not None


BATCH = Path(__file__).with_name("_journal_batch.py")
RACE = """
import os, sys, time
sys.path.insert(0, os.path.dirname(sys.argv[2]))
from _journal_batch import open_journal
from taut.journal import JournalBusy
journal = open_journal(sys.argv[1], 30.0)
while not os.path.exists(sys.argv[3]):
    time.sleep(0.001)
try:
    journal.reserve(["a"])
except JournalBusy:
    print("busy", flush=True)
    sys.exit(0)
print("owner", flush=True)
sys.stdin.read()  # hold the lease until the test is done
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_processes_racing_for_one_run_exactly_one_wins(kind: str, tmp_path: Path) -> None:
    # Before leases, two processes on one SQLite run silently kept only some
    # outcomes; now exactly one of them owns the run, the others hear so at once.
    with journal_store(kind, tmp_path) as store:
        gate = tmp_path / "gate"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", RACE, store.spec(), str(BATCH), str(gate)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        try:
            gate.touch()
            outs = [p.stdout.readline().strip() for p in procs if p.stdout is not None]
            assert sorted(outs) == ["busy", "busy", "busy", "owner"]
        finally:
            for p in procs:
                p.communicate(timeout=60)


EXIT_WITHOUT_CLOSE = """
import os, sys
sys.path.insert(0, os.path.dirname(sys.argv[2]))
from _journal_batch import open_journal
import taut
journal = open_journal(sys.argv[1], 30.0)
outs = taut.gather([taut.call(int, "7", call_id="seven")], journal=journal)
print(outs[0].value, flush=True)
# no close(): interpreter exit releases the lease
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_runner_that_exits_without_close_releases_its_lease(kind: str, tmp_path: Path) -> None:
    with journal_store(kind, tmp_path) as store:
        done = subprocess.run(
            [sys.executable, "-c", EXIT_WITHOUT_CLOSE, store.spec(), str(BATCH)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (done.returncode, done.stdout, done.stderr) == (0, "7\n", "")
        # The 30 s lease was released at exit: the next runner starts at once.
        [record] = store.open().reserve(["seven"])
        assert record is not None and record.value == 7


KILLED_HOLDING_THE_LEASE = """
import os, signal, sys
sys.path.insert(0, os.path.dirname(sys.argv[2]))
from _journal_batch import open_journal
journal = open_journal(sys.argv[1], 30.0)
journal.reserve(["a"])
os.kill(os.getpid(), signal.SIGKILL)  # no exit hook runs: the lease stays
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_lease_held_by_a_runner_killed_on_this_host_is_taken_at_once(
    kind: str, tmp_path: Path
) -> None:
    # A runner killed on this machine (its pid is gone) is not waited out for
    # its whole 30 s lease: a rerun right after the kill resumes at once.
    with journal_store(kind, tmp_path) as store:
        done = subprocess.run(
            [sys.executable, "-c", KILLED_HOLDING_THE_LEASE, store.spec(), str(BATCH)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == -signal.SIGKILL, done.stderr
        [record] = store.open().reserve(["a"])
        assert record is None  # reserved by the dead runner, never finished


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
@pytest.mark.parametrize("ending", ["close", "exit", "killed"])
def test_a_lease_first_taken_in_a_forked_child_is_the_childs(
    kind: str, ending: str, tmp_path: Path
) -> None:
    # Before: a journal opened before fork and first written in the child
    # took the lease in the parent's name (its pid): neither the child's
    # close() nor its exit released it, and a killed child was not seen as
    # dead, so the next runner waited out the whole 30 s lease (JournalBusy).
    with journal_store(kind, tmp_path) as store:
        journal = store.open(lease=30.0)  # opened here, written only in the child
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            code = 0
            try:
                journal.reserve(["a"])
                journal.complete(0, "a", "ok", "from the child", None)
                if ending == "close":
                    journal.close()
                elif ending == "exit":
                    # What interpreter exit runs (atexit); a real sys.exit()
                    # here would end up in the pytest of the forked child.
                    leases._release_all_at_exit()
                elif ending == "killed":
                    os.kill(os.getpid(), signal.SIGKILL)
            except BaseException:
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        expected = -signal.SIGKILL if ending == "killed" else 0
        assert os.waitstatus_to_exitcode(status) == expected
        [record] = store.open().reserve(["a"])  # at once, not after 30 s
        assert record is not None and record.value == "from the child"


EXIT_WHILE_LOCKED = """
import sys, time
from taut.journal import SqliteJournal
journal = SqliteJournal(sys.argv[1], run="r", lease=0.6, timeout=None)
journal.reserve(["a"])
print("reserved", flush=True)
sys.stdin.readline()  # the test locks the file now
time.sleep(0.5)  # a renewal (every 0.2 s) is stuck waiting for the lock
print("exiting", flush=True)
"""


@pytest.mark.timeout(120)
def test_exit_is_not_held_up_by_a_database_that_stays_locked(tmp_path: Path) -> None:
    # Before: with timeout=None, a renewal waiting for a lock another
    # process held kept the journal's lock, and the exit hook waited for it to
    # release the lease: the interpreter never exited. Releasing at exit is
    # best effort (the lease runs out by itself); it now waits a few seconds.
    path = str(tmp_path / "j.db")
    runner = subprocess.Popen(
        [sys.executable, "-c", EXIT_WHILE_LOCKED, path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert runner.stdin is not None and runner.stdout is not None
    holder = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        assert runner.stdout.readline() == "reserved\n"
        holder.execute("BEGIN IMMEDIATE")  # the write lock, held until the end
        runner.stdin.write("go\n")
        runner.stdin.flush()
        assert runner.stdout.readline() == "exiting\n"
        try:
            code = runner.wait(timeout=60)  # lopsided: a few seconds, against never
        except subprocess.TimeoutExpired:
            runner.kill()
            runner.wait()
            raise AssertionError("the interpreter did not exit") from None
        assert code == 0
    finally:
        holder.close()


def test_a_live_holder_on_this_host_is_never_taken_for_dead() -> None:
    me = f"{socket.gethostname()}:{os.getpid()}:abc"
    parent = f"{socket.gethostname()}:{os.getppid()}:abc"
    elsewhere = f"some-other-host:{os.getpid() + 1}:abc"
    assert not leases.holder_died_here(me)
    assert not leases.holder_died_here(parent)
    assert not leases.holder_died_here(elsewhere)
    assert not leases.holder_died_here("not an owner id")


def _a_pid_that_is_gone() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid  # reaped: no process has it (until the kernel reuses it)


def test_a_holder_in_another_pid_namespace_is_never_taken_for_dead() -> None:
    # Two containers may share a host name (compose replicas given one
    # `hostname:`, pods with hostNetwork) and each number their processes on
    # their own: a live runner's pid in one is a pid that does not exist in
    # the other. Before: such an owner, `host:pid:nonce` with a pid not seen
    # here, was taken for dead and its live lease taken over at once.
    gone = _a_pid_that_is_gone()
    host = socket.gethostname()
    assert not leases.holder_died_here(f"{host}:{gone}:abc")  # namespace unknown
    assert not leases.holder_died_here(f"{host}/pidns1:{gone}:abc")  # another one
    mine = leases.Lease(1.0).owner.rsplit(":", 2)[0]
    assert leases.holder_died_here(f"{mine}:{gone}:abc")  # this host and namespace


NAMESPACED_HOLDER = """
import sys
sys.path.insert(0, sys.argv[2])
from _journal_batch import open_journal
journal = open_journal(sys.argv[1], 30.0)
journal.reserve(["a"])
print("held", flush=True)
sys.stdin.readline()
"""

NAMESPACED_RESUME = """
import sys
sys.path.insert(0, sys.argv[2])
from _journal_batch import open_journal
from taut.journal import JournalBusy
try:
    open_journal(sys.argv[1], 30.0).reserve(["a"])
    print("took the lease", flush=True)
except JournalBusy:
    print("busy", flush=True)
"""


def _in_own_pid_namespace(code: str, *args: str, forks: int) -> list[str]:
    # ``forks`` processes first, so the runner's pid is not 1 or 2 of its
    # namespace (pids that exist in every other namespace too), and the two
    # runners differ: each is pid forks + 2 of its own namespace.
    script = f'for _ in $(seq {forks}); do /bin/true; done; "$0" "$@"; /bin/true'
    unshare = ["unshare", "--user", "--map-root-user", "--pid", "--fork"]
    return [*unshare, "sh", "-c", script, sys.executable, "-c", code, *args]


def _pid_namespaces_can_be_made() -> bool:
    if shutil.which("unshare") is None:
        return False
    trial = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "true"]
    return subprocess.run(trial, capture_output=True).returncode == 0


@pytest.mark.timeout(120)
@pytest.mark.skipif(
    not _pid_namespaces_can_be_made(), reason="needs unshare and user namespaces (Linux)"
)
def test_a_live_runner_in_another_pid_namespace_keeps_its_run(tmp_path: Path) -> None:
    path = str(tmp_path / "j.db")
    tests = str(Path(__file__).parent)
    holder = subprocess.Popen(
        _in_own_pid_namespace(NAMESPACED_HOLDER, f"sqlite:r:{path}", tests, forks=5),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline() == "held\n"
        resumed = subprocess.run(
            _in_own_pid_namespace(NAMESPACED_RESUME, f"sqlite:r:{path}", tests, forks=2),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert resumed.stdout == "busy\n", resumed.stderr
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


FROZEN = """
import os, signal, sys
sys.path.insert(0, os.path.dirname(sys.argv[2]))
from _journal_batch import open_journal
from taut.journal import JournalError
journal = open_journal(sys.argv[1], 1.0)
journal.reserve(["a", "b"])
print("owner", flush=True)
# Freeze here (a GC pause, a stopped VM), outside any transaction: a process
# frozen inside one would hold SQLite's write lock (docs/SCALE.md).
os.kill(os.getpid(), signal.SIGSTOP)
sys.stdin.readline()
try:
    journal.complete(1, "b", "ok", "from the frozen runner", None)
    print("written", flush=True)
except JournalError as exc:
    print("refused", exc, flush=True)
"""


@pytest.mark.timeout(120)
@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs SIGSTOP and /proc (Linux)")
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_frozen_process_loses_its_run_and_its_late_write_is_refused(
    kind: str, tmp_path: Path
) -> None:
    with journal_store(kind, tmp_path) as store:
        proc = subprocess.Popen(
            [sys.executable, "-c", FROZEN, store.spec(), str(BATCH)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            assert proc.stdout.readline() == "owner\n"
            wait_until(lambda: _process_state(proc.pid) == "T")
            fresh = store.open()
            wait_until(lambda: _takes_lease(fresh))  # its 1 s lease ran out
            fresh.complete(0, "a", "ok", "A", None)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        out, _ = proc.communicate("go\n", timeout=60)
        assert out.startswith("refused") and "taken over" in out
        fresh.complete(1, "b", "ok", "B", None)
        assert fresh.records() == [(0, "a", "ok"), (1, "b", "ok")]
        last = store.rerun(fresh).reserve(["a", "b"])
        assert [r.value for r in last if r is not None] == ["A", "B"]


def _process_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_a_gather_on_a_busy_run_runs_nothing(store: Store) -> None:
    owner = store.open()
    owner.reserve(["x"])
    ran: list[int] = []
    with pytest.raises(JournalBusy):
        taut.gather([taut.call(ran.append, 1)], journal=store.open())
    assert ran == []


# --------------------------------------------------------------------------- crash
def executions(counter_dir: Path) -> collections.Counter[str]:
    return collections.Counter(name.split(".")[0] for name in os.listdir(counter_dir))


def run_batch(
    store: Store, counter: Path, n: int, gated_from: int, gate: Path, lease: float
) -> subprocess.Popen[str]:
    args = [store.spec(), str(counter), str(n), str(gated_from), str(gate), str(lease)]
    return subprocess.Popen(
        [sys.executable, str(BATCH), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_sigkill_halfway_then_rerun(kind: str, tmp_path: Path) -> None:
    with journal_store(kind, tmp_path) as store:
        _sigkill_halfway_then_rerun(store, tmp_path)


def _sigkill_halfway_then_rerun(store: Store, tmp_path: Path) -> None:
    counter, gate = tmp_path / "counter", tmp_path / "gate"
    counter.mkdir()
    n, gated_from, lease = 40, 20, 2.0
    ids = [f"call-{i}" for i in range(n)]

    # Run 1: calls 0..19 finish; 20.. block on the gate. Kill it once every call
    # before the gate is done and 4 gated calls are in flight.
    proc = run_batch(store, counter, n, gated_from, gate, lease)
    assert proc.stdout is not None
    done: set[int] = set()
    for line in proc.stdout:
        if line.startswith("done "):
            done.add(int(line.split()[1]))
        if len(done) == gated_from:
            break
    assert done == set(range(gated_from))
    wait_until(lambda: sum(executions(counter)[c] for c in ids[gated_from:]) >= 4)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    before = executions(counter)
    inspect = store.open()
    status = {cid: st for _, cid, st in inspect.records()}
    finished = {cid for cid, st in status.items() if st != "pending"}
    assert finished == set(ids[:gated_from])
    assert len(status) == n  # every slot was reserved before anything ran
    in_flight = {cid for cid in ids[gated_from:] if before[cid]}
    assert len(in_flight) == 4  # started but never journaled: must run again

    # Run 2a: the dead runner's lease has not run out yet: refused, nothing runs.
    gate.touch()
    proc = run_batch(store, counter, n, gated_from, gate, lease)
    out, err = proc.communicate(timeout=60)
    if proc.returncode == 3:  # the usual case; on a very slow machine the lease may be gone
        assert out.startswith("busy") and "leased by another live runner" in out
        assert executions(counter) == before
        time.sleep(lease)  # the dead runner's lease runs out
        # Run 2b: finished calls replay, all others execute.
        proc = run_batch(store, counter, n, gated_from, gate, lease)
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
    journal = store.rerun(inspect)
    records = journal.reserve(ids)
    assert journal.records() == [(i, ids[i], records[i].status) for i in range(n)]
    for i, record in enumerate(records):
        assert record is not None and record.call_id == ids[i] and record.position == i
        if i % 7 == 3:
            assert record.status == "error" and "boom" in str(record.error)
        else:
            assert record.status == "ok" and record.value == {"i": i, "square": i * i}
    journal.close()

    # Run 3: the previous run exited normally and released its lease: everything
    # replays at once; nothing executes.
    proc = run_batch(store, counter, n, gated_from, gate, lease)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, (out, err)
    assert executions(counter) == after
    assert sum(line.startswith("replay") for line in out.splitlines()) == n
