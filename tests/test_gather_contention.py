"""Gathers when things go wrong at the same time: a full bounded queue seen
from an event loop, a limiter whose slots the enclosing calls hold, a
cancellation arriving as calls finish."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _waiting import LONG, no_line_left, running_call

import taut
from taut.gather import default_scheduler
from taut.journal import JournalError


@pytest.fixture
def narrow() -> Iterator[taut.ThreadPoolExecutor]:
    """One worker and room for one waiting call."""
    with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
        yield ex


def _square(i: int) -> int:
    time.sleep(0.01)
    return i * i


# --------------------------------------------------------------------------
# A full bounded queue, seen from an event loop: taut's submit refuses there at
# once (it must not block the loop), so agather must wait for room itself.


def test_agather_on_a_bounded_queue_runs_a_batch_larger_than_the_queue(narrow: Any) -> None:
    async def main() -> list[taut.Outcome]:
        return await taut.agather([taut.call(_square, i) for i in range(6)], executor=narrow)

    outs = asyncio.run(asyncio.wait_for(main(), 60))
    assert [o.status for o in outs] == ["ok"] * 6
    assert [o.value for o in outs] == [i * i for i in range(6)]


def test_agather_calls_without_room_at_the_deadline_are_not_started(narrow: Any) -> None:
    gate, ran = threading.Event(), []

    def blocked(i: int) -> int:
        ran.append(i)
        gate.wait(30)
        return i

    async def main() -> list[taut.Outcome]:
        return await taut.agather(
            [taut.call(blocked, i) for i in range(4)], executor=narrow, timeout=0.2
        )

    try:
        outs = asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        gate.set()
    assert [o.status for o in outs] == ["timeout", "not_started", "not_started", "not_started"]
    narrow.submit(int).result(timeout=30)  # the queue behind the abandoned call drained
    assert ran == [0]  # the calls that never got room never ran afterwards


def test_a_single_await_on_a_full_bounded_queue_waits_for_room(narrow: Any) -> None:
    gate = threading.Event()
    holding = [narrow.submit(gate.wait, 30), narrow.submit(gate.wait, 30)]  # worker + queue

    scheduler = taut.Scheduler(executor=narrow)

    async def via_scheduler() -> int:
        handle = scheduler.call(_square, 7)
        waiter = asyncio.ensure_future(handle)
        for _ in range(5):
            await asyncio.sleep(0.01)
        assert not waiter.done()
        gate.set()
        return await waiter

    try:
        assert asyncio.run(asyncio.wait_for(via_scheduler(), 60)) == 49
    finally:
        gate.set()
    assert all(f.result(timeout=30) for f in holding)


class _CountingPool(taut.ThreadPoolExecutor):
    """Counts the submits its full bounded queue refused."""

    refused = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().submit(fn, *args, **kwargs)
        except taut.QueueFull:
            self.refused += 1
            raise


class _CountingLimiter:
    """A limiter that counts the slots it gave out."""

    def __init__(self, slots: int) -> None:
        self._semaphore = threading.BoundedSemaphore(slots)
        self.given = 0

    def acquire(self, timeout: float | None = None) -> bool:
        got = self._semaphore.acquire(timeout=timeout)
        self.given += got
        return got

    def release(self) -> None:
        self._semaphore.release()


async def _full_with_a_coroutine_waiting(
    pool: taut.ThreadPoolExecutor, order: list[str]
) -> tuple[threading.Event, asyncio.Future[Any]]:
    """``pool`` (one worker, ``max_queue=1``): a call running and one queued,
    both held by the gate returned, and coroutine "A" waiting for room (its task)."""
    gate = threading.Event()
    held = [await running_call(pool, gate.wait, 30)]
    held.append(asyncio.ensure_future(pool.run(gate.wait, 30)))
    await asyncio.sleep(0)
    assert pool.stats().queued == 1
    first = asyncio.ensure_future(pool.run(order.append, "A"))
    await asyncio.sleep(0)  # "A" waits for room
    _holding.extend(held)
    return gate, first


_holding: list[asyncio.Future[Any]] = []


@pytest.mark.parametrize("limited", [False, True])
def test_agather_waits_in_the_pools_line_of_room_without_polling(limited: bool) -> None:
    # A batch's call on a full bounded queue waits in the pool's own line of
    # room, in FIFO order with the coroutines waiting there (not asking
    # again every few milliseconds, giving its limiter slot back each time):
    # it is never refused (it queues behind "A" at once), takes its limiter
    # slot once, and runs between "A", before it, and "B", after it.
    order: list[str] = []
    limiter = _CountingLimiter(4) if limited else None

    async def main() -> list[taut.Outcome]:
        with _CountingPool(1, max_queue=1) as pool:
            gate, first = await _full_with_a_coroutine_waiting(pool, order)
            try:
                batch = asyncio.ensure_future(
                    taut.agather([taut.call(order.append, "G")], executor=pool, limiter=limiter)
                )
                for _ in range(10):  # the batch starts and its call waits for room
                    await asyncio.sleep(0)
                last = asyncio.ensure_future(pool.run(order.append, "B"))
                await asyncio.sleep(0)
                assert not batch.done()
            finally:
                gate.set()
            outs, *_ = await asyncio.wait_for(asyncio.gather(batch, first, last), LONG)
            assert pool.refused == 0
            return outs  # type: ignore[no-any-return]

    outs = asyncio.run(main())
    assert [o.status for o in outs] == ["ok"]
    assert order == ["A", "G", "B"]
    if limiter is not None:
        assert limiter.given == 1


def test_a_single_await_waits_in_the_pools_line_of_room_without_polling() -> None:
    order: list[str] = []

    async def main() -> None:
        with _CountingPool(1, max_queue=1) as pool:
            scheduler = taut.Scheduler(executor=pool)
            gate, first = await _full_with_a_coroutine_waiting(pool, order)
            try:
                single = asyncio.ensure_future(scheduler.call(order.append, "H"))
                for _ in range(10):
                    await asyncio.sleep(0)
                last = asyncio.ensure_future(pool.run(order.append, "B"))
                await asyncio.sleep(0)
                assert not single.done()
            finally:
                gate.set()
            await asyncio.wait_for(asyncio.gather(single, first, last), LONG)
            assert pool.refused == 0

    asyncio.run(main())
    assert order == ["A", "H", "B"]


def test_agather_cancelled_while_its_calls_wait_for_room_runs_none_of_them(narrow: Any) -> None:
    ran: list[int] = []

    async def main() -> None:
        gate, first = await _full_with_a_coroutine_waiting(narrow, [])
        try:
            batch = asyncio.ensure_future(
                taut.agather([taut.call(ran.append, i) for i in range(3)], executor=narrow)
            )
            for _ in range(10):
                await asyncio.sleep(0)
            batch.cancel()
            with pytest.raises(asyncio.CancelledError):
                await batch
        finally:
            gate.set()
        await asyncio.wait_for(first, LONG)
        await no_line_left(narrow)  # the cancelled calls left the line

    asyncio.run(main())
    assert ran == []


def test_agather_calls_waiting_for_room_when_the_pool_shuts_down_are_cancelled(narrow: Any) -> None:
    # The calls that reached the pool run; those still waiting in its line
    # are refused by the shut down pool: cancelled, as a shutdown cancels
    # queued calls, never an error or a hang.
    gate = threading.Event()

    def held(i: int) -> int:
        gate.wait(30)
        return i

    async def main() -> list[taut.Outcome]:
        batch = asyncio.ensure_future(
            taut.agather([taut.call(held, i) for i in range(4)], executor=narrow)
        )
        while narrow.stats().queued == 0:
            await asyncio.sleep(0.001)
        for _ in range(10):  # calls 2 and 3 wait in line
            await asyncio.sleep(0)
        narrow.shutdown(wait=False)
        gate.set()
        return await asyncio.wait_for(batch, LONG)

    try:
        outs = asyncio.run(main())
    finally:
        gate.set()
    assert [o.status for o in outs] == ["ok", "ok", "cancelled", "cancelled"]


# --------------------------------------------------------------------------
# A batch nested in a call (a tool starting a sub-agent) runs its calls inline
# on the call's thread; with a limiter, that call already holds a slot. If the
# enclosing calls hold every slot, waiting for another one would wait until the
# deadline: the nested calls run under the slot held instead.


def _leaf() -> str:
    return "leaf"


def test_a_sub_agent_batch_runs_under_its_tools_limiter_slot() -> None:
    limiter = threading.BoundedSemaphore(1)
    with taut.ToolRunner(
        2, limiter=limiter, concurrent_batch_timeout=30, sequential_call_timeout=30
    ) as runner:

        def sub_agent() -> str:
            inner = runner.run([taut.ToolCall("leaf", _leaf, read_only=True)], timeout=5)
            return f"{inner[0].status}:{inner[0].text}"

        [result] = runner.run([taut.ToolCall("sub", sub_agent)])
    assert (result.status, result.text) == ("ok", "ok:leaf")
    assert limiter.acquire(timeout=0)  # the one slot came back


def test_a_nested_gather_with_the_same_limiter_runs_under_the_held_slot() -> None:
    limiter = threading.BoundedSemaphore(1)

    def inner_sync() -> list[str]:
        outs = taut.gather([taut.call(_leaf) for _ in range(3)], limiter=limiter, timeout=5)
        return [o.status for o in outs]

    def inner_async() -> list[str]:
        async def main() -> list[taut.Outcome]:
            return await taut.agather([taut.call(_leaf)], limiter=limiter, timeout=5)

        return [o.status for o in asyncio.run(main())]

    outs = taut.gather([taut.call(inner_sync), taut.call(inner_async)], limiter=limiter, timeout=30)
    assert [o.value for o in outs] == [["ok"] * 3, ["ok"]]
    assert limiter.acquire(timeout=0)


def test_a_nested_gather_still_waits_for_a_different_limiter() -> None:
    other = threading.BoundedSemaphore(1)
    other.acquire()  # held elsewhere: the nested calls cannot get a slot

    def inner() -> list[str]:
        outs = taut.gather([taut.call(_leaf)], limiter=other, timeout=0.2)
        return [o.status for o in outs]

    try:
        [out] = taut.gather([taut.call(inner)], limiter=threading.BoundedSemaphore(1))
    finally:
        other.release()
    assert out.value == ["not_started"]


# --------------------------------------------------------------------------
# Cancellation (or Ctrl-C) arriving when some calls have finished but the batch
# has not settled them yet: their outcomes are kept, on the handle and in the
# journal, so a resumed run replays them instead of running them twice.


def test_a_coroutine_finished_when_the_agather_is_cancelled_keeps_its_outcome(
    tmp_path: Path,
) -> None:
    journal = taut.SqliteJournal(tmp_path / "j.db", run="cancel")
    runs: list[str] = []

    async def main() -> list[taut.Call[Any]]:
        gatherer = asyncio.current_task()
        assert gatherer is not None

        async def send_email() -> str:
            runs.append("sent")
            gatherer.cancel()  # the caller gives up just as this call finishes
            return "sent"

        async def slow() -> None:
            await asyncio.sleep(30)

        handles = [taut.call(send_email), taut.call(slow)]
        with pytest.raises(asyncio.CancelledError):
            await taut.agather(handles, journal=journal)
        return handles

    sent, slow = asyncio.run(asyncio.wait_for(main(), 60))
    assert sent.done() and sent.outcome() is not None and sent.outcome().value == "sent"
    assert not slow.done()  # cancelled: not cached, may run again
    assert [status for _, _, status in journal.records()] == ["ok", "pending"]
    journal.close()
    rerun = taut.SqliteJournal(tmp_path / "j.db", run="cancel")
    [record, pending] = rerun.reserve([sent.call_id or "", slow.call_id or ""])
    assert record is not None and record.value == "sent" and pending is None
    assert runs == ["sent"]
    rerun.close()


def test_calls_finished_when_one_raises_keyboardinterrupt_are_journaled(tmp_path: Path) -> None:
    journal = taut.SqliteJournal(tmp_path / "j.db", run="ki")

    def interrupted() -> None:
        raise KeyboardInterrupt

    def run_now(_executor: Any, job: Any) -> cf.Future[Any]:
        # Every call is done before the batch looks: the batch settles them in
        # whatever order the done set gives, the interrupt often first.
        future: cf.Future[Any] = cf.Future()
        future.set_result(job.runnable()())
        return future

    handles = [taut.call(interrupted)] + [taut.call(_square, i) for i in range(30)]
    with pytest.raises(KeyboardInterrupt):
        default_scheduler().gather(handles, journal=journal, submit=run_now)
    statuses = [status for _, _, status in journal.records()]
    assert statuses == ["pending"] + ["ok"] * 30
    assert all(h.done() for h in handles[1:])
    journal.close()


# --------------------------------------------------------------------------
# A call cut loose at the deadline may run on (an abandoned thread, a standard
# pool's thread): its limiter slot is free from the deadline on, exactly once.


class CountingLimiter:
    """A one-slot limiter that records every acquire and release."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held = 0
        self.errors: list[str] = []

    def acquire(self, timeout: float | None = None) -> bool:
        with self.lock:
            if self.held:
                return False
            self.held = 1
            return True

    def release(self) -> None:
        with self.lock:
            if not self.held:
                self.errors.append("released a slot nobody held")
            self.held = 0


