"""pytest-benchmark: taut deadlines side by side with the stdlib (issue 3 §8 a, c, d).

Run: ``pytest benches/test_deadlines_bench.py --benchmark-group-by=group``.
Each group holds taut and its baselines; compare within a group.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from taut import _core, move_on_after
from taut._bench import deadlines as bench

BATCH = 1000
FAR = 3600.0


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    try:
        yield lp
    finally:
        lp.close()


# -- (a) arm+cancel ---------------------------------------------------------------


@pytest.mark.benchmark(group="a-arm-cancel-x1000")
def test_taut_deadline_arm_cancel(benchmark: BenchmarkFixture) -> None:
    deadline = _core.Deadline

    def batch() -> None:
        at = time.monotonic() + FAR
        for _ in range(BATCH):
            deadline(at).cancel()

    benchmark(batch)


@pytest.mark.benchmark(group="a-arm-cancel-x1000")
def test_loop_call_later_cancel(
    benchmark: BenchmarkFixture, loop: asyncio.AbstractEventLoop
) -> None:
    def cb() -> None:
        pass

    async def batch() -> None:
        lp = asyncio.get_running_loop()
        for _ in range(BATCH):
            lp.call_later(FAR, cb).cancel()

    benchmark(lambda: loop.run_until_complete(batch()))


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is 3.11+")
@pytest.mark.benchmark(group="a-arm-cancel-x1000")
def test_asyncio_timeout_enter_exit(
    benchmark: BenchmarkFixture, loop: asyncio.AbstractEventLoop
) -> None:
    async def batch() -> None:
        for _ in range(BATCH):
            async with asyncio.timeout(FAR):  # type: ignore[attr-defined,unused-ignore]
                pass

    benchmark(lambda: loop.run_until_complete(batch()))


@pytest.mark.benchmark(group="a-arm-cancel-x1000")
def test_taut_async_scope_enter_exit(
    benchmark: BenchmarkFixture, loop: asyncio.AbstractEventLoop
) -> None:
    async def batch() -> None:
        for _ in range(BATCH):
            async with move_on_after(FAR):
                pass

    benchmark(lambda: loop.run_until_complete(batch()))


@pytest.mark.benchmark(group="a-arm-cancel-x1000")
def test_threading_timer_start_cancel(benchmark: BenchmarkFixture) -> None:
    benchmark.pedantic(bench._timer_start_cancel, args=(BATCH,), rounds=3, iterations=1)


# -- (c) lateness -----------------------------------------------------------------


@pytest.mark.benchmark(group="c-lateness")
def test_lateness_table(benchmark: BenchmarkFixture) -> None:
    rows = benchmark.pedantic(lambda: bench.bench_lateness(quick=True), rounds=1, iterations=1)
    for row in rows:
        benchmark.extra_info[f"{row.key}.taut"] = row.taut
        benchmark.extra_info[f"{row.key}.baseline"] = row.baseline


# -- (d) pending deadlines ----------------------------------------------------------


@pytest.mark.benchmark(group="d-pending")
def test_pending_table(benchmark: BenchmarkFixture) -> None:
    rows = benchmark.pedantic(lambda: bench.bench_pending(quick=True), rounds=1, iterations=1)
    for row in rows:
        benchmark.extra_info[f"{row.key}.taut"] = row.taut
        benchmark.extra_info[f"{row.key}.baseline"] = row.baseline
    assert all(row.taut < row.baseline for row in rows)
