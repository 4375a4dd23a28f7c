"""(a) asyncio fan-out: many small calls awaited from one loop, a bounded
number in flight (an ``asyncio.Semaphore``), against the stdlib's
``run_in_executor``, with two floors that use no thread at all."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import functools
import statistics
from collections.abc import Awaitable
from typing import Callable

import taut
from taut._bench import Row, interleaved_samples
from taut._bench.gateway.common import WORKERS, Sample, _row, per_call, wall_and_cpu, work

FANOUT_KINDS = (
    "stdlib",
    "taut run_in_executor",
    "taut.to_thread",
    "executor.run",
    "inline",
    "suspend",
)


def fanout_task(
    kind: str, loop: asyncio.AbstractEventLoop, workers: int = WORKERS
) -> tuple[Callable[[asyncio.Semaphore], Awaitable[int]], cf.ThreadPoolExecutor | None]:
    """The body of one fan-out task for ``kind`` (it takes the semaphore),
    and the executor to shut down afterwards (None: none, or the loop's
    default executor, which the loop shuts down itself).

    Two floors without any thread: ``inline`` calls ``work`` on the loop
    (the task never suspends, so the semaphore never makes anyone wait);
    ``suspend`` also runs it on the loop but awaits a future that a loop
    callback settles, so each task suspends once and the semaphore queues
    the others, as with any call that leaves the loop. What a thread hop
    can get down to is the second; the first is below any of them."""
    ex: cf.ThreadPoolExecutor | None = None
    call: Callable[[], Awaitable[int]]
    if kind == "stdlib":
        ex = cf.ThreadPoolExecutor(workers)
        call = functools.partial(loop.run_in_executor, ex, work)
    elif kind == "taut run_in_executor":
        ex = taut.ThreadPoolExecutor(workers)
        call = functools.partial(loop.run_in_executor, ex, work)
    elif kind == "taut.to_thread":
        # As a gateway would: the taut executor is the loop's default.
        loop.set_default_executor(taut.ThreadPoolExecutor(workers))
        call = functools.partial(taut.to_thread, work)
    elif kind == "executor.run":
        tex = taut.ThreadPoolExecutor(workers)
        ex = tex
        call = functools.partial(tex.run, work)
    elif kind == "inline":

        async def inline(sem: asyncio.Semaphore) -> int:
            async with sem:
                return work()

        return inline, None
    elif kind == "suspend":

        async def suspend(sem: asyncio.Semaphore) -> int:
            async with sem:
                settled: asyncio.Future[int] = loop.create_future()
                loop.call_soon(settled.set_result, work())
                return await settled

        return suspend, None
    else:
        raise ValueError(f"unknown fan-out kind {kind!r}")

    async def one(sem: asyncio.Semaphore) -> int:
        async with sem:
            return await call()

    return one, ex


async def fan_out(
    one: Callable[[asyncio.Semaphore], Awaitable[int]], n: int, in_flight: int
) -> None:
    """``n`` tasks at once, at most ``in_flight`` inside the semaphore."""
    sem = asyncio.Semaphore(in_flight)
    await asyncio.gather(*[one(sem) for _ in range(n)])


def fanout(kind: str, n: int, in_flight: int, workers: int = WORKERS) -> Sample:
    """``n`` calls of ``work`` by ``kind`` (see :func:`fanout_task`), at most
    ``in_flight`` at a time, in a fresh loop; wall and CPU per call."""

    async def main() -> Sample:
        one, ex = fanout_task(kind, asyncio.get_running_loop(), workers)
        # Workers started (and the loop's channel made) outside the timing.
        await fan_out(one, 4 * workers, in_flight)
        sample = await per_call(fan_out(one, n, in_flight), n)
        if ex is not None:
            ex.shutdown(wait=True)
        return sample

    return asyncio.run(main())


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs"


def bench_fanout(quick: bool) -> list[Row]:
    n = 4_000 if quick else 20_000
    rounds = 3 if quick else 5
    rows: list[Row] = []
    for in_flight in (256, 16):
        s = interleaved_samples(
            {k: functools.partial(fanout, k, n, in_flight) for k in FANOUT_KINDS}, rounds
        )
        wall, cpu = wall_and_cpu(s)
        mw = {k: statistics.median(v) for k, v in wall.items()}
        mc = {k: statistics.median(v) for k, v in cpu.items()}
        head = f"(a) fan-out {n:,} calls, {in_flight} in flight, {WORKERS} workers:"
        base = "stdlib run_in_executor"
        tt = "taut.to_thread"

        def cpu_note(kind: str, mc: dict[str, float] = mc) -> str:
            return f"CPU/call {_us(mc[kind])} vs {_us(mc['stdlib'])} stdlib"

        rows += [
            _row(
                f"{head} {tt}",
                base,
                wall["stdlib"],
                wall[tt],
                target="<= 0.5x",
                limit=0.5,
                note=cpu_note(tt),
            ),
            _row(
                f"{head} {tt} CPU",
                f"{base} CPU",
                cpu["stdlib"],
                cpu[tt],
                target="<= 1.0x CPU",
                limit=1.0,
            ),
            _row(
                f"{head} {tt} vs floor",
                "inline floor (no thread)",
                wall["inline"],
                wall[tt],
                target="<= 2x floor",
                limit=2.0,
                note=f"CPU/call {_us(mc[tt])} vs {_us(mc['inline'])} floor",
            ),
            _row(
                f"{head} suspend floor (no thread)",
                "inline floor (no thread)",
                wall["inline"],
                wall["suspend"],
                target="",
                limit=None,
                note=(
                    "each task awaits a future settled by a loop callback: CPU/call "
                    f"{_us(mc['suspend'])}; {tt} / suspend floor: "
                    f"{mw[tt] / mw['suspend']:.2f}x wall, {mc[tt] / mc['suspend']:.2f}x CPU"
                ),
            ),
            _row(
                f"{head} loop.run_in_executor(taut)",
                base,
                wall["stdlib"],
                wall["taut run_in_executor"],
                target="<= 0.7x",
                limit=0.7,
                note=cpu_note("taut run_in_executor"),
            ),
            _row(
                f"{head} loop.run_in_executor(taut) CPU",
                f"{base} CPU",
                cpu["stdlib"],
                cpu["taut run_in_executor"],
                target="<= 1.0x CPU",
                limit=1.0,
            ),
            _row(
                f"{head} await executor.run",
                base,
                wall["stdlib"],
                wall["executor.run"],
                target="",
                limit=None,
                note=cpu_note("executor.run"),
            ),
        ]
    return rows
