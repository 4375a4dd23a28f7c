"""A Ctrl-C (any asynchronous exception) may land between any two bytecodes
of ``submit`` while it starts the worker the pool asked for. Wherever it
lands, the pool must neither lose that worker for good (with
``max_workers=1`` every call would then wait forever) nor count a thread
that did start as missing (and start one too many).

Each interrupt is made to land at an exact point: a profile hook raises
KeyboardInterrupt at a chosen call (CPython then drops the hook), which is
what a signal handler does at the next bytecode boundary."""

from __future__ import annotations

import asyncio
import itertools
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any, Callable

import pytest
from tests._waiting import LONG, wait_until

import taut
from taut.executor import ThreadPoolExecutor


def _interrupt_at(is_the_spot: Callable[[FrameType, str, Any], bool]) -> list[bool]:
    """Raise KeyboardInterrupt in this thread at the first profile event
    ``is_the_spot(frame, event, arg)`` accepts; the list says if it did."""
    fired: list[bool] = []

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if not fired and is_the_spot(frame, event, arg):
            fired.append(True)
            raise KeyboardInterrupt  # CPython drops a hook that raises

    sys.setprofile(hook)
    return fired


_executors = itertools.count()


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    ex = taut.ThreadPoolExecutor(1, thread_name_prefix=f"spawnsafe{next(_executors)}")
    yield ex
    sys.setprofile(None)
    ex.shutdown(wait=False, cancel_futures=True)


def _live_workers(ex: ThreadPoolExecutor) -> int:
    """The executor's worker threads alive now (its name prefix is its own)."""
    prefix = f"{ex._thread_name_prefix}_"
    return sum(t.is_alive() for t in threading.enumerate() if t.name.startswith(prefix))


def _calls_all_run(ex: ThreadPoolExecutor, interrupted: list[int]) -> set[str]:
    """The call queued by the interrupted submit runs, and so do later ones,
    on one worker thread at a time. Returns the names of the threads the
    later ones ran on."""

    def call(i: int) -> tuple[str, int]:
        interrupted.append(i)
        return threading.current_thread().name, _live_workers(ex)

    later = [ex.submit(call, i).result(LONG) for i in (2, 3)]
    assert [live for _, live in later] == [1, 1]
    wait_until(lambda: sorted(interrupted) == [1, 2, 3])
    assert _live_workers(ex) <= 1
    assert ex.stats().workers <= 1
    return {name for name, _ in later}


def test_an_interrupt_before_the_worker_start_is_made_good_by_the_next_submit(
    executor: ThreadPoolExecutor,
) -> None:
    # Between the core queueing the call and Python starting its worker.
    ran: list[int] = []
    spawn = ThreadPoolExecutor._spawn.__code__
    fired = _interrupt_at(lambda frame, event, _: event == "call" and frame.f_code is spawn)
    with pytest.raises(KeyboardInterrupt):
        executor.submit(ran.append, 1)
    sys.setprofile(None)
    assert fired and not ran and _live_workers(executor) == 0
    _calls_all_run(executor, ran)


def test_an_interrupt_before_the_worker_start_of_a_coroutine_call(
    executor: ThreadPoolExecutor,
) -> None:
    # The same on the asyncio path (`executor.run`).
    ran: list[int] = []
    spawn = ThreadPoolExecutor._spawn.__code__
    loop = asyncio.new_event_loop()
    try:
        fired = _interrupt_at(lambda frame, event, _: event == "call" and frame.f_code is spawn)
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(executor.run(ran.append, 1))
        sys.setprofile(None)
        assert fired and not ran
        later = loop.run_until_complete(
            asyncio.wait_for(executor.run(_live_workers, executor), LONG)
        )
        assert later == 1
        wait_until(lambda: ran == [1])
    finally:
        loop.close()


def test_an_interrupt_as_the_slot_for_the_thread_is_handed_out(
    executor: ThreadPoolExecutor,
) -> None:
    # Just after the core handed out the new worker's slot, before Python
    # holds it anywhere: the slot, dropped, gives its start back.
    ran: list[int] = []
    start_worker = ThreadPoolExecutor._start_worker.__code__
    fired = _interrupt_at(
        lambda frame, event, arg: (
            event == "c_return"
            and frame.f_code is start_worker
            and getattr(arg, "__name__", "") in ("claim", "new_worker")
        )
    )
    with pytest.raises(KeyboardInterrupt):
        executor.submit(ran.append, 1)
    sys.setprofile(None)
    assert fired and not ran
    _calls_all_run(executor, ran)


