"""concurrent.futures.wait() and as_completed() over taut futures.

A taut future's ``_condition`` is a FutureCondition (a reentrant lock with a
Condition's wait/notify), made on first use; a waited future is completed
under it, by the worker in Rust while telling the standard library's waiters
is bookkeeping, by its Python step otherwise. These tests hold that to the standard
library's semantics, and check that every waiter hears of every future
exactly once when waiters come and go while workers complete futures."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any, Callable

import pytest
from _waiting import LONG, wait_until

import taut
from taut._future_condition import FutureCondition


@pytest.fixture
def executors() -> Iterator[tuple[taut.ThreadPoolExecutor, taut.ThreadPoolExecutor]]:
    first, second = taut.ThreadPoolExecutor(2), taut.ThreadPoolExecutor(3)
    try:
        yield first, second
    finally:
        first.shutdown(wait=True, cancel_futures=True)
        second.shutdown(wait=True, cancel_futures=True)


@pytest.fixture
def tiny_switch_interval() -> Iterator[None]:
    """Thread switches between almost every pair of bytecodes."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _fail(message: str) -> None:
    raise ValueError(message)


# -- the condition ------------------------------------------------------------


def test_waiting_gives_a_future_a_future_condition_and_leaves_no_waiter() -> None:
    with taut.ThreadPoolExecutor(2) as ex:
        futures = [ex.submit(pow, 2, i) for i in range(50)]
        cf.wait(futures)
        assert [f.result() for f in futures] == [2**i for i in range(50)]
        assert list(cf.as_completed(futures, timeout=LONG)) != []
    for f in futures:
        assert type(f._cond) is FutureCondition
        assert f._waiters == []


def test_future_condition_is_a_reentrant_lock_with_a_conditions_contract() -> None:
    cond = FutureCondition()
    with pytest.raises(RuntimeError, match="un-acquired"):
        cond.wait(0)
    with pytest.raises(RuntimeError, match="un-acquired"):
        cond.notify()
    with pytest.raises(RuntimeError, match="un-acquired"):
        cond.notify_all()
    with cond:
        with cond:  # reentrant, like threading.Condition's default RLock
            assert cond.wait(0) is False
            assert cond.wait(-1) is False
            assert cond.wait(0.001) is False
        cond.notify_all()  # nobody waits: nothing to do
    assert cond.acquire(False)
    cond.release()


def test_future_condition_wakes_waiters_oldest_first_and_keeps_the_lock_count() -> None:
    cond = FutureCondition()
    woken: list[int] = []
    parked = threading.Semaphore(0)

    def sleeper(n: int) -> None:
        with cond, cond:  # held twice: wait() must release and restore both
            parked.release()
            # No timeout: only a notify ends this wait (a daemon, in case
            # none comes).
            assert cond.wait()
            woken.append(n)
            assert cond._is_owned()

    threads = []
    for n in range(3):
        thread = threading.Thread(target=sleeper, args=(n,), daemon=True)
        thread.start()
        parked.acquire()
        with cond:  # taken only once the sleeper is inside wait()
            pass
        threads.append(thread)
    with cond:
        cond.notify()
    threads[0].join(LONG)
    assert woken == [0]
    with cond:
        cond.notify_all()
    for thread in threads:
        thread.join(LONG)
        assert not thread.is_alive()
    assert sorted(woken) == [0, 1, 2]
    assert cond.acquire(False)  # nobody kept it
    cond.release()


def test_future_condition_wait_for_returns_the_predicates_value() -> None:
    cond = FutureCondition()
    box: list[int] = []

    def fill() -> None:
        with cond:
            box.append(7)
            cond.notify_all()

    with cond:
        threading.Thread(target=fill).start()
        assert cond.wait_for(lambda: box and box[0], timeout=LONG) == 7
        assert cond.wait_for(lambda: 0, timeout=0.001) == 0


