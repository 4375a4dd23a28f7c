"""A gather whose executor refuses a call it cannot start (``RuntimeError``:
"can't start new thread" from a pool with no worker ceiling once the process
has no threads left), not because it was shut down.

The calls already running are never cut loose for it: the refused call goes
back to the head of the queue and is tried again when one of them finishes
(its worker is then free), and the refusal reaches the caller only when
nothing is running any more. Nothing runs twice.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from _gathering import both_drivers, gather_with
from _waiting import LONG

import taut


class ThreadBudget:
    """The process can start only ``threads`` more threads named ``prefix...``:
    further ``Thread.start`` calls fail as CPython's do when the OS refuses."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, prefix: str, threads: int) -> None:
        self.left = threads
        self.refused = threading.Event()
        real_start = threading.Thread.start
        budget = self

        def start(thread: threading.Thread) -> None:
            if thread.name.startswith(prefix):
                if budget.left <= 0:
                    budget.refused.set()
                    raise RuntimeError("can't start new thread")
                budget.left -= 1
            real_start(thread)

        monkeypatch.setattr(threading.Thread, "start", start)


class Calls:
    """Calls that wait at a gate, opened once a submission was refused."""

    def __init__(self, budget: ThreadBudget) -> None:
        self.gate = threading.Event()
        self.ran: list[int] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._open_when_refused, args=(budget,), daemon=True).start()

    def _open_when_refused(self, budget: ThreadBudget) -> None:
        budget.refused.wait(LONG)
        self.gate.set()

    def work(self, i: int) -> int:
        self.gate.wait(LONG)
        with self.lock:
            self.ran.append(i)
        return i


@pytest.fixture
def no_ceiling() -> Iterator[taut.ThreadPoolExecutor]:
    with taut.ThreadPoolExecutor(1000, thread_name_prefix="starved") as ex:
        yield ex


@both_drivers
def test_a_call_refused_for_want_of_threads_runs_when_a_running_call_finishes(
    monkeypatch: pytest.MonkeyPatch, no_ceiling: Any, asynchronous: bool
) -> None:
    budget = ThreadBudget(monkeypatch, "starved", 3)
    calls = Calls(budget)
    handles = [taut.call(calls.work, i) for i in range(8)]
    outs = gather_with(asynchronous, handles, executor=no_ceiling, timeout=LONG)
    assert budget.refused.is_set()  # the process did run out of threads
    assert [(o.status, o.value) for o in outs] == [("ok", i) for i in range(8)]
    assert sorted(calls.ran) == list(range(8))  # each ran exactly once


def test_a_standard_pool_that_cannot_start_a_thread_runs_no_call_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The standard pool leaves a call it could not start a thread for in its
    # queue, where a worker that frees up later finds it: the batch must not
    # both retry it and let that copy run.
    budget = ThreadBudget(monkeypatch, "stdlib-starved", 2)
    calls = Calls(budget)
    with cf.ThreadPoolExecutor(8, thread_name_prefix="stdlib-starved") as pool:
        outs = taut.gather(
            [taut.call(calls.work, i) for i in range(6)], executor=pool, timeout=LONG
        )
    assert [o.value for o in outs] == list(range(6))
    assert sorted(calls.ran) == list(range(6))


class RefusesAfter(cf.Executor):
    """Accepts ``accepted`` calls (on a real pool), then refuses every other."""

    def __init__(self, pool: cf.Executor, accepted: int) -> None:
        self.pool = pool
        self.left = accepted
        self.refused = threading.Event()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        if self.left <= 0:
            self.refused.set()
            raise RuntimeError("can't start new thread")
        self.left -= 1
        return self.pool.submit(fn, *args, **kwargs)


@both_drivers
def test_a_refusal_that_lasts_is_raised_once_the_running_calls_are_settled(
    asynchronous: bool,
) -> None:
    ran: list[str] = []
    with taut.ThreadPoolExecutor(4) as pool:
        executor = RefusesAfter(pool, 2)

        def work(name: str) -> str:
            executor.refused.wait(LONG)  # still running when the third is refused
            ran.append(name)
            return name

        journal = taut.InMemoryJournal()
        names = ["a", "b", "c", "d"]
        handles = [taut.call(work, n, call_id=n) for n in names]
        with pytest.raises(RuntimeError, match="can't start new thread"):
            gather_with(asynchronous, handles, executor=executor, journal=journal, timeout=LONG)
        # The two running calls were waited for, settled and recorded.
        assert sorted(ran) == ["a", "b"]
        assert [h.done() for h in handles] == [True, True, False, False]
        assert journal.records() == [
            (0, "a", "ok"),
            (1, "b", "ok"),
            (2, "c", "pending"),
            (3, "d", "pending"),
        ]
        # The refused calls went cold: once the executor takes them, they run.
        outs = gather_with(asynchronous, handles, executor=pool, journal=journal)
        assert [o.value for o in outs] == names
        assert sorted(ran) == names
