"""The executor benchmark area's (f') shape (taut._bench.executor): every
call queued before the workers are let go, and every one collected before the
clock stops; and (f)'s cheapest-pool reference, which runs every call too.
Small sizes, no timing asserts."""

from __future__ import annotations

import concurrent.futures as cf
import threading
from typing import Any

import pytest

import taut
from taut._bench import executor as bench


@pytest.mark.parametrize("base", [taut.ThreadPoolExecutor, cf.ThreadPoolExecutor])
def test_queued_up_front_queues_everything_before_release_and_collects_it(base: Any) -> None:
    seen: list[cf.Future[Any]] = []
    releases: list[Any] = []  # the Event the held workers wait on
    released_at_submit: list[bool] = []

    class Recording(base):  # type: ignore[misc, valid-type]
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
            if getattr(fn, "__name__", "") == "wait":
                releases.append(fn.__self__)
            elif fn is bench.time.sleep and args == (1e-6,):
                released_at_submit.append(any(e.is_set() for e in releases))
            future: cf.Future[Any] = super().submit(fn, *args, **kwargs)
            seen.append(future)
            return future

    elapsed = bench.io_queued_up_front(Recording, 40, 4, 1e-6)
    assert elapsed > 0
    # 4 workers held, then 40 sleeps queued, none after the release; all
    # finished when it returned.
    assert len(releases) == 4 and len(set(map(id, releases))) == 1
    assert released_at_submit == [False] * 40
    assert all(f.done() and f.exception() is None for f in seen)


def test_the_cheapest_pool_runs_every_call_before_the_clock_stops() -> None:
    calls: list[float] = []
    before = threading.active_count()
    elapsed = bench.io_cheapest_pool(50, 4, 1e-6, call=calls.append)
    assert elapsed > 0
    assert calls == [1e-6] * 50
    assert threading.active_count() == before  # its threads are joined
