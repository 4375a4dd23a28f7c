"""Cold call handles shared by several awaiters: a call that started runs once,
whoever of its awaiters goes away (python/taut/gather/__init__.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import copy
import pickle
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from _gathering import Wrapping

import taut
from taut.gather import GatherRejected, Scheduler
from taut.gather.run import Run

pytestmark = pytest.mark.timeout(60)

LONG = 20.0  # what "never finishes on its own" means in these tests


@pytest.fixture
def pool() -> Iterator[cf.ThreadPoolExecutor]:
    with cf.ThreadPoolExecutor(4) as p:
        yield p


class Gate:
    """A call that tells when it started and runs until let go."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.go = threading.Event()
        self.starts = 0
        self.lock = threading.Lock()

    def __call__(self) -> str:
        with self.lock:
            self.starts += 1
        self.started.set()
        assert self.go.wait(LONG)
        return "charged"


async def _await(h: Any) -> Any:
    return await h


async def _until(predicate: Any) -> None:
    """Let the loop run (worker threads too) until ``predicate()`` holds."""
    while not predicate():
        await asyncio.sleep(0.001)


def _waiters(h: Any) -> int:
    return len(h._event_hooks or ())


# ------------------------------------------- a started call is never rerun


async def _first_awaiter_cancelled_while_running(
    h: Any, charge: Gate
) -> tuple[asyncio.Task[Any], asyncio.Task[Any]]:
    """Task a starts ``h``'s call, task b awaits the same handle, then a is
    cancelled while the call runs: (a, b)."""
    a = asyncio.create_task(_await(h))
    await _until(charge.started.is_set)
    b = asyncio.create_task(_await(h))
    await _until(lambda: _waiters(h) == 1)  # b waits for a's run
    a.cancel()
    await asyncio.wait([a])
    return a, b


def test_cancelling_one_awaiter_of_a_running_sync_call_does_not_start_it_again(
    pool: Any,
) -> None:
    journal = taut.InMemoryJournal()
    scheduler = Scheduler(executor=pool, journal=journal)
    charge = Gate()

    async def main() -> None:
        h = scheduler.call(charge, call_id="charge")
        a, b = await _first_awaiter_cancelled_while_running(h, charge)
        assert a.cancelled()
        assert "running" in repr(h)  # the first run is still going
        charge.go.set()
        assert await b == "charged"
        assert charge.starts == 1
        assert h.done() and h.outcome() is not None
        # Recorded although its first awaiter went away: a resume replays it.
        journal.close()
        again = journal.reopen()
        replay = Scheduler(executor=pool, journal=again)
        outcome = (await replay.agather([replay.call(charge, call_id="charge")]))[0]
        assert outcome.replayed and outcome.value == "charged"
        assert charge.starts == 1

    asyncio.run(main())


def test_a_started_sync_call_whose_only_awaiter_is_cancelled_still_caches(pool: Any) -> None:
    charge = Gate()
    scheduler = Scheduler(executor=pool)

    async def main() -> None:
        h = scheduler.call(charge)
        a = asyncio.create_task(_await(h))
        await _until(charge.started.is_set)
        a.cancel()
        await asyncio.wait([a])
        assert "running" in repr(h)
        charge.go.set()
        assert await h == "charged"  # waits for the first run, reuses its value
        assert charge.starts == 1

    asyncio.run(main())


@pytest.mark.parametrize("wrapped", [False, True])
def test_an_awaiter_cancelled_before_its_call_started_leaves_the_handle_cold(
    wrapped: bool,
) -> None:
    # Guards the other branch: a call that provably never started may go cold
    # (and never runs later from the queue). Wrapped, before: the handle stayed
    # "running" until the busy worker freed, though the call never began (its
    # start is seen here: it was never pickled).
    blocker = threading.Event()
    ran: list[int] = []
    with cf.ThreadPoolExecutor(1) as one:
        one.submit(blocker.wait, LONG)
        scheduler = Scheduler(executor=Wrapping(one) if wrapped else one)

        async def main() -> None:
            h = scheduler.call(ran.append, 1)
            a = asyncio.create_task(_await(h))
            await asyncio.sleep(0.01)  # a's call waits in the pool's queue
            a.cancel()
            await asyncio.wait([a])
            assert "cold" in repr(h)

        asyncio.run(main())
        blocker.set()
    assert ran == []


def test_cancelling_one_awaiter_of_a_shared_coroutine_lets_it_finish_for_the_others() -> None:
    starts: list[int] = []
    cancelled: list[int] = []

    async def charge(go: asyncio.Event) -> str:
        starts.append(1)
        try:
            await go.wait()
        except asyncio.CancelledError:
            cancelled.append(1)
            raise
        return "charged"

    async def main() -> None:
        go = asyncio.Event()
        h = taut.call(charge, go)
        a = asyncio.create_task(_await(h))
        await _until(lambda: starts)
        b = asyncio.create_task(_await(h))
        await _until(lambda: _waiters(h) == 1)
        a.cancel()
        await asyncio.wait([a])
        assert a.cancelled()
        go.set()
        assert await b == "charged"
        assert starts == [1] and cancelled == []
        assert h.done()

    asyncio.run(main())


