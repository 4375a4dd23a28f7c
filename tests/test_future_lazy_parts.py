"""A future nobody waits on owns nothing but itself: its Condition, waiter
list and callback list are made on first use. That is what keeps a million
pending futures cheap for the garbage collector, so it is checked here; the
rest of the suite checks that waiting and callbacks still work."""

from __future__ import annotations

import concurrent.futures as cf
import gc
import threading
import time

import pytest

import taut


def _identity(value: int) -> int:
    return value


def test_a_future_nobody_waits_on_makes_no_condition_and_no_lists() -> None:
    with taut.ThreadPoolExecutor(2) as ex:
        futures = [ex.submit(_identity, i) for i in range(200)]
        ex.shutdown(wait=True)
    for i, future in enumerate(futures):
        assert future._state == "FINISHED"
        assert future._result == i
        assert future._cond is None
        assert future._waiter_list is None
        assert future._callbacks is None


def test_a_pending_future_is_one_object_for_the_garbage_collector() -> None:
    future: taut.Future[int] = taut.Future()
    owned = [o for o in gc.get_referents(future) if gc.is_tracked(o)]
    # Only its type (and none of a Condition, a waiter list, a callback list).
    assert owned == [taut.Future]


def test_wait_and_callbacks_make_their_lists_and_use_them() -> None:
    seen: list[int] = []
    future: taut.Future[int] = taut.Future()
    future.add_done_callback(lambda f: seen.append(f.result()))
    assert future._callbacks is not None and len(future._callbacks) == 1
    with cf.ThreadPoolExecutor(1) as helper:
        helper.submit(future.set_result, 7)
        done, _ = cf.wait([future], timeout=5)
    assert done == {future}
    assert seen == [7]
    assert future._waiters == []  # wait() removed its waiter again


def _park_in(method: str, future: taut.Future[int]) -> tuple[threading.Thread, list[object]]:
    """A thread parked in ``future.<method>()``; its outcome lands in the list."""
    outcome: list[object] = []

    def wait() -> None:
        try:
            outcome.append(getattr(future, method)(timeout=30))
        except BaseException as exc:  # the outcome under test
            outcome.append(exc)

    thread = threading.Thread(target=wait)
    thread.start()
    deadline = time.monotonic() + 10
    while future._result_gates is None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert future._result_gates is not None, "the waiter never parked"
    return thread, outcome


@pytest.mark.parametrize("method", ["result", "exception"])
@pytest.mark.parametrize("how", ["worker", "set_result", "set_exception", "cancel"])
def test_a_parked_result_waiter_is_woken_by_every_kind_of_completion(
    method: str, how: str
) -> None:
    """result() parks on a gate, not on a Condition; whoever completes the
    future (a worker in Rust, the owner, a cancel) must release it."""
    release = threading.Event()
    with taut.ThreadPoolExecutor(1) as ex:
        blocker = ex.submit(release.wait, 30)
        if how == "worker":
            future = ex.submit(_identity, 5)
        else:
            future = taut.Future()
        thread, outcome = _park_in(method, future)
        if how == "set_result":
            future.set_result(5)
        elif how == "set_exception":
            future.set_exception(ValueError("boom"))
        elif how == "cancel":
            assert future.cancel()
        release.set()
        thread.join(10)
        assert not thread.is_alive(), "the result() waiter was never woken"
        blocker.result(timeout=10)
    assert future._cond is None  # nobody needed the Condition
    assert future._result_gates is None
    (got,) = outcome
    if how == "cancel":
        assert isinstance(got, cf.CancelledError)
    elif how == "set_exception":
        # result() raises it, exception() returns it: the list holds it either way.
        assert isinstance(got, ValueError)
    elif method == "result":
        assert got == 5
    else:
        assert got is None


def test_a_timed_out_or_polling_wait_leaves_no_gate_behind() -> None:
    future: taut.Future[int] = taut.Future()
    for _ in range(50):
        with pytest.raises(cf.TimeoutError):
            future.result(timeout=0.001)
        with pytest.raises(cf.TimeoutError):
            future.exception(timeout=0.001)
    assert not future._result_gates
    future.set_result(1)
    assert future.result(timeout=0) == 1