@pytest.mark.parametrize("kind", ["taut", "stdlib", "async"])
def test_a_call_cut_loose_at_the_deadline_gives_its_slot_back_once(kind: str) -> None:
    limiter, gate = CountingLimiter(), threading.Event()
    handles = [taut.call(gate.wait, 30)]
    executor: cf.Executor = (
        cf.ThreadPoolExecutor(2) if kind == "stdlib" else taut.ThreadPoolExecutor(2)
    )
    try:
        if kind == "async":

            async def main() -> list[taut.Outcome]:
                return await taut.agather(handles, executor=executor, limiter=limiter, timeout=0.1)

            [out] = asyncio.run(asyncio.wait_for(main(), 60))
        else:
            [out] = taut.gather(handles, executor=executor, limiter=limiter, timeout=0.1)
        assert out.status == "timeout"
        assert limiter.held == 0  # free while the call still hangs
        # The next batch gets the slot at once.
        [again] = taut.gather([taut.call(_square, 3)], executor=executor, limiter=limiter)
        assert again.value == 9
    finally:
        gate.set()
        executor.shutdown(wait=True)
    assert limiter.errors == []  # the hung call's end gave nothing back twice


# --------------------------------------------------------------------------
# Awaiting a handle that another run holds: the await waits on its own loop,
# not on a thread of the loop's default executor (each waiter would take one,
# and with them asyncio.to_thread and run_in_executor(None, ...) of the app).


