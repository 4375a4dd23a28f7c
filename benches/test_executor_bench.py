"""pytest-benchmark: taut.ThreadPoolExecutor side by side with the standard
library's, one group per case of issue 2 (compare within a group)."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import functools
from collections.abc import Iterator
from typing import Any, Callable

import pytest

import taut
from taut._bench.executor import _identity, _noop, io_cheapest_pool, io_floor, io_shaped

FACTORIES: dict[str, Callable[..., cf.ThreadPoolExecutor]] = {
    "stdlib": cf.ThreadPoolExecutor,
    "taut": taut.ThreadPoolExecutor,
}


@pytest.fixture(params=list(FACTORIES))
def executor(request: pytest.FixtureRequest) -> Iterator[cf.ThreadPoolExecutor]:
    with FACTORIES[request.param](4) as ex:
        ex.submit(_noop).result()  # workers started outside the timing
        yield ex


@pytest.mark.benchmark(group="throughput-10k")
def test_throughput(benchmark: Any, executor: cf.ThreadPoolExecutor) -> None:
    def run() -> int:
        futures = [executor.submit(_noop) for _ in range(10_000)]
        return sum(1 for f in futures if f.result() is None)

    assert benchmark(run) == 10_000


@pytest.mark.benchmark(group="round-trip")
def test_round_trip(benchmark: Any, executor: cf.ThreadPoolExecutor) -> None:
    assert benchmark(lambda: executor.submit(_identity, 3).result()) == 3


@pytest.mark.benchmark(group="map-10k")
def test_map(benchmark: Any, executor: cf.ThreadPoolExecutor) -> None:
    assert benchmark(lambda: sum(executor.map(_identity, range(10_000)))) == 49_995_000


@pytest.mark.benchmark(group="run-in-executor")
def test_run_in_executor(benchmark: Any, executor: cf.ThreadPoolExecutor) -> None:
    loop = asyncio.new_event_loop()
    try:
        result = benchmark(
            lambda: loop.run_until_complete(loop.run_in_executor(executor, _identity, 5))
        )
    finally:
        loop.close()
    assert result == 5


# How an agent runtime usually collects a fan-out of tool calls: one wait()
# or as_completed() over all of them (compare stdlib and taut per group).
@pytest.mark.benchmark(group="fan-out-10k-wait")
def test_fan_out_wait(benchmark: Any, executor: cf.ThreadPoolExecutor) -> None:
    def run() -> int:
        done, not_done = cf.wait([executor.submit(_noop) for _ in range(10_000)])
        assert not not_done
        return len(done)

    assert benchmark(run) == 10_000


@pytest.mark.benchmark(group="fan-out-10k-as-completed")
def test_fan_out_as_completed(benchmark: Any, executor: cf.ThreadPoolExecutor) -> None:
    def run() -> int:
        futures = [executor.submit(_identity, i) for i in range(10_000)]
        return sum(f.result() for f in cf.as_completed(futures))

    assert benchmark(run) == 49_995_000


# (f): sleeps of 1 ms on 64 workers, beside plain threads doing the same
# sleeps (the floor) and the cheapest pool Python allows. Each round is a
# whole run, its timing as the function returns it (thread starts included
# where the run makes its threads, as `python -m taut bench` measures them).
IO_RUNS: dict[str, Callable[[], float]] = {
    "stdlib": functools.partial(io_shaped, cf.ThreadPoolExecutor, 2_000, 64, 0.001),
    "taut": functools.partial(io_shaped, taut.ThreadPoolExecutor, 2_000, 64, 0.001),
    "floor": functools.partial(io_floor, 2_000, 64, 0.001),
    "cheapest-pool": functools.partial(io_cheapest_pool, 2_000, 64, 0.001),
}


@pytest.mark.benchmark(group="io-sleep-2k")
@pytest.mark.parametrize("run", list(IO_RUNS))
def test_io_sleep(benchmark: Any, run: str) -> None:
    timed: list[float] = []
    benchmark.pedantic(lambda: timed.append(IO_RUNS[run]()), rounds=5, iterations=1)
    # The whole round, not only the timed part, is what pytest-benchmark
    # reports; the run's own timing is kept beside it.
    benchmark.extra_info["run_seconds_median"] = sorted(timed)[len(timed) // 2]
    assert len(timed) == 5 and all(t > 0 for t in timed)
