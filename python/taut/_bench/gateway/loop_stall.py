"""(c) loop stall: a 1 ms ticker on an event loop while five 0.2 s calls go
to a one-worker default executor whose queue holds one call: how long the
loop goes without a tick when calls do not fit."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import functools
import time
from typing import Any

import taut
from taut._bench import Row, interleaved_samples
from taut._bench.gateway.common import _row

STALL_CALLS = 5
STALL_SLEEP = 0.2
TICK = 0.001


def loop_stall(kind: str) -> tuple[float, int]:
    """The worst gap between ticks of a 1 ms ticker while ``STALL_CALLS``
    calls of ``time.sleep(STALL_SLEEP)`` go to a one-worker default executor,
    and how many calls were refused with QueueFull.

    ``stdlib``: ``asyncio.to_thread`` on the stdlib's pool (unbounded queue);
    ``taut.to_thread``: taut's pool with ``max_queue=1``, calls that do not
    fit wait for room on the loop; ``asyncio.to_thread``: the same pool
    through asyncio's own ``to_thread`` (``submit`` on the loop's thread
    refuses a full queue at once); ``idle``: the ticker alone for as long as
    the calls take, this machine's own floor."""

    async def main() -> tuple[float, int]:
        loop = asyncio.get_running_loop()
        if kind == "stdlib":
            loop.set_default_executor(cf.ThreadPoolExecutor(1))
        elif kind != "idle":
            loop.set_default_executor(taut.ThreadPoolExecutor(1, max_queue=1))
        await asyncio.to_thread(int)  # the worker started outside the measurement
        worst = 0.0
        stop = False

        async def ticker() -> None:
            nonlocal worst
            last = time.perf_counter()
            while not stop:
                await asyncio.sleep(TICK)
                now = time.perf_counter()
                worst = max(worst, now - last)
                last = now

        ticking = asyncio.ensure_future(ticker())
        await asyncio.sleep(0.01)  # the ticker is running before the calls start
        if kind == "idle":
            await asyncio.sleep(STALL_CALLS * STALL_SLEEP)
            outcomes: list[Any] = []
        else:
            to_thread = taut.to_thread if kind == "taut.to_thread" else asyncio.to_thread
            outcomes = await asyncio.gather(
                *[to_thread(time.sleep, STALL_SLEEP) for _ in range(STALL_CALLS)],
                return_exceptions=True,
            )
        stop = True
        await ticking
        refused = sum(isinstance(o, taut.QueueFull) for o in outcomes)
        return worst, refused

    return asyncio.run(main())


def bench_loop_stall(quick: bool) -> list[Row]:
    rounds = 1 if quick else 3
    kinds = ("idle", "stdlib", "taut.to_thread", "asyncio.to_thread")
    s = interleaved_samples({k: functools.partial(loop_stall, k) for k in kinds}, rounds)
    worst = {k: [w for w, _ in v] for k, v in s.items()}
    refused = max(r for _, r in s["asyncio.to_thread"])
    note = (
        f"max over {rounds} round(s): taut {max(worst['taut.to_thread']) * 1e3:.1f} ms, "
        f"stdlib {max(worst['stdlib']) * 1e3:.1f} ms, ticker alone "
        f"{max(worst['idle']) * 1e3:.1f} ms; asyncio.to_thread on the taut pool: "
        f"{refused}/{STALL_CALLS} refused at once with QueueFull, worst gap "
        f"{max(worst['asyncio.to_thread']) * 1e3:.1f} ms"
    )
    # The target is absolute (the worst gap's median), not a ratio against the stdlib.
    return [
        _row(
            f"(c) loop stall: {STALL_CALLS} x to_thread(sleep {STALL_SLEEP:g} s), "
            f"1 worker, max_queue=1, worst gap of a {TICK * 1e3:.0f} ms ticker",
            "stdlib (unbounded queue)",
            worst["stdlib"],
            worst["taut.to_thread"],
            target="< 20 ms",
            limit=lambda r: r.taut < 0.020,
            note=note,
        )
    ]
