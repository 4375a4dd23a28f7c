"""The durable path end to end (issue 12): ``taut.gather`` with a real
``SqliteJournal`` in a process killed with SIGKILL halfway, then the same
program run again through ``taut.gather``. Finished calls (ok and error) are
not executed again, the others are, and nothing is lost or duplicated.
Executions are counted from an append-only log the calls write themselves."""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _waiting import LONG

from taut.journal import SqliteJournal

BATCH = Path(__file__).with_name("_durable_gather_batch.py")
N, GATED_FROM, PARALLEL = 24, 12, 3


def run_batch(db: Path, log: Path, gate: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(BATCH), str(db), str(log), str(N), str(GATED_FROM), str(gate)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def executions(log: Path) -> collections.Counter[int]:
    if not log.exists():
        return collections.Counter()
    lines = log.read_text().splitlines()
    assert all(line.startswith("start ") for line in lines), lines
    return collections.Counter(int(line.split()[1]) for line in lines)


def journal_status(db: Path) -> dict[int, str]:
    journal = SqliteJournal(db)
    try:
        return {position: status for position, _, status in journal.records()}
    finally:
        journal.close()


def outcomes(stdout: str) -> dict[int, tuple[str, bool, str]]:
    got = {}
    for line in stdout.splitlines():
        if line.startswith("outcome "):
            _, i, status, replayed, detail = line.split(" ", 4)
            got[int(i)] = (status, replayed == "True", detail)
    return got


def expected(i: int) -> tuple[str, str]:
    if i % 5 == 3:
        return "error", f"ValueError: boom {i}"
    return "ok", repr({"i": i, "square": i * i})


@pytest.mark.timeout(180)
def test_gather_with_sqlite_journal_survives_sigkill(tmp_path: Path) -> None:
    db, log, gate = tmp_path / "j.db", tmp_path / "executions.log", tmp_path / "gate"

    # Run 1: the ungated calls finish and are journaled; PARALLEL gated calls
    # are running (blocked on the gate) when the process is killed.
    proc = run_batch(db, log, gate)
    try:
        give_up = time.monotonic() + LONG
        while True:
            assert proc.poll() is None, proc.communicate()
            started = executions(log)
            if sum(started[i] for i in range(GATED_FROM, N)) == PARALLEL and db.exists():
                status = journal_status(db)
                if all(status.get(i, "pending") != "pending" for i in range(GATED_FROM)):
                    break
            assert time.monotonic() < give_up, f"never reached the kill point: {started}"
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=LONG)
    assert proc.returncode == -signal.SIGKILL

    before = executions(log)
    status = journal_status(db)
    assert sorted(status) == list(range(N)), "every slot is reserved before any call runs"
    finished = {i for i, st in status.items() if st != "pending"}
    assert finished == set(range(GATED_FROM))
    in_flight = {i for i in range(GATED_FROM, N) if before[i]}
    assert len(in_flight) == PARALLEL
    assert all(before[i] == 1 for i in range(GATED_FROM))
    assert sum(before.values()) == GATED_FROM + PARALLEL

    # Run 2: the gate is open. Finished calls replay; every other one runs once
    # more (the in-flight ones for the second time, the rest for the first).
    gate.touch()
    proc = run_batch(db, log, gate)
    out, err = proc.communicate(timeout=LONG * 2)
    assert proc.returncode == 0, err
    after = executions(log)
    for i in range(N):
        want = before[i] if i < GATED_FROM else before[i] + 1
        assert after[i] == want, f"call {i} ran {after[i]} times, expected {want}"
    got = outcomes(out)
    assert sorted(got) == list(range(N)), out
    for i, (status_, replayed, detail) in got.items():
        assert (status_, detail) == expected(i), f"call {i}: {status_} {detail}"
        assert replayed == (i < GATED_FROM), f"call {i} replayed={replayed}"
    assert journal_status(db) == {i: expected(i)[0] for i in range(N)}

    # Run 3: every call replays, nothing executes.
    proc = run_batch(db, log, gate)
    out, err = proc.communicate(timeout=LONG * 2)
    assert proc.returncode == 0, err
    assert executions(log) == after
    got = outcomes(out)
    assert all(got[i] == (*expected(i)[:1], True, expected(i)[1]) for i in range(N))
