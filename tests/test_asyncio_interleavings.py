"""Random interleavings on the asyncio path with a bounded queue: coroutines
(``ex.run``, ``taut.to_thread``) and plain submissions from the loop
(``run_in_executor``) arrive, are cancelled while in line, told, queued or
running, and calls finish, in orders hypothesis picks.

What must hold whatever the order, with one worker (so the order calls
start in is the order they were queued in):
- every task ends (no hang), and each call runs at most once; a task not
  cancelled gets its own call's outcome;
- the coroutines' calls start in the order the coroutines arrived (the line
  is FIFO; plain submissions are outside it and may overtake);
- afterwards no line is left: a new call goes straight into the queue.

("settle" blocks the loop until the worker has moved on, so that room
appears while coroutines wait, before the loop hears of it.)

Each call blocks on its own gate until the test releases it, so which calls
run, queue or wait is decided by the test, not by timing.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

import pytest
from _waiting import LONG, LoopWithoutReaders, no_line_left, wait_until
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import taut

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("no_pending_task_destroyed")]

_KINDS = ("run", "to_thread", "run_in_executor")

_ops = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(_KINDS)),
        st.tuples(st.just("cancel"), st.integers(0, 30)),
        st.tuples(st.just("release")),
        st.tuples(st.just("settle")),
        st.tuples(st.just("pass"), st.integers(1, 3)),
    ),
    max_size=30,
)


class _Calls:
    """Numbered calls, each held by its own gate; records starts and runs."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.runs: Counter[int] = Counter()
        self.gates: dict[int, threading.Event] = {}
        self.all_released = threading.Event()

    def gate(self, number: int) -> threading.Event:
        return self.gates.setdefault(number, threading.Event())

    def __call__(self, number: int) -> int:
        self.runs[number] += 1
        self.started.append(number)
        gate = self.gate(number)
        while not (gate.is_set() or self.all_released.is_set()):
            gate.wait(0.01)
        return number

    def holding(self) -> bool:
        """A call that started waits for its gate."""
        return any(not self.gate(number).is_set() for number in self.started)

    def release_the_oldest_running(self) -> None:
        for number in self.started:
            gate = self.gate(number)
            if not gate.is_set():
                gate.set()
                return


def _settle(ex: taut.ThreadPoolExecutor, calls: _Calls) -> None:
    """Block the loop until a call holds the worker, release it, and keep
    blocking until the worker moved on: the next call started, or nothing is
    left to start. The loop hears of it (room, outcomes) only afterwards."""

    def idle() -> bool:
        return ex.stats()[3:5] == (0, 0)  # running, queued

    wait_until(lambda: calls.holding() or idle())
    before = len(calls.started)
    calls.release_the_oldest_running()
    wait_until(lambda: len(calls.started) > before or idle())


async def _interleave(ops: list[tuple[Any, ...]], max_queue: int) -> None:
    loop = asyncio.get_running_loop()
    calls = _Calls()
    with taut.ThreadPoolExecutor(1, max_queue=max_queue) as ex:
        loop.set_default_executor(ex)
        tasks: dict[int, tuple[str, asyncio.Future[Any]]] = {}
        cancelled: set[int] = set()
        number = 0
        try:
            for op in ops:
                if op[0] in _KINDS:
                    number += 1
                    if op[0] == "run":
                        tasks[number] = (op[0], asyncio.ensure_future(ex.run(calls, number)))
                    elif op[0] == "to_thread":
                        to_thread = asyncio.ensure_future(taut.to_thread(calls, number))
                        tasks[number] = (op[0], to_thread)
                    else:
                        try:
                            tasks[number] = (op[0], loop.run_in_executor(ex, calls, number))
                        except taut.QueueFull:
                            pass  # a plain submission on a loop thread never waits for room
                elif op[0] == "cancel" and tasks:
                    numbers = sorted(tasks)
                    chosen = numbers[op[1] % len(numbers)]
                    if tasks[chosen][1].cancel():
                        cancelled.add(chosen)
                elif op[0] == "release":
                    calls.release_the_oldest_running()
                elif op[0] == "settle":
                    _settle(ex, calls)
                elif op[0] == "pass":
                    for _ in range(op[1]):
                        await asyncio.sleep(0)
        finally:
            calls.all_released.set()
            outcomes = await asyncio.wait_for(
                asyncio.gather(*(task for _, task in tasks.values()), return_exceptions=True),
                LONG,
            )
        for number, (kind, task), outcome in zip(tasks, tasks.values(), outcomes):
            assert calls.runs[number] <= 1, f"call {number} ({kind}) ran twice"
            if number not in cancelled:
                assert outcome == number, f"call {number} ({kind}): {outcome!r}"
                assert calls.runs[number] == 1
            else:
                assert task.cancelled()
        in_line_order = [n for n in calls.started if tasks[n][0] != "run_in_executor"]
        assert in_line_order == sorted(in_line_order), calls.started
        await no_line_left(ex)


