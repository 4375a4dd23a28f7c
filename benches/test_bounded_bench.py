"""pytest-benchmark: one bounded call on a fast function, taut against the
thread-per-call pattern of seed 004 (see taut._bench.bounded for the baseline)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from taut._bench.bounded import _fast, _fast_async, baseline_async, baseline_sync
from taut.bounded import run_bounded_async, run_bounded_sync


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.mark.benchmark(group="bounded-sync")
def test_sync_taut(benchmark: Any) -> None:
    result = benchmark(run_bounded_sync, _fast, 10.0)
    assert result.value == 1


@pytest.mark.benchmark(group="bounded-sync")
def test_sync_seed004_thread_per_call(benchmark: Any) -> None:
    assert benchmark(baseline_sync, _fast, 10.0) == (False, 1)


@pytest.mark.benchmark(group="bounded-async")
def test_async_taut(benchmark: Any, loop: asyncio.AbstractEventLoop) -> None:
    result = benchmark(lambda: loop.run_until_complete(run_bounded_async(_fast_async(), 10.0)))
    assert result.value == 1


@pytest.mark.benchmark(group="bounded-async")
def test_async_seed004_two_timers(benchmark: Any, loop: asyncio.AbstractEventLoop) -> None:
    result = benchmark(lambda: loop.run_until_complete(baseline_async(_fast_async(), 10.0)))
    assert result == (False, 1)
