"""The cost of a journaled call: one gather of 1,000 no-op calls per journal,
side by side in one run (docs/SCALE.md quotes its output).

    python scripts/bench_journal.py [--calls N] [--dsn DSN]

PostgreSQL is measured when ``--dsn`` or ``TAUT_TEST_POSTGRES_DSN`` names a
server (``scripts/postgres.sh run python scripts/bench_journal.py``).
Each journal: a first run (reserve 1,000 slots in one transaction, run the
calls, write 1,000 outcomes, one transaction each) and a rerun (everything
replays: one transaction, nothing runs).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import taut


def noop(i: int) -> int:
    return i


def measure(label: str, open_journal: Callable[[], Any], calls: int) -> tuple[str, float, float]:
    with taut.ThreadPoolExecutor(4) as pool:
        handles = [taut.call(noop, i, call_id=f"noop-{i}") for i in range(calls)]
        journal = open_journal()
        began = time.perf_counter()
        outs = taut.gather(handles, executor=pool, journal=journal)
        first = time.perf_counter() - began
        assert all(o.status == "ok" for o in outs)
        if journal is not None:
            journal.close()
        journal = open_journal()
        handles = [taut.call(noop, i, call_id=f"noop-{i}") for i in range(calls)]
        began = time.perf_counter()
        outs = taut.gather(handles, executor=pool, journal=journal)
        rerun = time.perf_counter() - began
        if journal is not None:
            assert all(o.replayed for o in outs)
            journal.close()
    return label, calls / first, calls / rerun


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--dsn", default=os.environ.get("TAUT_TEST_POSTGRES_DSN", ""))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(measure("no journal", lambda: None, args.calls))
        for sync in ("FULL", "NORMAL"):
            path = os.path.join(tmp, f"{sync}.db")
            rows.append(
                measure(
                    f"SqliteJournal synchronous={sync}",
                    lambda path=path, sync=sync: taut.SqliteJournal(path, synchronous=sync),
                    args.calls,
                )
            )
        if args.dsn:
            for codec in ("json", "pickle"):
                run = f"bench-{uuid.uuid4().hex[:8]}"
                rows.append(
                    measure(
                        f"PostgresJournal codec={codec}",
                        lambda run=run, codec=codec: taut.PostgresJournal(
                            args.dsn, run=run, codec=codec
                        ),
                        args.calls,
                    )
                )
                journal = taut.PostgresJournal(args.dsn, run=run)
                journal.clear()
                journal.close()
        else:
            print("(PostgreSQL skipped: no --dsn and no TAUT_TEST_POSTGRES_DSN)")
    print(f"{args.calls} no-op calls in one gather, 4 workers, one run:")
    print("| journal | first run, calls/s | rerun (all replay), calls/s |")
    print("|---|---|---|")
    for label, first, rerun in rows:
        print(f"| {label} | {first:,.0f} | {rerun:,.0f} |")


if __name__ == "__main__":
    main()