def test_awaits_of_a_running_handle_take_no_default_executor_thread() -> None:
    gate, started = threading.Event(), threading.Event()

    def hold() -> bool:
        started.set()
        return gate.wait(30)

    handle = taut.call(hold)

    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(cf.ThreadPoolExecutor(1))
        holder = asyncio.ensure_future(taut.agather([handle]))
        while not started.is_set():
            await asyncio.sleep(0.01)
        waiters = [asyncio.ensure_future(handle) for _ in range(3)]
        await asyncio.sleep(0.05)  # the waiters are parked by now
        waiters[0].cancel()  # one gives up: the rest still get the value
        # The default executor's one thread is free for the app.
        assert await asyncio.wait_for(loop.run_in_executor(None, int, "7"), 5) == 7
        assert not any(w.done() for w in waiters[1:])
        gate.set()
        await holder
        return await asyncio.gather(*waiters, return_exceptions=True)

    try:
        got = asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        gate.set()
    assert isinstance(got[0], asyncio.CancelledError)
    assert got[1:] == [True, True]


# --------------------------------------------------------------------------
# A pool shut down while a batch runs (a gateway stopping): the calls it
# refuses from then on are cancelled, like the queued calls the shutdown
# cancels, and the batch still returns every outcome.


@pytest.mark.parametrize("kind", ["taut", "stdlib"])
def test_a_pool_shut_down_mid_batch_cancels_the_calls_it_refuses(kind: str) -> None:
    pool: cf.ThreadPoolExecutor = (
        taut.ThreadPoolExecutor(1) if kind == "taut" else cf.ThreadPoolExecutor(1)
    )

    def stops_the_pool() -> str:
        pool.shutdown(wait=False, cancel_futures=True)
        return "stopped"

    handles = [taut.call(stops_the_pool)] + [taut.call(_square, i) for i in range(3)]
    outs = taut.gather(handles, executor=pool, max_parallel=1)
    assert [o.status for o in outs] == ["ok", "cancelled", "cancelled", "cancelled"]
    assert not any(o.started for o in outs[1:])
    assert handles[0].done() and not handles[1].done()  # cancelled: may run again elsewhere
    pool.shutdown(wait=True)
    # Shut down before the batch began: the caller's mistake, said at once.
    with pytest.raises(RuntimeError, match="after shutdown"):
        taut.gather([taut.call(_square, 1)], executor=pool)


