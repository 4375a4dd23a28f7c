"""A call that finished after the batch deadline is ``timeout``, however late
the batch got to see it; one that finished before it keeps its outcome, even
when the batch saw it only after the deadline.

``agather`` cannot watch its deadline while a coroutine blocks the event loop
(a careless tool doing sync I/O in ``async def``), as the sync gather cannot
while it runs a call inline: both judge a call by when it finished (the task
records that), never by when the batch got to look.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import multiprocessing
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _remote_calls import mark_then_sleep
from _waiting import LONG

import taut


def _block_the_loop_until(moment: float) -> None:
    """Sync work inside a coroutine: the loop runs nothing else meanwhile."""
    while time.monotonic() < moment:
        time.sleep(0.005)


@pytest.mark.parametrize("interrupt", [False, True])
def test_a_coroutine_that_blocks_the_loop_past_the_deadline_is_a_timeout(
    interrupt: bool,
) -> None:
    timeout = 0.5  # ample for the call to begin; it then overruns it
    began = time.monotonic()  # the batch's deadline is at least began + timeout

    async def careless() -> str:
        _block_the_loop_until(began + timeout + 0.1)
        return "late"

    async def main() -> list[taut.Outcome]:
        return await taut.agather([taut.call(careless)], timeout=timeout, interrupt=interrupt)

    [out] = asyncio.run(main())
    assert (out.status, out.value) == ("timeout", None)
    assert isinstance(out.error, TimeoutError)
    assert out.started


def test_a_coroutine_done_before_the_deadline_and_seen_late_keeps_its_outcome() -> None:
    timeout = 1.0  # the quick coroutine has all of it to return
    began = time.monotonic()

    async def main() -> list[taut.Outcome]:
        quick_done = asyncio.Event()

        async def quick() -> str:
            quick_done.set()
            return "on time"

        async def careless() -> str:
            await quick_done.wait()  # quick has finished: now hold up the loop
            _block_the_loop_until(began + timeout + 0.1)
            return "late"

        return await taut.agather([taut.call(quick), taut.call(careless)], timeout=timeout)

    quick, careless = asyncio.run(main())
    assert (quick.status, quick.value) == ("ok", "on time")
    assert careless.status == "timeout"


class Recording(cf.Executor):
    """A pool that lets the test see the futures it hands out."""

    def __init__(self, pool: cf.Executor) -> None:
        self.pool = pool
        self.futures: list[cf.Future[Any]] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        future = self.pool.submit(fn, *args, **kwargs)
        self.futures.append(future)
        return future


@pytest.fixture
def pool() -> Iterator[taut.ThreadPoolExecutor]:
    with taut.ThreadPoolExecutor(2) as ex:
        yield ex


def test_a_pool_call_that_finished_after_the_deadline_while_the_loop_was_blocked_is_a_timeout(
    pool: Any,
) -> None:
    timeout = 0.5  # ample for the call to begin; it then overruns it
    began = time.monotonic()
    executor = Recording(pool)

    def slow() -> str:
        _block_the_loop_until(began + timeout + 0.1)  # on a worker: past the deadline
        return "late"

    async def careless() -> str:
        # Holds the loop until the pool call is done: the batch sees both only now.
        end = time.monotonic() + LONG
        while not (executor.futures and executor.futures[0].done()):
            assert time.monotonic() < end, "the pool call never finished"
            time.sleep(0.005)
        return "late too"

    async def main() -> list[taut.Outcome]:
        return await taut.agather(
            [taut.call(slow), taut.call(careless)], executor=executor, timeout=timeout
        )

    outs = asyncio.run(main())
    assert [o.status for o in outs] == ["timeout", "timeout"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("interrupt", [False, True])
def test_a_call_in_another_process_that_ended_after_the_deadline_is_a_timeout(
    interrupt: bool, tmp_path: Path
) -> None:
    # Before: a call in another process kept whatever it reported when the
    # batch saw it done before expiring it. One interrupted at the deadline
    # came back as 'error' (its own DeadlineExpired, seen as the call's
    # failure: the flaky Dask test); one that merely overran came back 'ok'.
    # The other process judges by its own clock, which knows when the call
    # ended: both are timeouts, as they are on a local pool.
    timeout = 0.5  # ample for the call to begin; it then overruns it
    seconds = 60.0 if interrupt else timeout + 0.1  # interrupted, or just late
    with cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        executor = Recording(pool)

        async def careless() -> None:
            # Holds the loop until the remote call is done: the batch sees it
            # only now, already finished, never as a call still running.
            end = time.monotonic() + LONG
            while not (executor.futures and executor.futures[0].done()):
                assert time.monotonic() < end, "the remote call never finished"
                time.sleep(0.005)

        async def main() -> list[taut.Outcome]:
            batch = [taut.call(mark_then_sleep, str(tmp_path), "late", seconds)]
            gathering = asyncio.ensure_future(
                taut.agather(batch, executor=executor, timeout=timeout, interrupt=interrupt)
            )
            await asyncio.sleep(0)  # the batch submits its call
            await careless()
            return await gathering

        [out] = asyncio.run(main())
    assert out.status == "timeout", out
    assert isinstance(out.error, TimeoutError)
    assert out.started and out.value is None
    assert 0.0 <= out.elapsed_s <= timeout + 0.5  # run time up to the deadline, not beyond


@pytest.mark.parametrize("journaled", [False, True])
def test_a_call_that_finished_late_is_a_timeout_when_the_gather_is_cancelled_before_it_looks(
    pool: Any, journaled: bool
) -> None:
    # Before: an agather cancelled once the deadline had passed kept a call
    # that finished after it as 'ok', on its handle and in its journal (a
    # rerun replayed 'ok'), where the gather's own deadline handling, had it
    # run first, made it a 'timeout'. Now the batch judges a call by when it
    # finished, whoever gets there first.
    timeout = 0.5  # ample for the call to begin; it then overruns it
    began = time.monotonic()
    executor = Recording(pool)
    journal = taut.InMemoryJournal() if journaled else None

    def slow() -> str:
        _block_the_loop_until(began + timeout + 0.1)  # on a worker: past the deadline
        return "late"

    handle = taut.call(slow)

    async def main() -> None:
        gathering = asyncio.ensure_future(
            taut.agather([handle], executor=executor, timeout=timeout, journal=journal)
        )
        await asyncio.sleep(0)  # the batch submits its call
        # Hold the loop until the call is done: the batch has not looked yet
        # when it is cancelled.
        end = time.monotonic() + LONG
        while not (executor.futures and executor.futures[0].done()):
            assert time.monotonic() < end, "the pool call never finished"
            time.sleep(0.005)
        gathering.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gathering

    asyncio.run(main())
    cached = taut.gather([handle])[0]  # the handle's cached outcome: it does not run again
    assert (cached.status, cached.value) == ("timeout", None), cached
    if journal is not None:
        journal.close()
        [replayed] = taut.gather([taut.call(slow)], journal=journal.reopen())
        assert (replayed.status, replayed.replayed) == ("timeout", True), replayed


class HandsBackLate(cf.Executor):
    """Runs a call at once but hands its result back only once told to (as
    an executor whose results travel, an in-process Dask cluster's, does a
    little later than the call ends)."""

    def __init__(self, pool: cf.Executor) -> None:
        self.pool = pool
        self.hand_back = threading.Event()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        def run_then_hold() -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                self.hand_back.wait(LONG)

        return self.pool.submit(run_then_hold)


def _refuse() -> None:
    raise ValueError("refused on time")


@pytest.mark.parametrize("gathering", ["gather", "agather"])
@pytest.mark.parametrize(("fn", "status"), [(str.upper, "ok"), (_refuse, "error")])
def test_a_call_done_before_the_deadline_whose_result_comes_back_after_it_keeps_its_outcome(
    pool: Any, gathering: str, fn: Any, status: str
) -> None:
    # Before: 'timeout', the result not back from the executor when the
    # deadline came, though the call had returned (or raised) in this
    # process long before it; on an in-process Dask cluster a call that
    # ended a few milliseconds before its deadline sometimes came back so.
    executor = HandsBackLate(pool)
    args = ("on time",) if fn is str.upper else ()
    batch = [taut.call(fn, *args)]
    try:
        if gathering == "gather":
            [out] = taut.gather(batch, executor=executor, timeout=0.5)
        else:
            [out] = asyncio.run(taut.agather(batch, executor=executor, timeout=0.5))
    finally:
        executor.hand_back.set()
    assert out.status == status, out
    if status == "ok":
        assert out.value == "ON TIME"
    else:
        assert isinstance(out.error, ValueError)
    assert out.started and 0.0 <= out.elapsed_s < 0.5


def test_a_cancelled_gather_keeps_a_call_that_ended_before_its_result_came_back(
    pool: Any,
) -> None:
    # Before: the handle went cold and nothing was journaled: gathering it
    # again (or a rerun) ran the call a second time.
    executor = HandsBackLate(pool)
    journal = taut.InMemoryJournal()
    ran: list[str] = []

    def once() -> str:
        ran.append("once")
        return "done"

    handle = taut.call(once)

    async def main() -> None:
        gathering = asyncio.ensure_future(
            taut.agather([handle], executor=executor, timeout=LONG, journal=journal)
        )
        end = time.monotonic() + LONG
        while not ran:  # the call has run; its result is held back
            assert time.monotonic() < end, "the call never ran"
            await asyncio.sleep(0.005)
        gathering.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gathering

    try:
        asyncio.run(main())
    finally:
        executor.hand_back.set()
    [again] = taut.gather([handle])  # its cached outcome
    assert (again.status, again.value) == ("ok", "done"), again
    assert ran == ["once"]
    journal.close()
    [replayed] = taut.gather([taut.call(once)], journal=journal.reopen())
    assert (replayed.status, replayed.value, replayed.replayed) == ("ok", "done", True)
    assert ran == ["once"]
