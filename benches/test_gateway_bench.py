"""pytest-benchmark: the gateway shapes of issue 8 side by side with the
standard library (compare within a group).

Run: ``pytest benches/test_gateway_bench.py --benchmark-group-by=group``.
The CPU seconds per call (``time.process_time``, every thread) of each case
are in its ``extra_info``; ``python -m taut bench --area gateway`` prints the
same shapes as ratios.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import sys
import time
from collections.abc import Iterator
from typing import Callable

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

import taut
from taut._bench import gateway as bench

FANOUT_CALLS = 2_000
Factory = Callable[[int], cf.ThreadPoolExecutor]
FACTORIES: dict[str, Factory] = {
    "stdlib": cf.ThreadPoolExecutor,
    "taut": taut.ThreadPoolExecutor,
}


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    try:
        yield lp
    finally:
        lp.run_until_complete(lp.shutdown_default_executor())
        lp.close()


def _with_cpu(benchmark: BenchmarkFixture, fn: Callable[[], object], calls: int) -> object:
    """``benchmark(fn)``, with the CPU seconds per call over all its runs."""
    cpu = time.process_time()
    runs = 0

    def counted() -> object:
        nonlocal runs
        runs += 1
        return fn()

    result = benchmark(counted)
    benchmark.extra_info["cpu_per_call"] = (time.process_time() - cpu) / (runs * calls)
    return result


# -- (a) asyncio fan-out --------------------------------------------------------------


@pytest.mark.parametrize("in_flight", [256, 16])
@pytest.mark.parametrize("kind", bench.FANOUT_KINDS)
def test_fanout(
    benchmark: BenchmarkFixture, loop: asyncio.AbstractEventLoop, kind: str, in_flight: int
) -> None:
    benchmark.group = f"a-fanout-{in_flight}-in-flight-x{FANOUT_CALLS}"
    one, ex = bench.fanout_task(kind, loop)
    try:
        loop.run_until_complete(bench.fan_out(one, 4 * bench.WORKERS, in_flight))
        _with_cpu(
            benchmark,
            lambda: loop.run_until_complete(bench.fan_out(one, FANOUT_CALLS, in_flight)),
            FANOUT_CALLS,
        )
    finally:
        if ex is not None:
            ex.shutdown(wait=True)


# -- (b) paced load ---------------------------------------------------------------------


@pytest.mark.parametrize("name", list(FACTORIES))
def test_paced_sync(benchmark: BenchmarkFixture, name: str) -> None:
    benchmark.group = "b-paced-2ms-x100"
    sample = benchmark.pedantic(
        lambda: bench.paced_sync(FACTORIES[name], 100), rounds=3, iterations=1
    )
    benchmark.extra_info["latency_median"] = sample.wall
    benchmark.extra_info["cpu_per_request"] = sample.cpu


@pytest.mark.parametrize("kind", ["stdlib", "taut"])
def test_paced_async(benchmark: BenchmarkFixture, kind: str) -> None:
    benchmark.group = "b-paced-async-2ms-x100"
    sample = benchmark.pedantic(lambda: bench.paced_async(kind, 100), rounds=3, iterations=1)
    benchmark.extra_info["latency_median"] = sample.wall
    benchmark.extra_info["cpu_per_request"] = sample.cpu


# -- (c) loop stall ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["idle", "stdlib", "taut.to_thread", "asyncio.to_thread"])
def test_loop_stall(benchmark: BenchmarkFixture, kind: str) -> None:
    benchmark.group = "c-loop-stall"
    worst, refused = benchmark.pedantic(lambda: bench.loop_stall(kind), rounds=1, iterations=1)
    benchmark.extra_info["worst_tick_gap"] = worst
    benchmark.extra_info["refused_queue_full"] = refused
    if kind == "asyncio.to_thread":
        # One call runs, one waits in the queue; the rest are refused at once.
        assert refused == bench.STALL_CALLS - 2
    else:
        assert refused == 0


# -- (d) deadline scope per request -------------------------------------------------------


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is 3.11+")
@pytest.mark.parametrize("kind", ["asyncio", "taut", "empty"])
def test_scope_enter_exit(
    benchmark: BenchmarkFixture, loop: asyncio.AbstractEventLoop, kind: str
) -> None:
    benchmark.group = "d-async-scope-x1000"
    _with_cpu(benchmark, lambda: loop.run_until_complete(bench.enter_exit(kind, 1000)), 1000)


# -- (e) gRPC -----------------------------------------------------------------------------


@pytest.mark.skipif(bench.grpc_missing() is not None, reason=str(bench.grpc_missing()))
@pytest.mark.parametrize("name", list(FACTORIES))
def test_grpc_server(benchmark: BenchmarkFixture, name: str) -> None:
    benchmark.group = "e-grpc-unary-x1000-48-in-flight"
    sample = benchmark.pedantic(
        lambda: bench.grpc_server_run(FACTORIES[name], 1000, 48), rounds=3, iterations=1
    )
    benchmark.extra_info["rpcs_per_second"] = 1 / sample.wall
    benchmark.extra_info["server_cpu_per_rpc"] = sample.cpu
