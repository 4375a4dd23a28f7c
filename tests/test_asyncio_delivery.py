"""Every completion of the asyncio path reaches its awaiting task exactly once:
under cancellation races, with a loop slow to drain, with loops closing, and
with many loops in many threads on one executor.

The loops here count every attempt to settle the futures taut makes for
them. A completion delivered twice would otherwise go unseen: the second
``set_result`` raises ``InvalidStateError``, which the loop's reader
swallows, as it must for a task cancelled while its call ran. Each call
returns (or raises) its own number, so the deliveries per number must equal
the runs per number: a call that ran delivered its outcome exactly once, a
call that never ran delivered nothing.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import socket
import sys
import threading
import warnings
import weakref
from collections import Counter
from collections.abc import Coroutine
from typing import Any, Callable

import pytest
from _waiting import abandon, running_call, wait_until

import taut
from taut import _loop_waker

LONG = 30.0
KINDS = ("run", "to_thread", "run_in_executor")

pytestmark = pytest.mark.usefixtures("no_pending_task_destroyed")


class _Failed(Exception):
    """Raised by every seventh call, with the call's number."""


class _CountingFuture(asyncio.Future):  # type: ignore[type-arg]
    """Counts each attempt to settle it on its loop, before asyncio accepts
    or refuses it."""

    def set_result(self, result: Any) -> None:
        if isinstance(result, int):  # a call's outcome (room notices carry None)
            self.get_loop().delivered[result] += 1  # type: ignore[attr-defined]
        super().set_result(result)

    def set_exception(self, exception: Any) -> None:
        if isinstance(exception, _Failed):
            self.get_loop().delivered[exception.args[0]] += 1  # type: ignore[attr-defined]
        super().set_exception(exception)


class _CountingLoop(asyncio.SelectorEventLoop):
    """A loop whose futures made by taut count their deliveries."""

    def __init__(self) -> None:
        super().__init__()
        self.delivered: Counter[int] = Counter()

    def create_future(self) -> asyncio.Future[Any]:
        if sys._getframe(1).f_globals.get("__name__") == "taut._asyncio":
            return _CountingFuture(loop=self)
        return super().create_future()


def _run_counting(main: Callable[[], Coroutine[Any, Any, Any]]) -> tuple[Any, Counter[int]]:
    """``asyncio.run(main())`` on a counting loop: the outcome and the deliveries."""
    loop = _CountingLoop()
    try:
        return loop.run_until_complete(main()), loop.delivered
    finally:
        loop.close()


class _Calls:
    """Numbered calls that count their runs; every seventh one raises."""

    def __init__(self, total: int) -> None:
        self.runs: Counter[int] = Counter()
        self.lock = threading.Lock()
        self.total = total
        self.all_ran = threading.Event()

    def work(self, i: int) -> int:
        with self.lock:
            self.runs[i] += 1
            if sum(self.runs.values()) == self.total:
                self.all_ran.set()
        if i % 7 == 0:
            raise _Failed(i)
        return i

    def start(
        self, ex: taut.ThreadPoolExecutor, i: int, kinds: tuple[str, ...] = KINDS
    ) -> asyncio.Future[int]:
        """Call ``work(i)`` the way ``i`` picks: ``ex.run``, ``taut.to_thread``
        (on the loop's default executor, or taut's shared one) or
        ``loop.run_in_executor``."""
        kind = kinds[i % len(kinds)]
        if kind == "run":
            return asyncio.ensure_future(ex.run(self.work, i))
        if kind == "to_thread":
            return asyncio.ensure_future(taut.to_thread(self.work, i))
        return asyncio.get_running_loop().run_in_executor(ex, self.work, i)

    def check(
        self, futures: list[asyncio.Future[int]], outcomes: list[Any], delivered: Counter[int]
    ) -> None:
        """Each call ran at most once and delivered exactly once per run; every
        task that was not cancelled got its own call's outcome."""
        assert max(self.runs.values(), default=0) <= 1
        assert +delivered == +self.runs
        for i, (future, outcome) in enumerate(zip(futures, outcomes)):
            if future.cancelled():
                continue
            assert self.runs[i] == 1
            if i % 7 == 0:
                assert isinstance(outcome, _Failed) and outcome.args == (i,)
            else:
                assert outcome == i


def test_cancellation_races_deliver_each_outcome_once_and_lose_none() -> None:
    # Tasks cancelled at random moments: while their call is queued, running,
    # or finished but not yet drained from the loop's channel.
    n = 1500
    calls = _Calls(n)
    rng = random.Random(8)

    async def main() -> tuple[list[asyncio.Future[int]], list[Any], taut.PoolStats]:
        with taut.ThreadPoolExecutor(4) as ex:
            asyncio.get_running_loop().set_default_executor(ex)
            futures = [calls.start(ex, i) for i in range(n)]
            await asyncio.sleep(0)  # every call submitted
            for _ in range(40):
                for future in rng.sample(futures, 15):
                    future.cancel()
                await asyncio.sleep(0)
            outcomes = await asyncio.wait_for(
                asyncio.gather(*futures, return_exceptions=True), LONG
            )
        return futures, outcomes, ex.stats()  # stats once every worker is done

    (futures, outcomes, stats), delivered = _run_counting(main)
    calls.check(futures, outcomes, delivered)
    assert any(f.cancelled() for f in futures) and not all(f.cancelled() for f in futures)
    # No call lost: each one either ran or was taken out unrun.
    assert stats.completed + stats.failed == sum(calls.runs.values())
    assert stats.completed + stats.failed + stats.cancelled == n