def test_a_condition_set_by_hand_is_used_by_the_worker() -> None:
    """The setter accepts a threading.Condition; the worker then starts the
    call under that Condition's own lock (the Rust `_lock` path)."""
    gate = threading.Event()
    with taut.ThreadPoolExecutor(1) as ex:
        blocker = ex.submit(gate.wait, LONG)
        queued = ex.submit(pow, 3, 2)
        queued._condition = threading.Condition()
        waiter = threading.Thread(target=cf.wait, args=([queued],))
        waiter.start()
        wait_until(lambda: bool(queued._waiters))
        gate.set()
        waiter.join(LONG)
        assert not waiter.is_alive()
        assert queued.result(timeout=LONG) == 9
        assert blocker.result(timeout=LONG) is True
    assert isinstance(queued._cond, threading.Condition)


def test_a_call_starts_and_finishes_while_its_condition_is_held_elsewhere() -> None:
    """A worker that finds the Condition taken leaves the start to Python,
    which waits for it; nothing is lost."""
    gate = threading.Event()
    with taut.ThreadPoolExecutor(1) as ex:
        blocker = ex.submit(gate.wait, LONG)
        queued = ex.submit(pow, 2, 10)
        with queued._condition:
            gate.set()
            blocker.result(timeout=LONG)
            assert not queued.done()  # it cannot start without the lock
        assert queued.result(timeout=LONG) == 1024


@pytest.mark.parametrize("outcome", ["result", "exception"])
def test_a_waited_future_also_wakes_threads_parked_in_result(outcome: str) -> None:
    gate = threading.Event()
    with taut.ThreadPoolExecutor(1) as ex:
        blocker = ex.submit(gate.wait, LONG)
        queued = ex.submit(pow, 2, 4) if outcome == "result" else ex.submit(_fail, "x")
        waited = threading.Thread(target=cf.wait, args=([queued],))
        waited.start()
        wait_until(lambda: bool(queued._waiters))
        # No timeout: only the completion ends this wait.
        parked, got = _parked_in(queued, queued.exception)
        gate.set()
        for thread in (waited, parked):
            thread.join(LONG)
            assert not thread.is_alive(), "a waiter was never woken"
        blocker.result(timeout=LONG)
    assert type(queued._cond) is FutureCondition
    assert queued._result_gates is None
    if outcome == "result":
        assert got == [None] and queued.result() == 16
    else:
        assert [str(e) for e in got] == ["x"]


def _count_python_calls(monkeypatch: pytest.MonkeyPatch, cls: type, name: str) -> list[int]:
    """Count the calls of ``cls.name`` (a standard library waiter's method)."""
    calls = [0]
    method = getattr(cls, name)

    def counted(self: Any, *args: Any) -> Any:
        calls[0] += 1
        return method(self, *args)

    monkeypatch.setattr(cls, name, counted)
    return calls


def _queued_behind_a_gate(
    ex: taut.ThreadPoolExecutor, count: int
) -> tuple[threading.Event, cf.Future[Any], list[cf.Future[Any]]]:
    """On a one-worker pool: a call held by a gate, then ``count`` quick
    calls, every third of which raises."""
    gate = threading.Event()
    blocker = ex.submit(gate.wait, LONG)
    quick = [ex.submit(_fail, str(i)) if i % 3 == 0 else ex.submit(abs, -i) for i in range(count)]
    return gate, blocker, quick


def _parked_in(
    future: cf.Future[Any], wait: Callable[[], object]
) -> tuple[threading.Thread, list[object]]:
    """A thread parked in ``wait()`` (the future's ``result`` or
    ``exception``, no timeout), returned once it waits on the future's gate,
    with the list that receives what ``wait`` returns. A daemon, in case the
    completion never comes."""
    got: list[object] = []
    thread = threading.Thread(target=lambda: got.append(wait()), daemon=True)
    thread.start()
    wait_until(lambda: future._result_gates is not None)  # type: ignore[attr-defined]
    return thread, got