def test_a_journal_failure_while_the_pool_is_shut_down_is_not_turned_into_cancelled(
    tmp_path: Path,
) -> None:
    # A batch nested in a call runs its calls inline on the pool's worker. Its
    # first call ran (and finished) while the pool was being shut down (a
    # gateway stopping); recording it fails (here: the journal file is gone).
    # drive.steps catches RuntimeError around start(e), which for an inline
    # call includes running it and journaling it: JournalError is a
    # RuntimeError, the pool is shut down, so the call that ran is reported
    # 'cancelled' (started=False) and the journal failure is swallowed.
    path = tmp_path / "j.db"
    journal = taut.SqliteJournal(path, run="r")
    pool = taut.ThreadPoolExecutor(1)
    ran: list[str] = []

    def side_effect() -> str:
        ran.append("sent")
        pool.shutdown(wait=False)
        for leftover in tmp_path.iterdir():
            os.unlink(leftover)  # the journal can no longer record
        return "sent"

    def nested() -> Any:
        try:
            return taut.gather([taut.call(side_effect)], executor=pool, journal=journal)
        except JournalError as exc:
            return exc

    try:
        got = pool.submit(nested).result(timeout=60)
    finally:
        pool.shutdown(wait=True)
        journal.close()
    assert ran == ["sent"]
    # Expected: the JournalError reaches the caller, as it does with the pool open.
    assert isinstance(got, JournalError), got
