"""A Ctrl-C (any asynchronous exception) may land between any two bytecodes
of ``submit`` while it starts the worker the pool asked for. Wherever it
lands, the pool must neither lose that worker for good (with
``max_workers=1`` every call would then wait forever) nor count a thread
that did start as missing (and start one too many).

Each interrupt is made to land at an exact point: a profile hook raises
KeyboardInterrupt at a chosen call (CPython then drops the hook), which is
what a signal handler does at the next bytecode boundary. Each scenario
runs in an interpreter of its own: under a profile hook, CPython 3.11 loops
for good at the next function entry if an earlier test left its
"asynchronous exception pending" flag set with no exception pending
(``PyThreadState_SetAsyncExc(thread, NULL)`` sets it), and nothing clears
it."""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import itertools
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any, Callable

import pytest
from tests._waiting import LONG, wait_until

import taut
from taut._worker_thread import _StartedEvent
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


@contextlib.contextmanager
def _executor(
    max_workers: int = 1, max_queue: int = 0, initializer: Callable[[], object] | None = None
) -> Iterator[ThreadPoolExecutor]:
    ex = taut.ThreadPoolExecutor(
        max_workers,
        max_queue=max_queue,
        initializer=initializer,
        thread_name_prefix=f"spawnsafe{next(_executors)}",
    )
    try:
        yield ex
    finally:
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


def _the_held_back_thread_works(
    ex: ThreadPoolExecutor, ran: list[int], may_report_in: threading.Event
) -> None:
    """The thread whose start was interrupted is held back from reporting
    in: a call submitted meanwhile waits for it (taken for gone, a second
    thread would start for it), and that thread is the one that works."""
    names: list[str] = []

    def call() -> int:
        ran.append(2)
        names.append(threading.current_thread().name)
        return _live_workers(ex)

    later = ex.submit(call)
    assert _live_workers(ex) <= 1
    may_report_in.set()
    assert later.result(LONG) == 1
    wait_until(lambda: sorted(ran) == [1, 2])
    assert names == [f"{ex._thread_name_prefix}_0"]
    assert ex.stats().workers == 1


def _at_call_of(code: Any) -> Callable[[FrameType, str, Any], bool]:
    return lambda frame, event, _: event == "call" and frame.f_code is code


_SPAWN = ThreadPoolExecutor._spawn.__code__


# -- the scenarios, each run in an interpreter of its own ------------------


def before_the_worker_start() -> None:
    # Between the core queueing the call and Python starting its worker.
    ran: list[int] = []
    with _executor() as ex:
        fired = _interrupt_at(_at_call_of(_SPAWN))
        with pytest.raises(KeyboardInterrupt):
            ex.submit(ran.append, 1)
        sys.setprofile(None)
        assert fired and not ran and _live_workers(ex) == 0
        _calls_all_run(ex, ran)


def before_the_worker_start_of_a_coroutine_call() -> None:
    # The same on the asyncio path (`executor.run`).
    ran: list[int] = []
    loop = asyncio.new_event_loop()
    with _executor() as ex:
        try:
            fired = _interrupt_at(_at_call_of(_SPAWN))
            with pytest.raises(KeyboardInterrupt):
                loop.run_until_complete(ex.run(ran.append, 1))
            sys.setprofile(None)
            assert fired
            # On its way out the interrupted run starts the worker it owed
            # (_asyncio._wake_owed_now): its call runs without waiting for
            # a later submission.
            wait_until(lambda: ran == [1])
            later = loop.run_until_complete(asyncio.wait_for(ex.run(_live_workers, ex), LONG))
            assert later == 1
        finally:
            loop.close()


def as_the_slot_is_handed_out() -> None:
    # Just after the core handed out the new worker's slot, before Python
    # holds it anywhere: the slot, dropped, gives its place back.
    ran: list[int] = []
    start_worker = ThreadPoolExecutor._start_worker.__code__
    with _executor() as ex:
        fired = _interrupt_at(
            lambda frame, event, arg: (
                event == "c_return"
                and frame.f_code is start_worker
                and getattr(arg, "__name__", "") in ("claim", "new_worker")
            )
        )
        with pytest.raises(KeyboardInterrupt):
            ex.submit(ran.append, 1)
        sys.setprofile(None)
        assert fired and not ran
        _calls_all_run(ex, ran)