# Found by hypothesis (failed about half the runs, on either loop): the
# cancelled "4" passes its turn on while room is out, so "7" and "8" are told
# for one room and "9", arriving, is told too. "7" takes the room; "8" is
# refused and goes back to its place, told again after "9": "9" must leave
# it the next room.
_REFUSED_THEN_TOLD_AFTER_ONE_BEHIND: list[tuple[Any, ...]] = [
    ("run",),
    ("run_in_executor",),
    ("run_in_executor",),
    ("pass", 3),
    ("release",),
    ("run",),
    ("pass", 1),
    ("release",),
    ("pass", 2),
    ("run_in_executor",),
    ("pass", 3),
    ("pass", 1),
    ("settle",),
    ("run",),
    ("pass", 3),
    ("to_thread",),
    ("settle",),
    ("settle",),
    ("release",),
    ("cancel", 7),
    ("settle",),
    ("run",),
    ("cancel", 8),
    ("cancel", 17),
    ("pass", 1),
    ("cancel", 17),
    ("run",),
]


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(ops=_ops, max_queue=st.integers(1, 2))
# Room appears (settle) while "3" waits; "4" arrives before "3" hears of it
# and must queue up behind it.
@example(
    ops=[
        ("run",),
        ("pass", 1),
        ("run",),
        ("pass", 1),
        ("to_thread",),
        ("pass", 2),
        ("settle",),
        ("run",),
        ("pass", 3),
    ],
    max_queue=1,
).via("a newcomer while a told coroutine has not retried yet")
# "3" is told there is room, then cancelled before it retries: "4" gets the turn.
@example(
    ops=[
        ("run",),
        ("run",),
        ("run",),
        ("to_thread",),
        ("pass", 2),
        ("settle",),
        ("pass", 2),
        ("cancel", 2),
    ],
    max_queue=1,
).via("a told coroutine cancelled after its notice was read")
@example(ops=_REFUSED_THEN_TOLD_AFTER_ONE_BEHIND, max_queue=1).via(
    "a refused coroutine told again after one behind it"
)
def test_random_interleavings_on_a_bounded_queue_keep_the_line_fifo_and_lose_nothing(
    ops: list[tuple[Any, ...]], max_queue: int
) -> None:
    asyncio.run(_interleave(ops, max_queue))


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(ops=_ops, max_queue=st.integers(1, 2))
@example(
    ops=[
        ("run",),
        ("run",),
        ("run",),
        ("to_thread",),
        ("pass", 2),
        ("settle",),
        ("pass", 2),
        ("cancel", 2),
    ],
    max_queue=1,
).via("a told coroutine cancelled, on a loop without readers")
@example(ops=_REFUSED_THEN_TOLD_AFTER_ONE_BEHIND, max_queue=1).via(
    "a refused coroutine told again after one behind it, on a loop without readers"
)
def test_random_interleavings_on_a_loop_without_readers_keep_the_line_fifo_and_lose_nothing(
    ops: list[tuple[Any, ...]], max_queue: int
) -> None:
    loop = LoopWithoutReaders()
    try:
        loop.run_until_complete(_interleave(ops, max_queue))
    finally:
        loop.close()