def _collecting(
    collect: Callable[[list[cf.Future[Any]], float], Any], futures: list[cf.Future[Any]]
) -> tuple[threading.Thread, list[Any]]:
    """A thread running ``collect(futures, LONG)`` (``cf.wait``, or a
    ``list`` of ``cf.as_completed``), returned once its waiter is on the
    futures, with the list that receives what ``collect`` returns."""
    got: list[Any] = []
    thread = threading.Thread(target=lambda: got.append(collect(futures, LONG)))
    thread.start()
    wait_until(lambda: bool(futures[-1]._waiters))
    return thread, got


def test_a_wait_over_many_futures_is_told_without_python_until_its_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The worker tells the standard library's wait() waiter itself (append,
    # count down) while calls remain; only the last one, which sets its
    # event, goes through the waiter's Python method.
    decrements = _count_python_calls(
        monkeypatch, cf._base._AllCompletedWaiter, "_decrement_pending_calls"
    )
    count = 200
    with taut.ThreadPoolExecutor(1) as ex:
        gate, blocker, quick = _queued_behind_a_gate(ex, count)
        waiting, got = _collecting(cf.wait, quick)
        gate.set()
        waiting.join(LONG)
        assert not waiting.is_alive()
        blocker.result(timeout=LONG)
    (done, not_done), = got
    assert done == set(quick) and not not_done
    assert [f.exception() is not None for f in quick] == [i % 3 == 0 for i in range(count)]
    assert all(not f._waiters for f in quick)  # wait() took its waiter back
    assert decrements[0] < count // 2, decrements


def test_as_completed_over_many_futures_is_told_without_python_while_its_event_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    adds = _count_python_calls(monkeypatch, cf._base._AsCompletedWaiter, "add_result")
    adds_exc = _count_python_calls(monkeypatch, cf._base._AsCompletedWaiter, "add_exception")
    count = 200
    with taut.ThreadPoolExecutor(1) as ex:
        gate, blocker, quick = _queued_behind_a_gate(ex, count)
        consumer, got = _collecting(lambda fs, timeout: list(cf.as_completed(fs, timeout)), quick)
        gate.set()
        consumer.join(LONG)
        assert not consumer.is_alive()
        blocker.result(timeout=LONG)
    (seen,) = got
    assert Counter(seen) == Counter(quick)  # each exactly once
    assert adds[0] + adds_exc[0] < count, (adds, adds_exc)


def test_a_future_told_quietly_to_a_wait_still_wakes_threads_parked_in_result() -> None:
    # Two futures waited on: the first finishes while the wait() still
    # waits for the second (told without Python), and a thread parked in
    # the first one's result() must still wake.
    gate, last_gate = threading.Event(), threading.Event()
    with taut.ThreadPoolExecutor(1) as ex:
        blocker = ex.submit(gate.wait, LONG)
        first = ex.submit(pow, 2, 4)
        last = ex.submit(last_gate.wait, LONG)
        waiting = threading.Thread(target=cf.wait, args=([first, last], LONG))
        waiting.start()
        wait_until(lambda: bool(first._waiters))
        parked, got = _parked_in(first, first.result)
        gate.set()
        parked.join(LONG)
        assert got == [16], "the thread parked in result() was never woken"
        assert waiting.is_alive()  # still waits for the last one
        last_gate.set()
        waiting.join(LONG)
        assert not waiting.is_alive()
        blocker.result(timeout=LONG)


def test_a_waiter_the_worker_cannot_tell_itself_goes_to_python_with_its_lock_free() -> None:
    # A waiter whose fields are not what the worker expects (here its
    # finished_futures is no list) is told by its own Python methods, which
    # take its lock: the worker must have let go of it (or this hangs).
    from collections import deque

    with taut.ThreadPoolExecutor(1) as ex:
        gate, blocker, quick = _queued_behind_a_gate(ex, 3)
        waiting, got = _collecting(cf.wait, quick)
        (waiter,) = quick[0]._waiters
        waiter.finished_futures = deque(waiter.finished_futures)
        gate.set()
        waiting.join(LONG)
        assert not waiting.is_alive(), "the waiter's lock was never let go"
        blocker.result(timeout=LONG)
    ((done, not_done),) = got
    assert done == set(quick) and not not_done