def test_an_interrupt_in_thread_start_before_the_thread_exists(
    executor: ThreadPoolExecutor,
) -> None:
    # Thread.start interrupted on entry: no thread, and its start is owed
    # again at once, even while the interrupt (and its traceback, holding
    # the slot) is kept, as an interactive prompt keeps the last one.
    ran: list[int] = []
    thread_start = threading.Thread.start.__code__
    fired = _interrupt_at(lambda frame, event, _: event == "call" and frame.f_code is thread_start)
    with pytest.raises(KeyboardInterrupt) as interrupt:
        executor.submit(ran.append, 1)
    sys.setprofile(None)
    assert fired and not ran and _live_workers(executor) == 0
    _calls_all_run(executor, ran)
    assert interrupt.value.__traceback__ is not None


def test_an_interrupt_while_thread_start_waits_for_the_new_thread(
    executor: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The thread exists but has not reported in when the interrupt lands in
    # Thread.start's wait for it: it runs anyway, and keeps its place. Taken
    # for gone, it would run beside the replacement the next submit starts.
    ran: list[int] = []
    may_report_in = threading.Event()
    bootstrap = threading.Thread._bootstrap  # type: ignore[attr-defined]

    def held_back(thread: threading.Thread) -> None:
        may_report_in.wait(LONG)
        bootstrap(thread)

    monkeypatch.setattr(threading.Thread, "_bootstrap", held_back)
    thread_start = threading.Thread.start.__code__
    event_wait = threading.Event.wait.__code__
    fired = _interrupt_at(
        lambda frame, event, _: (
            event == "call"
            and frame.f_code is event_wait
            and frame.f_back is not None
            and frame.f_back.f_code is thread_start
        )
    )
    with pytest.raises(KeyboardInterrupt):
        executor.submit(ran.append, 1)
    sys.setprofile(None)
    monkeypatch.undo()
    assert fired and not ran
    may_report_in.set()
    # The thread whose start was interrupted is the one that works.
    assert _calls_all_run(executor, ran) == {f"{executor._thread_name_prefix}_0"}


def test_an_interrupt_after_thread_start_started_the_thread(
    executor: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Thread.start raises once the thread runs (its wait for the thread,
    # interrupted just as it ended): the thread keeps its place.
    ran: list[int] = []
    start = threading.Thread.start

    def start_then_interrupt(thread: threading.Thread) -> None:
        start(thread)
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", start_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        executor.submit(ran.append, 1)
    monkeypatch.undo()
    assert _calls_all_run(executor, ran) == {f"{executor._thread_name_prefix}_0"}


def test_a_start_left_owed_is_dropped_when_the_ceiling_comes_down() -> None:
    # An interrupted submit left its worker start owed; the ceiling then
    # comes down to the one worker running. That start is not made (a
    # thread beyond the new ceiling), and the running worker stays on for
    # the queued call instead of retiring as if it were the surplus.
    ex = taut.ThreadPoolExecutor(2, thread_name_prefix=f"spawnsafe{next(_executors)}")
    gate = threading.Event()
    try:
        blocking = ex.submit(gate.wait, LONG)
        wait_until(lambda: ex.stats().running == 1)
        ran: list[int] = []
        spawn = ThreadPoolExecutor._spawn.__code__
        fired = _interrupt_at(lambda frame, event, _: event == "call" and frame.f_code is spawn)
        with pytest.raises(KeyboardInterrupt):
            ex.submit(ran.append, 1)
        sys.setprofile(None)
        assert fired
        ex.resize(1)
        assert _live_workers(ex) == 1
        gate.set()
        assert blocking.result(LONG)
        assert ex.submit(_live_workers, ex).result(LONG) == 1
        wait_until(lambda: ran == [1])
    finally:
        sys.setprofile(None)
        gate.set()
        ex.shutdown(wait=False, cancel_futures=True)


def test_a_full_queue_starts_the_workers_interrupted_submits_left_owed() -> None:
    # Two submits interrupted before their worker start fill the bounded
    # queue: no submission is accepted any more (each would start the owed
    # worker), so a refused one must start it, or nothing ever makes room.
    ex = taut.ThreadPoolExecutor(1, max_queue=1, thread_name_prefix=f"spawnsafe{next(_executors)}")
    ran: list[int] = []
    spawn = ThreadPoolExecutor._spawn.__code__
    try:
        for i in (1, 2):
            fired = _interrupt_at(lambda frame, event, _: event == "call" and frame.f_code is spawn)
            with pytest.raises(KeyboardInterrupt):
                ex.submit(ran.append, i)
            sys.setprofile(None)
            assert fired
        assert not ran
        with pytest.raises(taut.QueueFull):
            ex.try_submit(ran.append, 3)
        wait_until(lambda: ran == [1, 2])
        assert ex.submit(_live_workers, ex).result(LONG) == 1
    finally:
        sys.setprofile(None)
        ex.shutdown(wait=False, cancel_futures=True)
