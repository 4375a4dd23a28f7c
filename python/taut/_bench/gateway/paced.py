"""(b) paced load: one request every 2 ms, as a service a few milliseconds
apart sees it, sync and from an event loop: the median latency of a request
and the process CPU per request, where spinning would show."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import statistics
import time
from collections.abc import Iterator
from typing import Any, Callable

import taut
from taut._bench import Row, interleaved_samples
from taut._bench.gateway.common import WORKERS, Sample, _row, work

PERIOD = 0.002  # one request every 2 ms


class _Pace:
    """The schedule of ``n`` requests ``PERIOD`` apart. Iterating yields,
    before each request, the seconds to sleep first (late: zero or less, go
    at once); ``with pace:`` around a request times it. The process CPU is
    counted from the start of the schedule (pacing included: the same for
    every contender)."""

    def __init__(self, n: int) -> None:
        self._n = n
        self._latencies: list[float] = []
        self._next_at = time.perf_counter()
        self._cpu = time.process_time()
        self._start = 0.0

    def __iter__(self) -> Iterator[float]:
        for _ in range(self._n):
            self._next_at += PERIOD
            yield self._next_at - time.perf_counter()

    def __enter__(self) -> None:
        self._start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self._latencies.append(time.perf_counter() - self._start)

    def sample(self) -> Sample:
        """The median latency, and the process CPU per request so far."""
        cpu = (time.process_time() - self._cpu) / self._n
        return Sample(statistics.median(self._latencies), cpu)


def paced_sync(factory: Callable[[int], cf.ThreadPoolExecutor], n: int) -> Sample:
    """One ``submit(work).result()`` every ``PERIOD``: the median latency of a
    request and the process CPU per request (pacing included, same for both)."""
    with factory(WORKERS) as ex:
        ex.submit(work).result()
        pace = _Pace(n)
        for delay in pace:
            if delay > 0:
                time.sleep(delay)
            with pace:
                ex.submit(work).result()
        return pace.sample()


def paced_async(kind: str, n: int) -> Sample:
    """The same pace from an event loop: ``await loop.run_in_executor`` on
    the stdlib's pool against ``await executor.run`` on taut's."""

    async def main() -> Sample:
        loop = asyncio.get_running_loop()
        call: Callable[[], Any]
        if kind == "stdlib":
            ex: cf.ThreadPoolExecutor = cf.ThreadPoolExecutor(WORKERS)
            call = lambda: loop.run_in_executor(ex, work)  # noqa: E731
        else:
            tex = taut.ThreadPoolExecutor(WORKERS)
            ex = tex
            call = lambda: tex.run(work)  # noqa: E731
        await call()
        pace = _Pace(n)
        for delay in pace:
            if delay > 0:
                await asyncio.sleep(delay)
            with pace:
                await call()
        sample = pace.sample()
        ex.shutdown(wait=True)
        return sample

    return asyncio.run(main())


def bench_paced(quick: bool) -> list[Row]:
    n = 200 if quick else 500
    rounds = 3 if quick else 5
    s = interleaved_samples(
        {
            "stdlib": lambda: paced_sync(cf.ThreadPoolExecutor, n),
            "taut": lambda: paced_sync(taut.ThreadPoolExecutor, n),
            "stdlib async": lambda: paced_async("stdlib", n),
            "taut async": lambda: paced_async("taut", n),
        },
        rounds,
    )
    rows = []
    for suffix, how, base_how in (
        ("", "submit(work).result()", "stdlib"),
        (" async", "await executor.run(work)", "stdlib run_in_executor"),
    ):
        head = f"(b) paced: {how} every {PERIOD * 1e3:.0f} ms, {n} requests,"
        base, mine = s["stdlib" + suffix], s["taut" + suffix]
        rows += [
            _row(
                f"{head} CPU per request",
                f"{base_how} CPU",
                [x.cpu for x in base],
                [x.cpu for x in mine],
                target="<= 1.0x CPU",
                limit=1.0,
            ),
            _row(
                f"{head} latency (median)",
                base_how,
                [x.wall for x in base],
                [x.wall for x in mine],
                target="no worse (<= 1.0x)",
                limit=1.0,
            ),
        ]
    return rows