# -- wait(): every return_when, timeouts, duplicates, mixed executors ---------


def test_wait_first_completed_across_executors_and_stdlib_with_duplicates(executors: Any) -> None:
    first, second = executors
    gate = threading.Event()
    with cf.ThreadPoolExecutor(1) as std:
        slow = [pool.submit(gate.wait, LONG) for pool in (first, second, std)]
        fast = second.submit(pow, 2, 5)
        done, not_done = cf.wait([*slow, fast, fast, slow[0]], LONG, cf.FIRST_COMPLETED)
        assert done == {fast}
        assert not_done == set(slow)
        gate.set()
        done, not_done = cf.wait([*slow, fast, *slow], LONG)
        assert done == {*slow, fast} and not_done == set()
        assert [f.result() for f in slow] == [True, True, True]


def test_wait_first_exception_returns_on_the_first_failure(executors: Any) -> None:
    first, second = executors
    gate = threading.Event()
    try:
        slow = first.submit(gate.wait, LONG)
        ok = second.submit(pow, 2, 2)
        ok.result(timeout=LONG)
        failing = second.submit(_fail, "boom")
        done, not_done = cf.wait([slow, ok, failing], LONG, cf.FIRST_EXCEPTION)
        assert done == {ok, failing} and not_done == {slow}
        assert str(failing.exception()) == "boom"
        # Without a failure FIRST_EXCEPTION is ALL_COMPLETED.
        gate.set()
        done, not_done = cf.wait([slow, ok], LONG, cf.FIRST_EXCEPTION)
        assert done == {slow, ok} and not_done == set()
    finally:
        gate.set()


def test_wait_times_out_with_the_stdlibs_answer_and_removes_its_waiter(executors: Any) -> None:
    first, _ = executors
    gate = threading.Event()
    try:
        slow = first.submit(gate.wait, LONG)
        done_one = first.submit(pow, 2, 1)  # queued behind slow on... either worker
        done_one.result(timeout=LONG)
        for return_when in (cf.ALL_COMPLETED, cf.FIRST_EXCEPTION):
            done, not_done = cf.wait([slow, done_one], 0.01, return_when)
            assert done == {done_one} and not_done == {slow}
        done, not_done = cf.wait([slow], 0.01, cf.FIRST_COMPLETED)
        assert done == set() and not_done == {slow}
        assert slow._waiters == [] and done_one._waiters == []
    finally:
        gate.set()


def test_wait_rejects_an_unknown_return_when_like_the_stdlib() -> None:
    gate = threading.Event()
    with taut.ThreadPoolExecutor(1) as ex:
        pending = ex.submit(gate.wait, LONG)
        std_pending: cf.Future[bool] = cf.Future()
        errors = []
        for future in (pending, std_pending):
            with pytest.raises(ValueError) as info:
                cf.wait([future], 0, "SOMETIMES")
            errors.append(str(info.value))
        gate.set()
    assert errors[0] == errors[1] == "Invalid return condition: 'SOMETIMES'"


def test_wait_is_woken_by_a_cancel_and_by_shutdown_cancel_futures() -> None:
    ex = taut.ThreadPoolExecutor(1)
    gate = threading.Event()
    try:
        blocker = ex.submit(gate.wait, LONG)
        wait_until(blocker.running)
        first_queued = ex.submit(pow, 2, 3)
        rest = [ex.submit(pow, 2, i) for i in range(5)]
        outcome: dict[str, Any] = {}

        def waiting() -> None:
            outcome["first"] = cf.wait([first_queued, blocker], return_when=cf.FIRST_COMPLETED)
            outcome["all"] = cf.wait(rest)

        thread = threading.Thread(target=waiting, daemon=True)
        thread.start()
        wait_until(lambda: bool(first_queued._waiters))
        assert first_queued.cancel()
        wait_until(lambda: all(f._waiters for f in rest))
        ex.shutdown(wait=False, cancel_futures=True)
        thread.join(LONG)
        assert not thread.is_alive(), "a wait() was never woken"
        assert outcome["first"] == ({first_queued}, {blocker})
        assert outcome["all"] == (set(rest), set())
        assert all(f.cancelled() for f in [first_queued, *rest])
    finally:
        gate.set()
        ex.shutdown(wait=True)