def test_cancelling_the_only_awaiter_of_a_coroutine_cancels_it() -> None:
    # Guards the sole-awaiter case: the coroutine is cancelled with its awaiter,
    # its cleanup runs before the awaiter's cancellation leaves the await, and
    # (a cancellation is never cached) the handle goes cold.
    events: list[str] = []

    async def work() -> str:
        events.append("start")
        try:
            await asyncio.sleep(LONG)
        finally:
            events.append("cleanup")
        return "never"

    async def main() -> None:
        h = taut.call(work)
        a = asyncio.create_task(_await(h))
        await _until(lambda: events)
        a.cancel()
        with pytest.raises(asyncio.CancelledError):
            await a
        assert events == ["start", "cleanup"]
        assert "cold" in repr(h)

    asyncio.run(main())


def test_an_interrupt_after_a_sync_call_returned_keeps_its_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Ctrl-C landing between the call's return and its settling: the call ran,
    # so a waiting thread (or a later await) must get its value, not run it again.
    runs: list[int] = []
    real = Run.outcome_from
    interrupted: list[bool] = []

    def interrupt_once(self: Run, *args: Any) -> Any:
        if not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt
        return real(self, *args)

    monkeypatch.setattr(Run, "outcome_from", interrupt_once)
    h = taut.call(lambda: runs.append(1) or "charged")
    with pytest.raises(KeyboardInterrupt):
        h.result()
    assert h.done()
    assert h.result() == "charged"
    assert runs == [1]


# ------------------------------------------- copies, pickles, stuck states


@pytest.mark.parametrize(
    "duplicate", [copy.copy, copy.deepcopy, lambda h: pickle.loads(pickle.dumps(h))]
)
def test_copying_or_pickling_a_handle_is_refused_naming_why(duplicate: Any, pool: Any) -> None:
    charge = Gate()
    h = taut.call(charge)
    running = pool.submit(h.result)
    assert charge.started.wait(LONG)
    with pytest.raises(TypeError, match=r"cannot copy or pickle a taut\.Call handle.*taut\.call"):
        duplicate(h)
    charge.go.set()
    assert running.result(LONG) == "charged"
    with pytest.raises(TypeError, match=r"cannot copy or pickle a taut\.Call handle"):
        duplicate(h)  # a done handle neither (a copy would run the call again)
    assert charge.starts == 1


@pytest.mark.parametrize("state", ["released", "no event"])
def test_result_never_spins_on_a_handle_left_running_without_a_run(state: str) -> None:
    # What a copy of a running handle used to be: "running" with no run
    # behind it. result() must not spin at full CPU waiting for it.
    h = taut.call(lambda: 1)
    h._state = 1  # RUNNING
    if state == "released":
        h._event = threading.Event()
        h._event.set()
    out: list[BaseException] = []

    def wait() -> None:
        try:
            h.result()
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=wait, daemon=True)
    t.start()
    t.join(LONG)
    assert not t.is_alive(), "result() spun on a handle with no run behind it"
    assert len(out) == 1 and isinstance(out[0], RuntimeError)
    assert "running, but no run holds it" in str(out[0])


def test_a_handle_of_another_scheduler_with_the_same_name_is_named_foreign_clearly() -> None:
    namesake = Scheduler(name="default")
    h = namesake.call(lambda: 1)
    with pytest.raises(GatherRejected, match="another scheduler of the same name") as err:
        taut.gather([h])
    assert "not by <taut.Scheduler default>" not in str(err.value)


def test_the_other_awaiters_get_a_detached_outcome_only_once_it_is_journaled(pool: Any) -> None:
    # Woken before the record is written, an awaiter could return (and the
    # process crash) with the outcome not durable: a resume would run it again.
    writing = threading.Event()
    allow = threading.Event()

    class SlowJournal(taut.InMemoryJournal):
        def complete(self, *args: Any, **kwargs: Any) -> None:
            writing.set()
            assert allow.wait(LONG)
            super().complete(*args, **kwargs)

    scheduler = Scheduler(executor=pool, journal=SlowJournal())
    charge = Gate()

    async def main() -> None:
        h = scheduler.call(charge, call_id="charge")
        _, b = await _first_awaiter_cancelled_while_running(h, charge)
        charge.go.set()
        await _until(writing.is_set)
        await asyncio.sleep(0.05)  # room for b to return, if it was woken
        assert not b.done()
        allow.set()
        assert await b == "charged"

    asyncio.run(main())