@pytest.mark.parametrize("held_while", ["starting", "finishing"])
def test_a_busy_state_lock_sends_the_worker_to_the_futures_own_methods(held_while: str) -> None:
    """The worker changes a future's state in Rust only if it can take
    `_state_lock` at once; a Python thread holding it (here the test) makes
    the worker use the future's own methods, which wait for the lock. A
    worker that ignored the lock would start or finish the call at once."""
    from taut import _future

    release = threading.Event()
    with taut.ThreadPoolExecutor(1) as ex:
        blocker = ex.submit(release.wait, 30)
        futures = [ex.submit(_identity, i) for i in range(3)]
        deadline = time.monotonic() + 30
        while not blocker.running() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert blocker.running()
        with _future._state_lock:
            if held_while == "starting":
                release.set()  # the worker finishes `blocker`, then meets the lock
                watched = futures[0]
                held_state = "PENDING"
            else:
                watched = blocker
                held_state = "RUNNING"
                release.set()
            time.sleep(0.2)  # far more than a worker needs to start or finish a call
            assert watched._state == held_state
        assert blocker.result(timeout=30) is True
        assert [f.result(timeout=30) for f in futures] == [0, 1, 2]


@pytest.mark.parametrize("condition", ["made", "not made"])
def test_a_cancel_whose_done_callback_raises_keyboardinterrupt_still_wakes_and_dequeues(
    condition: str,
) -> None:
    """cancel() runs the done callbacks, which may raise KeyboardInterrupt
    (the standard library passes it on). Its waiters must be woken anyway,
    as the standard library's are (notified before the callbacks run), and
    the call must leave the queue. Before, with the Condition made (by a
    wait()), the parked result() waiter slept on for good and the call
    stayed queued."""
    release = threading.Event()
    with taut.ThreadPoolExecutor(1) as ex:
        blocker = ex.submit(release.wait, 30)
        future = ex.submit(_identity, 5)
        if condition == "made":
            assert future._condition is not None  # made, as wait() and as_completed() do
        thread, outcome = _park_in("result", future)

        def interrupting_callback(_: object) -> None:
            raise KeyboardInterrupt

        future.add_done_callback(interrupting_callback)
        with pytest.raises(KeyboardInterrupt):
            future.cancel()
        thread.join(10)
        assert not thread.is_alive(), "the result() waiter was never woken"
        assert isinstance(outcome[0], cf.CancelledError)
        assert ex.stats().queued == 0  # out of the queue, not waiting for a worker
        assert future._state == "CANCELLED_AND_NOTIFIED"
        release.set()
        blocker.result(timeout=10)


@pytest.mark.parametrize("condition", ["made", "not made"])
def test_a_cancelled_calls_room_in_a_bounded_queue_is_free_for_its_done_callbacks(
    condition: str,
) -> None:
    """A done callback of a queued call that is cancelled may submit a
    fallback to the same pool. The call left the queue only after the
    callbacks ran: in a full bounded queue it still held its room, so the
    callback's submit waited until a running call ended (try_submit raised
    QueueFull), for good if that call waited for the fallback. Those
    waiting in wait()/as_completed() still hear of the cancel."""
    release = threading.Event()
    with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
        try:
            blocker = ex.submit(release.wait, 30)
            queued = ex.submit(_identity, 1)
            if condition == "made":
                assert queued._condition is not None  # as wait() makes it
            fallbacks = []

            def resubmit(future: cf.Future[int]) -> None:
                assert future.cancelled()
                fallbacks.append(ex.try_submit(_identity, 2))

            queued.add_done_callback(resubmit)
            assert queued.cancel()
            assert len(fallbacks) == 1, "the callback's try_submit found the queue full"
            done, _ = cf.wait([queued], timeout=0)
            assert done == {queued}
            release.set()
            assert fallbacks[0].result(timeout=30) == 2
            assert blocker.result(timeout=30) is True
        finally:
            release.set()