# -- as_completed() ----------------------------------------------------------


def test_as_completed_yields_each_future_once_in_completion_order(executors: Any) -> None:
    first, second = executors
    gates = [threading.Event() for _ in range(3)]
    with cf.ThreadPoolExecutor(3) as std:
        futures = [
            first.submit(gates[0].wait, LONG),
            std.submit(gates[1].wait, LONG),
            second.submit(gates[2].wait, LONG),
        ]
        already = second.submit(pow, 2, 8)
        already.result(timeout=LONG)
        seen: list[cf.Future[Any]] = []
        iterator = cf.as_completed([*futures, already, futures[0], already], timeout=LONG)
        seen.append(next(iterator))
        for index in (2, 0, 1):
            wait_until(lambda: all(f._waiters for f in futures if not f.done()))
            gates[index].set()
            seen.append(next(iterator))
        with pytest.raises(StopIteration):
            next(iterator)
    assert seen == [already, futures[2], futures[0], futures[1]]
    assert all(f._waiters == [] for f in [*futures, already])


def test_as_completed_timeout_raises_the_stdlibs_error_and_cleans_up() -> None:
    gate = threading.Event()
    with taut.ThreadPoolExecutor(2) as ex:
        slow = ex.submit(gate.wait, LONG)
        quick = ex.submit(pow, 2, 2)
        quick.result(timeout=LONG)
        seen = []
        with pytest.raises(cf.TimeoutError, match=r"^1 \(of 2\) futures unfinished$"):
            for future in cf.as_completed([slow, quick], timeout=0.01):
                seen.append(future)
        assert seen == [quick]
        assert slow._waiters == [] and quick._waiters == []
        gate.set()


def test_as_completed_hears_of_cancellation_and_exceptions() -> None:
    gate = threading.Event()
    with taut.ThreadPoolExecutor(1) as ex:
        blocker = ex.submit(gate.wait, LONG)
        wait_until(blocker.running)
        doomed = ex.submit(pow, 2, 2)
        failing = ex.submit(_fail, "late")
        iterator = cf.as_completed([blocker, doomed, failing], timeout=LONG)
        canceller = threading.Thread(
            target=lambda: (wait_until(lambda: bool(doomed._waiters)), doomed.cancel())
        )
        canceller.start()
        assert next(iterator) is doomed
        canceller.join(LONG)
        gate.set()
        rest = list(iterator)
    assert set(rest) == {blocker, failing}
    assert doomed.cancelled() and str(failing.exception()) == "late"


def test_wrap_future_and_a_waiting_thread_both_get_the_outcome() -> None:
    gate = threading.Event()
    with taut.ThreadPoolExecutor(1) as ex:
        future = ex.submit(lambda: gate.wait(LONG) and 42)
        iterated: list[Any] = []
        thread = threading.Thread(target=lambda: iterated.extend(cf.as_completed([future])))
        thread.start()
        wait_until(lambda: bool(future._waiters))

        async def main() -> int:
            wrapped = asyncio.wrap_future(future)
            asyncio.get_running_loop().call_soon(gate.set)
            return await wrapped

        assert asyncio.run(main()) == 42
        thread.join(LONG)
    assert iterated == [future]


# -- every waiter hears of every future exactly once, under races ------------


