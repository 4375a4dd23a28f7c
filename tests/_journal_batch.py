"""A journaled batch for the crash test in test_journal.py (run as a subprocess).

Usage: python _journal_batch.py DB COUNTER_DIR N GATED_FROM GATE_FILE

Calls ``i < GATED_FROM`` run at once; calls ``i >= GATED_FROM`` wait until
GATE_FILE exists, so the test can SIGKILL the process at a known point. Every
execution of a call leaves one file in COUNTER_DIR before the call returns.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from taut.journal import SqliteJournal


def main() -> None:
    db, counter_dir, n_text, gated_text, gate = sys.argv[1:6]
    n, gated_from = int(n_text), int(gated_text)
    journal = SqliteJournal(db)
    ids = [f"call-{i}" for i in range(n)]
    # Two reservations: the journal's cursor carries on from the first.
    half = n // 2
    records = journal.reserve(ids[:half]) + journal.reserve(ids[half:])

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

    def run(i: int) -> None:
        try:
            value = call(i)
        except Exception as exc:
            journal.complete(i, ids[i], "error", None, exc)
        else:
            journal.complete(i, ids[i], "ok", value, None)
        sys.stdout.write(f"done {i}\n")  # one write: lines from threads never interleave
        sys.stdout.flush()

    with ThreadPoolExecutor(4) as pool:
        futures = []
        for i, record in enumerate(records):
            if record is None:
                futures.append(pool.submit(run, i))
            else:
                print(f"replay {i} {record.status}", flush=True)
        for future in futures:
            future.result()  # a journal write failure must fail the batch
    print("finished", flush=True)


if __name__ == "__main__":
    main()