def in_thread_start_before_the_thread_exists() -> None:
    # Thread.start interrupted on entry: no thread, and its place is free
    # again at once, even while the interrupt (and its traceback, holding
    # the slot) is kept, as an interactive prompt keeps the last one.
    ran: list[int] = []
    with _executor() as ex:
        fired = _interrupt_at(_at_call_of(threading.Thread.start.__code__))
        with pytest.raises(KeyboardInterrupt) as interrupt:
            ex.submit(ran.append, 1)
        sys.setprofile(None)
        assert fired and not ran and _live_workers(ex) == 0
        _calls_all_run(ex, ran)
        assert interrupt.value.__traceback__ is not None


def while_thread_start_waits_for_the_new_thread() -> None:
    # The thread exists but has not reported in when the interrupt lands in
    # Thread.start's call of its started event's wait (see
    # taut._worker_thread._StartedEvent): it runs anyway, and keeps its
    # place. Taken for gone, it would run beside the replacement the next
    # submit starts.
    ran: list[int] = []
    may_report_in = threading.Event()
    bootstrap = threading.Thread._bootstrap  # type: ignore[attr-defined]

    def held_back(thread: threading.Thread) -> None:
        may_report_in.wait(LONG)
        bootstrap(thread)

    thread_start = threading.Thread.start.__code__
    started_wait = _StartedEvent.wait.__code__
    with _executor() as ex, pytest.MonkeyPatch.context() as patch:
        patch.setattr(threading.Thread, "_bootstrap", held_back)
        fired = _interrupt_at(
            lambda frame, event, _: (
                event == "call"
                and frame.f_code is started_wait
                and frame.f_back is not None
                and frame.f_back.f_code is thread_start
            )
        )
        with pytest.raises(KeyboardInterrupt):
            ex.submit(ran.append, 1)
        sys.setprofile(None)
        patch.undo()
        assert fired and not ran
        _the_held_back_thread_works(ex, ran, may_report_in)


def after_thread_start_started_the_thread() -> None:
    # Thread.start raises once the thread runs (its wait for the thread,
    # interrupted just as it ended): the thread keeps its place. (Held back
    # in its initializer, it has not reported in yet.)
    ran: list[int] = []
    start = threading.Thread.start
    may_report_in = threading.Event()

    def start_then_interrupt(thread: threading.Thread) -> None:
        start(thread)
        raise KeyboardInterrupt

    def hold_back() -> None:
        if threading.current_thread().name.endswith("_0"):
            may_report_in.wait(LONG)

    with _executor(initializer=hold_back) as ex, pytest.MonkeyPatch.context() as patch:
        patch.setattr(threading.Thread, "start", start_then_interrupt)
        with pytest.raises(KeyboardInterrupt):
            ex.submit(ran.append, 1)
        patch.undo()
        _the_held_back_thread_works(ex, ran, may_report_in)


def a_start_left_owed_then_the_ceiling_comes_down() -> None:
    # An interrupted submit left its worker start owed; the ceiling then
    # comes down to the one worker running. That start is not made (a
    # thread beyond the new ceiling), and the running worker stays on for
    # the queued call instead of retiring as if it were the surplus.
    gate = threading.Event()
    ran: list[int] = []
    with _executor(max_workers=2) as ex:
        try:
            blocking = ex.submit(gate.wait, LONG)
            wait_until(lambda: ex.stats().running == 1)
            fired = _interrupt_at(_at_call_of(_SPAWN))
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
            gate.set()


