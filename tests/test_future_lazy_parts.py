"""A future nobody waits on owns nothing but itself: its Condition, waiter
list and callback list are made on first use. That is what keeps a million
pending futures cheap for the garbage collector, so it is checked here; the
rest of the suite checks that waiting and callbacks still work."""

from __future__ import annotations

import concurrent.futures as cf
import gc

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
