"""Behaviours of taut.ThreadPoolExecutor that once could vanish with every
test still green (issue 12): a huge timeout that really reaches a wait, the
waiters of a cancelled queued future, and the worker that replaces an
abandoned one. Each test here fails on the deliberately broken code named in
its docstring (``scripts/mutate.py`` applies those mutations) and uses only
public behaviour, so it survives rewrites of the worker loop. No timing
asserts: gates and events decide; timeouts only bound how long a failure takes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import sys
import threading
import time
from typing import Any

import pytest
from _waiting import LONG, wait_until

import taut

# How long a waiter must have been inside result() before the gate opens when
# it is not seen parked in a threading wait: lopsided against the spin (250 µs
# at most) a result() may do before it waits, so the timeout surely reached the
# wait.
_PAST_THE_SPIN = 0.5


def _stack_codes(thread_id: int) -> list[Any]:
    frame = sys._current_frames().get(thread_id)
    codes = []
    while frame is not None:
        codes.append(frame.f_code)
        frame = frame.f_back
    return codes


def _open_once_waiting(gate: threading.Event, waiter: threading.Thread, entry: Any) -> None:
    """Open ``gate`` once ``waiter`` is blocked inside the future's ``entry``
    method: at once if it is parked in ``threading.Condition.wait``, else
    ``_PAST_THE_SPIN`` after it entered (a wait done some other way)."""
    parked = threading.Condition.wait.__code__
    entered_at: float | None = None
    give_up = time.monotonic() + LONG
    while waiter.is_alive() and time.monotonic() < give_up:
        codes = _stack_codes(waiter.ident or 0)
        if entry in codes:
            if parked in codes:
                break
            if entered_at is None:
                entered_at = time.monotonic()
            elif time.monotonic() - entered_at > _PAST_THE_SPIN:
                break
        time.sleep(0.001)
    gate.set()


@pytest.mark.parametrize("timeout", [10**400, 1e300, float("inf")])
@pytest.mark.parametrize("method", ["result", "exception"])
def test_huge_timeout_reaches_the_wait_without_overflow(method: str, timeout: float) -> None:
    """Broken: ``Future.result``/``exception`` pass the timeout unclamped to
    the stdlib wait, which raises OverflowError for a call still running
    after the spin (a call that finishes during the spin never waits)."""
    gate = threading.Event()
    outcome: dict[str, object] = {}

    def call() -> str:
        assert gate.wait(LONG), "gate never opened"
        return "done"

    with taut.ThreadPoolExecutor(1) as ex:
        future = ex.submit(call)
        wait_until(future.running)
        entry = getattr(type(future), method).__code__

        def wait_for_it() -> None:
            try:
                outcome["value"] = getattr(future, method)(timeout=timeout)
            except BaseException as exc:  # reported by the assert below
                outcome["error"] = exc

        waiter = threading.Thread(target=wait_for_it)
        waiter.start()
        _open_once_waiting(gate, waiter, entry)
        waiter.join(LONG)
        assert not waiter.is_alive()
    assert "error" not in outcome, f"{method}(timeout={timeout!r}) raised {outcome['error']!r}"
    assert outcome["value"] == ("done" if method == "result" else None)


@pytest.mark.parametrize(
    "timeout",
    [
        10**400,
        1e300,
        float("inf"),  # fixed by the gate (issue 9 §1): inf is no deadline
    ],
)
def test_map_with_a_huge_timeout(timeout: float) -> None:
    """``map`` sends its timeout through the gate before adding it to the
    clock (an int too large for a float once raised OverflowError, inf TypeError)."""
    gate = threading.Event()
    outcome: dict[str, object] = {}

    def call(x: int) -> int:
        assert gate.wait(LONG), "gate never opened"
        return -x

    with taut.ThreadPoolExecutor(1) as ex:

        def collect() -> None:
            try:
                outcome["value"] = list(ex.map(call, [1, 2], timeout=timeout))
            except BaseException as exc:  # reported by the assert below
                outcome["error"] = exc

        waiter = threading.Thread(target=collect)
        waiter.start()
        _open_once_waiting(gate, waiter, taut.executor.Future.result.__code__)
        waiter.join(LONG)
        assert not waiter.is_alive()
    assert "error" not in outcome, f"map(timeout={timeout!r}) raised {outcome['error']!r}"
    assert outcome["value"] == [-1, -2]


def test_cancelling_a_queued_future_wakes_wait_and_as_completed() -> None:
    """Broken: ``cancel()`` of a queued future removes it from the queue but
    never notifies the waiters of ``wait()``/``as_completed()``. The waiters'
    own timeouts (LONG) would end them anyway, so the test checks what they
    return, not whether they ended."""
    gate = threading.Event()
    outcome: dict[str, object] = {}
    with taut.ThreadPoolExecutor(1) as ex:
        blocker = ex.submit(gate.wait, LONG)
        wait_until(blocker.running)
        queued = ex.submit(lambda: "never")

        def wait_for_it() -> None:
            outcome["wait"] = cf.wait([queued], timeout=LONG)

        def iterate() -> None:
            try:
                outcome["as_completed"] = list(cf.as_completed([queued], timeout=LONG))
            except cf.TimeoutError as exc:
                outcome["as_completed"] = exc

        waiters = [threading.Thread(target=wait_for_it), threading.Thread(target=iterate)]
        for t in waiters:
            t.start()
        # Both registered on the future: the cancel is what must wake them.
        wait_until(lambda: len(queued._waiters) == 2)
        assert queued.cancel()
        for t in waiters:
            t.join(LONG)
            assert not t.is_alive()
        gate.set()
        assert blocker.result(LONG) is True
    done, not_done = outcome["wait"]  # type: ignore[misc]
    assert done == {queued} and not not_done
    assert outcome["as_completed"] == [queued]
    assert queued.cancelled()


def test_abandon_starts_a_replacement_for_a_queued_call() -> None:
    """Broken: ``abandon()`` gives up the worker but starts no replacement.
    With one worker, a call queued *before* the abandon is then stranded until
    the abandoned call returns (a call submitted after it would start a worker
    by itself, which is why the older test passed on the broken code)."""
    release = threading.Event()
    with taut.ThreadPoolExecutor(1) as ex:
        try:
            hung = ex.submit(release.wait, LONG)
            wait_until(hung.running)
            queued = ex.submit(lambda: "ran")
            assert ex.position(queued) == 1
            assert ex.abandon(hung)
            # The abandoned call is still blocked: only a new worker can run this.
            assert queued.result(LONG) == "ran"
            assert not hung.done()
        finally:
            release.set()
        assert hung.result(LONG) is True


def test_abandon_of_every_worker_keeps_the_ceiling_for_queued_calls() -> None:
    """Broken as above, with two workers both abandoned: both queued calls
    must run while both abandoned calls are still blocked."""
    release = threading.Event()
    with taut.ThreadPoolExecutor(2) as ex:
        try:
            hung = [ex.submit(release.wait, LONG) for _ in range(2)]
            wait_until(lambda: all(f.running() for f in hung))
            queued = [ex.submit(abs, -i) for i in range(2)]
            assert all(ex.abandon(f) for f in hung)
            assert [f.result(LONG) for f in queued] == [0, 1]
            assert not any(f.done() for f in hung)
            assert ex.stats().abandoned == 2
        finally:
            release.set()
        assert [f.result(LONG) for f in hung] == [True, True]


def test_calls_queued_with_owed_wake_ups_get_every_thread_they_need() -> None:
    """Broken: a submission whose top-up asks for two threads starts one.
    Two ``run()`` calls from one pass of a loop leave their wake-ups owed (a
    call is running); a plain ``submit`` in the same pass then wakes the one
    parked worker and needs two new threads for the rest. Started with one,
    the pool counts a thread that never comes as on its way: the last call
    waits, and here (every call waits for the other three) nothing finishes."""
    four_running = threading.Barrier(4, timeout=LONG)
    with taut.ThreadPoolExecutor(4) as ex:
        first = ex.submit(four_running.wait)
        ex.submit(abs, -1).result(LONG)  # a second worker, now idle
        wait_until(lambda: ex.stats().idle == 1 and ex.stats().workers == 2)

        async def one_pass_of_submissions() -> list[int]:
            loop = asyncio.get_running_loop()
            runs = [asyncio.ensure_future(ex.run(four_running.wait)) for _ in range(2)]
            plain: list[cf.Future[int]] = []
            # Queued after the two tasks' first steps, in the same pass.
            loop.call_soon(lambda: plain.append(ex.submit(four_running.wait)))
            results = await asyncio.gather(*runs)
            return [*results, await asyncio.wrap_future(plain[0])]

        try:
            parties = asyncio.run(one_pass_of_submissions())
        except BaseException:
            # A failure ends every waiter at once. Not on success: the first
            # party may not have woken from the barrier yet, and an abort
            # would then break it.
            four_running.abort()
            raise
        assert sorted([*parties, first.result(LONG)]) == [0, 1, 2, 3]