def starts_left_owed_then_the_queue_is_full() -> None:
    # Two submits interrupted before their worker start fill the bounded
    # queue: no submission is accepted any more (each would start the owed
    # worker), so a refused one must start it, or nothing ever makes room.
    ran: list[int] = []
    with _executor(max_queue=1) as ex:
        for i in (1, 2):
            fired = _interrupt_at(_at_call_of(_SPAWN))
            with pytest.raises(KeyboardInterrupt):
                ex.submit(ran.append, i)
            sys.setprofile(None)
            assert fired
        assert not ran
        with pytest.raises(taut.QueueFull):
            ex.try_submit(ran.append, 3)
        wait_until(lambda: ran == [1, 2])
        assert ex.submit(_live_workers, ex).result(LONG) == 1


def _interrupt_at_opcode(codes: set[Any], n: int) -> Any:
    """A trace hook raising KeyboardInterrupt at the bytecode numbered ``n``
    (from 0) that this thread runs in a frame of one of ``codes``."""
    seen = 0

    def per_opcode(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal seen
        if event == "opcode":
            seen += 1
            if seen == n + 1:
                raise KeyboardInterrupt  # CPython drops a hook that raises
        return per_opcode

    def on_call(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code not in codes:
            return None
        # f_trace first: on 3.13, f_trace_opcodes alone takes effect from a
        # code object's second call on.
        frame.f_trace = per_opcode
        frame.f_trace_opcodes = True
        return per_opcode

    return on_call


def on_every_bytecode_of_the_worker_start() -> None:
    # One run per bytecode of taut's own part of the worker start (`_spawn`,
    # `_start_worker`), the interrupt landing on the n-th: wherever it
    # lands, the call runs and the ceiling holds.
    codes = {ThreadPoolExecutor._spawn.__code__, ThreadPoolExecutor._start_worker.__code__}
    landed = 0
    while True:
        ran: list[int] = []
        with _executor() as ex:
            sys.settrace(_interrupt_at_opcode(codes, landed))
            try:
                ex.submit(ran.append, 1)
            except KeyboardInterrupt:
                interrupted = True
            else:
                interrupted = False
            finally:
                sys.settrace(None)
            _calls_all_run(ex, ran)
        if not interrupted:
            break
        landed += 1
    assert landed > 20, landed  # the runs went through the whole start


# -- the tests ----------------------------------------------------------------

_ROOT = Path(__file__).resolve().parent.parent


def _run_alone(scenario: Callable[[], None]) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(_ROOT)) if p)
    done = subprocess.run(
        [sys.executable, "-m", "tests.test_spawn_interrupts", scenario.__name__],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=_ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_interrupt_before_the_worker_start_is_made_good_by_the_next_submit() -> None:
    _run_alone(before_the_worker_start)


def test_an_interrupt_before_the_worker_start_of_a_coroutine_call() -> None:
    _run_alone(before_the_worker_start_of_a_coroutine_call)


def test_an_interrupt_as_the_slot_for_the_thread_is_handed_out() -> None:
    _run_alone(as_the_slot_is_handed_out)


def test_an_interrupt_in_thread_start_before_the_thread_exists() -> None:
    _run_alone(in_thread_start_before_the_thread_exists)


def test_an_interrupt_while_thread_start_waits_for_the_new_thread() -> None:
    _run_alone(while_thread_start_waits_for_the_new_thread)


def test_an_interrupt_after_thread_start_started_the_thread() -> None:
    _run_alone(after_thread_start_started_the_thread)


def test_a_start_left_owed_is_dropped_when_the_ceiling_comes_down() -> None:
    _run_alone(a_start_left_owed_then_the_ceiling_comes_down)


def test_a_full_queue_starts_the_workers_interrupted_submits_left_owed() -> None:
    _run_alone(starts_left_owed_then_the_queue_is_full)


def test_an_interrupt_on_any_bytecode_of_the_worker_start() -> None:
    _run_alone(on_every_bytecode_of_the_worker_start)


if __name__ == "__main__":
    # A hang ends with every thread's stack, well before the test's timeout.
    faulthandler.dump_traceback_later(200, exit=True)
    globals()[sys.argv[1]]()