class _CountingWaiter:
    """A waiter installed the way wait() installs its own."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.heard: Counter[int] = Counter()

    def _heard(self, future: cf.Future[Any]) -> None:
        with self.lock:
            self.heard[id(future)] += 1

    add_result = add_exception = add_cancelled = _heard


def _install(waiter: _CountingWaiter, futures: list[cf.Future[Any]]) -> set[int]:
    """Like the stdlib: under each future's Condition, on the ones not yet
    finished or notified of their cancellation."""
    pending = set()
    for future in futures:
        with future._condition:
            if future._state not in ("CANCELLED_AND_NOTIFIED", "FINISHED"):
                future._waiters.append(waiter)
                pending.add(id(future))
    return pending


def _maybe_fail(go: threading.Event, i: int) -> int:
    go.wait(LONG)
    sum(range(i))  # a little work, so completions interleave with waiters
    if i % 7 == 0:
        raise ValueError(i)
    return i


@pytest.mark.timeout(240)
@pytest.mark.parametrize("round_", range(5))
def test_every_waiter_is_told_of_every_future_exactly_once_under_races(
    tiny_switch_interval: None, round_: int
) -> None:
    futures_per_round = 600
    go = threading.Event()  # calls start once the waiters do
    with taut.ThreadPoolExecutor(4) as ex, cf.ThreadPoolExecutor(2) as std:
        futures: list[cf.Future[Any]] = []
        for i in range(futures_per_round):
            pool: cf.Executor = std if i % 10 == 0 else ex
            futures.append(pool.submit(_maybe_fail, go, i))
        for future in futures[5::40] + futures[10::80]:
            future.cancel()  # some are still queued; those become cancelled
        owned: list[taut.Future[int]] = [taut.Future() for _ in range(30)]
        futures.extend(owned)
        problems: list[str] = []
        counters: list[tuple[_CountingWaiter, set[int]]] = []
        counters_lock = threading.Lock()
        start = threading.Barrier(8)

        def count() -> None:
            start.wait()
            waiter = _CountingWaiter()
            pending = _install(waiter, futures)
            with counters_lock:
                counters.append((waiter, pending))

        def iterate() -> None:
            start.wait()
            seen = list(cf.as_completed(futures + futures[::3], timeout=LONG))
            if sorted(map(id, seen)) != sorted(map(id, futures)):
                problems.append("as_completed did not yield each future once")

        def wait_all() -> None:
            start.wait()
            done, not_done = cf.wait(futures, LONG)
            if not_done or done != set(futures):
                problems.append(f"wait(ALL_COMPLETED) returned {len(not_done)} not done")

        def wait_first() -> None:
            start.wait()
            remaining = set(futures)
            while remaining:
                done, remaining = cf.wait(remaining, LONG, cf.FIRST_COMPLETED)
                if not done:
                    problems.append("wait(FIRST_COMPLETED) returned nothing done")
                    return

        def finish_owned(part: int) -> None:
            start.wait()
            for i, future in enumerate(owned[part::2]):
                if i % 3 == 0:
                    future.set_exception(ValueError(i))
                else:
                    future.set_result(i)

        threads = [
            threading.Thread(target=target, args=args)
            for target, args in [
                (count, ()),
                (count, ()),
                (iterate, ()),
                (wait_all, ()),
                (wait_first, ()),
                (finish_owned, (0,)),
                (finish_owned, (1,)),
            ]
        ]
        for thread in threads:
            thread.start()
        start.wait()
        go.set()
        for thread in threads:
            thread.join(LONG * 4)
            assert not thread.is_alive(), "a waiter was never woken (or hung)"
        assert problems == []
        cf.wait(futures, LONG)
        for waiter, pending in counters:
            for future in futures:
                with future._condition:
                    if waiter in future._waiters:
                        future._waiters.remove(waiter)
            # Told of each future pending at install, once; of no other.
            assert set(waiter.heard) == pending
            assert set(waiter.heard.values()) <= {1}
        for future in futures:
            assert future._waiters == []
