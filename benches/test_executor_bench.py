"""pytest-benchmark: taut.ThreadPoolExecutor side by side with the standard
library's, one group per case of issue 2 (compare within a group)."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
from collections.abc import Iterator
from typing import Any, Callable

import pytest

import taut
from taut._bench.executor import _identity, _noop

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
