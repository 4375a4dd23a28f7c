"""Overhead of run_bounded_sync / run_bounded_async on a fast call (issue 3 §8 b).

The baseline is the thread-per-call pattern of the deadline layer in seed 004,
written out here: a daemon thread per sync call whose completion the caller waits
for with ``Event.wait(timeout)``, and for awaitables two ``threading.Timer``
threads per call (the deadline, and the blocked-loop watchdog a grace period
later) that wake the loop with ``call_soon_threadsafe``. Overhead is the time of
a bounded call minus the time of the bare call, measured in the same run.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
from typing import Any, Callable

from taut._bench import Row, interleaved_samples, paired_row, per_call
from taut.bounded import run_bounded_async, run_bounded_sync
from taut.executor import default_executor

TARGET = 0.1  # at least 10x less overhead than the baseline


def _fast() -> int:
    return 1


async def _fast_async() -> int:
    return 1


def baseline_sync(fn: Callable[[], Any], timeout: float) -> tuple[bool, Any]:
    """Seed 004's run_bounded_sync: a fresh daemon thread per call."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def runner() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=runner, daemon=True).start()
    if not done.wait(timeout):
        return True, None
    if "error" in box:
        raise box["error"]
    return False, box["value"]


async def baseline_async(awaitable: Any, timeout: float, grace: float = 1.0) -> tuple[bool, Any]:
    """Seed 004's run_bounded_async: a deadline Timer and a watchdog Timer per call."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(awaitable)
    waiter: asyncio.Future[None] = loop.create_future()
    handled = threading.Event()

    def wake() -> None:
        if not waiter.done():
            waiter.set_result(None)

    def on_expire() -> None:
        handled.set()
        wake()

    def watchdog() -> None:
        if not handled.is_set():
            pass  # the seed dumps thread stacks here

    task.add_done_callback(lambda _t: wake())
    deadline = threading.Timer(timeout, lambda: loop.call_soon_threadsafe(on_expire))
    deadline.daemon = True
    guard = threading.Timer(timeout + grace, watchdog)
    guard.daemon = True
    deadline.start()
    guard.start()
    try:
        await waiter
    finally:
        deadline.cancel()
        guard.cancel()
    if task.done():
        return False, task.result()
    task.cancel()
    return True, None


def _sync_runners(n: int) -> dict[str, Callable[[], float]]:
    def bare(k: int) -> None:
        for _ in range(k):
            _fast()

    def taut(k: int) -> None:
        for _ in range(k):
            run_bounded_sync(_fast, 10.0)

    def seed(k: int) -> None:
        for _ in range(k):
            baseline_sync(_fast, 10.0)

    pool = default_executor()

    def round_trip(k: int) -> None:
        for _ in range(k):
            pool.submit(_fast).result()

    return {
        "bare": per_call(bare, n),
        "taut": per_call(taut, n),
        "seed": per_call(seed, n),
        # Not a contender: the floor any worker-thread design pays (one hand-off
        # to a pooled worker and back), shown in the note for context.
        "round_trip": per_call(round_trip, n),
    }


def _async_runners(loop: asyncio.AbstractEventLoop, n: int) -> dict[str, Callable[[], float]]:
    async def bare(k: int) -> None:
        for _ in range(k):
            await _fast_async()

    async def taut(k: int) -> None:
        for _ in range(k):
            await run_bounded_async(_fast_async(), 10.0)

    async def seed(k: int) -> None:
        for _ in range(k):
            await baseline_async(_fast_async(), 10.0)

    def on_loop(coro_fn: Callable[[int], Any]) -> Callable[[int], None]:
        return lambda k: loop.run_until_complete(coro_fn(k))

    return {
        "bare": per_call(on_loop(bare), n),
        "taut": per_call(on_loop(taut), n),
        "seed": per_call(on_loop(seed), n),
    }


def _row(key: str, case: str, baseline_name: str, samples: dict[str, list[float]]) -> Row:
    # Overhead = bounded call minus the bare call of the same round.
    def overhead(name: str) -> list[float]:
        return [max(x - bare, 1e-12) for x, bare in zip(samples[name], samples["bare"])]

    bare = statistics.median(samples["bare"])
    note = f"bare call {bare * 1e6:.2f} µs"
    if "round_trip" in samples:
        trip = statistics.median(samples["round_trip"])
        # The round trip's overhead (the bare call taken off, as for the
        # rows' own figures) against the baseline's, paired by round: the
        # least ratio any design that runs fn on a worker can show.
        floor = statistics.median(
            trip_round / seed_round
            for trip_round, seed_round in zip(overhead("round_trip"), overhead("seed"))
        )
        note += (
            f"; pool submit().result() round trip {trip * 1e6:.1f} µs,"
            f" {floor:.3f}x the baseline's overhead: the floor of a call run on a worker"
        )
    return paired_row(
        key,
        case,
        baseline_name,
        overhead("seed"),
        overhead("taut"),
        target=f"<= {TARGET:g}x",
        met=TARGET,
        note=note,
    )


def run(quick: bool) -> list[Row]:
    """Overhead per bounded call on a fast function, taut against seed 004."""
    n = 200 if quick else 1000
    rounds = 5 if quick else 11
    # Warm up: the default executor's first worker, the timer thread.
    run_bounded_sync(_fast, 10.0)
    rows = [
        _row(
            "bounded.sync_overhead",
            "run_bounded_sync overhead (fast call)",
            "daemon thread + Event.wait",
            interleaved_samples(_sync_runners(n), rounds),
        )
    ]
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(run_bounded_async(_fast_async(), 10.0))
        rows.append(
            _row(
                "bounded.async_overhead",
                "run_bounded_async overhead (fast call)",
                "2 threading.Timer + call_soon_threadsafe",
                interleaved_samples(_async_runners(loop, n), rounds),
            )
        )
    finally:
        loop.close()
    return rows
