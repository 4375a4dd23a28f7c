"""A journaled batch for the crash tests of the journal contract suite (run as
a subprocess).

Usage: python _journal_batch.py SPEC COUNTER_DIR N GATED_FROM GATE_FILE LEASE

SPEC is ``sqlite:RUN:PATH`` or ``postgres:RUN:`` (DSN from TAUT_TEST_POSTGRES_DSN).
Calls ``i < GATED_FROM`` run at once; calls ``i >= GATED_FROM`` wait until
GATE_FILE exists, so the test can SIGKILL the process at a known point. Every
execution of a call leaves one file in COUNTER_DIR before the call returns.
A run whose lease is held by a live (or not yet expired) runner prints
``busy`` and exits with code 3.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from taut.journal import JournalBusy, PostgresJournal, SqliteJournal


def open_journal(spec: str, lease: float) -> Any:
    kind, run, path = spec.split(":", 2)
    if kind == "sqlite":
        return SqliteJournal(path, run=run, lease=lease)
    return PostgresJournal(os.environ["TAUT_TEST_POSTGRES_DSN"], run=run, lease=lease)


def main() -> None:
    spec, counter_dir, n_text, gated_text, gate, lease = sys.argv[1:7]
    n, gated_from = int(n_text), int(gated_text)
    journal = open_journal(spec, float(lease))
    ids = [f"call-{i}" for i in range(n)]
    # Two reservations: the journal's cursor carries on from the first.
    half = n // 2
    try:
        first = journal.reserve(ids[:half])
    except JournalBusy as exc:
        print(f"busy {exc}", flush=True)
        sys.exit(3)
    second = journal.reserve(ids[half:])
    assert (first.start, second.start) == (0, half)
    records = first + second

    def call(i: int) -> dict[str, int]:
        name = f"{ids[i]}.{os.getpid()}.{uuid.uuid4().hex}"
        with open(os.path.join(counter_dir, name), "x"):
            pass
        if i >= gated_from:
            while not os.path.exists(gate):
                time.sleep(0.01)
        time.sleep(0.002 * (i % 3))
        if i % 7 == 3:
            raise ValueError(f"boom {i}")
        return {"i": i, "square": i * i}

    say_lock = threading.Lock()

    def say(line: str) -> None:
        # One line at a time: print() writes text and newline separately, and
        # lines of worker threads would interleave ("done 4done 5").
        with say_lock:
            print(line, flush=True)

    def run(i: int) -> None:
        try:
            value = call(i)
        except Exception as exc:
            journal.complete(i, ids[i], "error", None, exc)
        else:
            journal.complete(i, ids[i], "ok", value, None)
        say(f"done {i}")

    with ThreadPoolExecutor(4) as pool:
        futures = []
        for i, record in enumerate(records):
            if record is None:
                futures.append(pool.submit(run, i))
            else:
                say(f"replay {i} {record.status}")
        for future in futures:
            future.result()  # a journal write failure must fail the batch
    print("finished", flush=True)


if __name__ == "__main__":
    main()
