"""A durable ``taut.gather`` for test_durable_gather.py (run as a subprocess).

Usage: python _durable_gather_batch.py DB LOG N GATED_FROM GATE_FILE

Gathers N calls of ``work`` with ``journal=SqliteJournal(DB)`` on taut's
default pool, at most 3 at a time. Calls ``i < GATED_FROM`` finish at once
(every fifth raises); the others wait until GATE_FILE exists, so the test can
SIGKILL the process at a known point. Every execution appends ``start I`` to
LOG before it does anything (one O_APPEND write: whole lines, even from many
threads); the outcomes are printed as ``outcome I STATUS REPLAYED DETAIL``.
"""

from __future__ import annotations

import os
import sys
import time

import taut
from taut.journal import SqliteJournal

LOG = ""
GATE = ""
GATED_FROM = 0


def work(i: int) -> dict[str, int]:
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"start {i}\n".encode())
    finally:
        os.close(fd)
    if i >= GATED_FROM:
        while not os.path.exists(GATE):
            time.sleep(0.005)
    if i % 5 == 3:
        raise ValueError(f"boom {i}")
    return {"i": i, "square": i * i}


def main() -> None:
    global LOG, GATE, GATED_FROM
    db, LOG, n_text, gated_text, GATE = sys.argv[1:6]
    n, GATED_FROM = int(n_text), int(gated_text)
    # Default call ids ("__main__.work#I"): a rerun of the same program must
    # match its journal without explicit ids.
    outcomes = taut.gather(
        [taut.call(work, i) for i in range(n)], journal=SqliteJournal(db), max_parallel=3
    )
    for i, o in enumerate(outcomes):
        detail = repr(o.value) if o.ok else f"{type(o.error).__name__}: {o.error}"
        print(f"outcome {i} {o.status} {o.replayed} {detail}", flush=True)


if __name__ == "__main__":
    main()