def test_a_loop_slow_to_drain_gets_every_completion_once() -> None:
    # In each round the loop is blocked until every call has finished: all
    # the outcomes wait in its channel, and one drain settles them all. The
    # next round needs a fresh wake-up of the loop.
    n = 300

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, _CountingLoop)
        waiting = []
        with taut.ThreadPoolExecutor(4) as ex:
            loop.set_default_executor(ex)
            for _ in range(3):
                calls = _Calls(n)
                before = loop.delivered.copy()
                futures = [calls.start(ex, i) for i in range(n)]
                await asyncio.sleep(0)  # every call submitted
                assert calls.all_ran.wait(LONG)  # the loop does not run meanwhile
                channel = _loop_waker.waker_for(loop).channel
                assert channel is not None
                waiting.append(len(channel))
                outcomes = await asyncio.wait_for(
                    asyncio.gather(*futures, return_exceptions=True), LONG
                )
                calls.check(futures, outcomes, loop.delivered - before)
        return waiting

    waiting, _ = _run_counting(main)
    assert waiting == [n, n, n]  # the outcomes really waited for the loop


def test_many_loops_in_many_threads_with_cancellations_each_get_their_own() -> None:
    # Six loops share one executor; each cancels some of its calls. Every
    # loop gets exactly its own outcomes, each once.
    ex = taut.ThreadPoolExecutor(4)
    per_loop = 300
    checked: dict[int, bool] = {}

    def thread_main(t: int) -> None:
        calls = _Calls(per_loop)
        rng = random.Random(t)

        async def main() -> tuple[list[asyncio.Future[int]], list[Any]]:
            # to_thread: on taut's shared executor, also one for every loop.
            # (Not ex as default executor: a loop closing shuts that down.)
            futures = [calls.start(ex, i) for i in range(per_loop)]
            await asyncio.sleep(0)
            for future in rng.sample(futures, per_loop // 5):
                future.cancel()
                await asyncio.sleep(0)
            outcomes = await asyncio.wait_for(
                asyncio.gather(*futures, return_exceptions=True), LONG
            )
            return futures, outcomes

        (futures, outcomes), delivered = _run_counting(main)
        calls.check(futures, outcomes, delivered)
        checked[t] = True

    threads = [threading.Thread(target=thread_main, args=(t,)) for t in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(LONG)
    ex.shutdown()
    assert checked == {t: True for t in range(6)}


def test_a_loop_closing_with_calls_in_flight_leaves_other_loops_and_workers_whole(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # One loop leaves (asyncio.run cancels its tasks) while two of its calls
    # run and three wait in the queue: the cancelled waiting ones never run,
    # the others finish into a channel nobody reads. Another loop keeps
    # using the executor meanwhile and gets every outcome once.
    ex = taut.ThreadPoolExecutor(2)
    gate = threading.Event()
    leaving = _Calls(5)
    started = threading.Semaphore(0)

    def blocked(i: int) -> int:
        started.release()
        gate.wait(LONG)
        return leaving.work(i)

    async def leave_early() -> None:
        running = [asyncio.ensure_future(ex.run(blocked, i)) for i in range(2)]
        for _ in range(2):
            while not started.acquire(blocking=False):
                await asyncio.sleep(0.001)
        queued = [leaving.start(ex, i, ("run", "run_in_executor")) for i in range(2, 5)]
        await asyncio.sleep(0)
        assert ex.stats().queued == 3
        assert not any(f.done() for f in running + queued)
        # Returning leaves them to asyncio.run, which cancels them.

    with caplog.at_level(logging.WARNING):
        asyncio.run(leave_early())
        gc.collect()  # the loop and its channel's reading end are gone
        # The ex.run tasks were cancelled on the way out: their calls left
        # the queue at once. (run_in_executor's future is no task: asyncio.run
        # leaves it alone, and its call runs later, as in the standard library.)
        assert ex.stats().cancelled == 2

        staying = _Calls(200)

        async def stay() -> tuple[list[asyncio.Future[int]], list[Any]]:
            futures = [staying.start(ex, i) for i in range(200)]
            await asyncio.sleep(0)
            gate.set()  # the closed loop's calls finish among ours
            outcomes = await asyncio.wait_for(
                asyncio.gather(*futures, return_exceptions=True), LONG
            )
            return futures, outcomes

        (futures, outcomes), delivered = _run_counting(stay)
        staying.check(futures, outcomes, delivered)
        ex.shutdown()
    assert sorted(leaving.runs) == [0, 1, 3]  # 2 and 4 (ex.run) never ran
    assert ex.stats().cancelled == 2
    assert ex.stats().workers == 0
    assert not [r for r in caplog.records if r.name.startswith("concurrent")]


def test_a_loop_closed_with_calls_queued_then_shut_down_with_cancel_futures() -> None:
    # A loop stopped and closed without cancelling its tasks: their calls
    # stay queued. shutdown(cancel_futures=True) must not fail on telling a
    # closed loop, and the calls never run.
    ex = taut.ThreadPoolExecutor(1)
    gate = threading.Event()
    ran: list[int] = []
    loop = asyncio.new_event_loop()

    async def start() -> list[asyncio.Future[Any]]:
        left = [abandon(await running_call(ex, gate.wait, LONG))]
        left.append(abandon(asyncio.ensure_future(ex.run(ran.append, 1))))
        left.append(loop.run_in_executor(ex, ran.append, 2))
        await asyncio.sleep(0)
        return left

    left = loop.run_until_complete(start())
    loop.close()  # the tasks are left pending, their calls queued
    assert not any(f.done() for f in left)
    assert ex.stats().queued == 2
    ex.shutdown(wait=False, cancel_futures=True)
    gate.set()
    ex.shutdown()
    assert ran == []


def test_a_loop_closed_while_its_call_ran_is_let_go_with_its_descriptors() -> None:
    # The call finishes after its loop closed: its outcome, pushed onto the
    # loop's channel, references the loop. Once another loop starts, the
    # closed one lets go: the loop, its waker and the waker's socket pair
    # are freed, not held for good (one leak per asyncio.run otherwise).
    ex = taut.ThreadPoolExecutor(1)
    gate = threading.Event()
    loops: list[weakref.ReferenceType[asyncio.AbstractEventLoop]] = []
    readers: list[socket.socket] = []

    async def leave_early() -> asyncio.Future[bool]:
        loop = asyncio.get_running_loop()
        loops.append(weakref.ref(loop))
        call = await running_call(ex, gate.wait, LONG)
        readers.append(_loop_waker.waker_for(loop)._reader)
        return call  # left running: asyncio.run cancels the task on the way out

    asyncio.run(leave_early())
    gate.set()
    wait_until(lambda: ex.stats().completed == 1)  # its outcome went to the closed loop

    async def next_request() -> int:
        return await ex.run(abs, -1)

    assert asyncio.run(next_request()) == 1
    ex.shutdown()
    gc.collect()
    assert loops[0]() is None
    assert readers[0].fileno() == -1  # closed


def _start_and_leave(ex: taut.ThreadPoolExecutor, kind: str, gate: threading.Event) -> tuple[
    weakref.ReferenceType[asyncio.AbstractEventLoop], socket.socket
]:
    """On a new loop, start ``gate.wait`` the way ``kind`` picks, cancel the
    awaiting task once the call runs (the call outlives its await), and drop
    the loop without closing it. Returns a weak reference to the loop and
    its waker's reading end."""
    loop = asyncio.new_event_loop()
    started = threading.Event()

    def call() -> bool:
        started.set()
        return gate.wait(LONG)

    async def leave_early() -> None:
        if kind == "run":
            awaited: asyncio.Future[Any] = asyncio.ensure_future(ex.run(call))
        elif kind == "to_thread":
            loop.set_default_executor(ex)
            awaited = asyncio.ensure_future(taut.to_thread(call))
        else:
            awaited = loop.run_in_executor(ex, call)
        while not started.is_set():
            await asyncio.sleep(0.001)
        awaited.cancel()
        with pytest.raises(asyncio.CancelledError):
            await awaited

    loop.run_until_complete(leave_early())
    reader = _loop_waker.waker_for(loop)._reader
    return weakref.ref(loop), reader  # the loop is dropped here, never closed


@pytest.mark.parametrize("kind", KINDS)
def test_a_loop_dropped_unclosed_after_its_call_outlived_its_await_is_collected(
    kind: str,
) -> None:
    # The calls finish after their loops were dropped without close(): each
    # outcome waits in its loop's channel, referencing the loop, whose reader
    # callback references the channel. The collector must see that cycle
    # and free it: the loops, and their wakers' descriptors. Before, the
    # channel's contents were out of the collector's sight and the module's
    # tables held every waker: 200 such loops left 510 descriptors open.
    ex = taut.ThreadPoolExecutor(3)  # a worker for each loop's call
    gate = threading.Event()
    dropped = [_start_and_leave(ex, kind, gate) for _ in range(3)]
    gate.set()
    ex.shutdown()  # every outcome is in its loop's channel now
    # No other loop comes: taut's fast lookups, which name the last dropped
    # loop, hold it weakly (before, they held it until another loop came).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # "unclosed event loop"
        gc.collect()
    assert [loop_ref() for loop_ref, _ in dropped] == [None, None, None]
    assert [reader.fileno() for _, reader in dropped] == [-1, -1, -1]
