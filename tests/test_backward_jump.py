"""An interrupt raised into a busy loop written inside the scope's block is
raised inside the block, on every CPython (``taut._backward_jump``).

CPython 3.13 raises signal handlers' and asynchronous exceptions at a loop's
backward jump, which its compiler leaves outside the ``try`` and ``with``
blocks around the loop: there the interrupt skipped the scope's exit and
every handler of the frame, and left the scope open. Before the fix, on
3.13.0: one interrupt in six on the main thread, five in six on other
threads. (On 3.11 and 3.12 these pass either way.) The loops are written in
the block itself, in the shapes a program writes them."""

from __future__ import annotations

import threading
import time
from typing import Callable

import pytest
from _waiting import LONG

from taut import DeadlineExpired, fail_after
from taut.deadline._context import innermost

ROUNDS = 100
BUDGET = 0.002

pytestmark = pytest.mark.timeout(120)


def _while_pass(end: float) -> str:
    try:
        with fail_after(BUDGET, interrupt=True):
            while time.monotonic() < end:
                pass
    except DeadlineExpired:
        return "caught"
    return "not interrupted"


def _while_counting(end: float) -> str:
    n = 0
    try:
        with fail_after(BUDGET, interrupt=True):
            while time.monotonic() < end:
                n += 1
    except DeadlineExpired:
        return "caught"
    return f"not interrupted after {n}"


def _for_loop(end: float) -> str:
    try:
        with fail_after(BUDGET, interrupt=True):
            for _ in range(10**12):
                if time.monotonic() > end:
                    break
    except DeadlineExpired:
        return "caught"
    return "not interrupted"


SHAPES = [_while_pass, _while_counting, _for_loop]


def _outcomes(shape: Callable[[float], str]) -> dict[str, int]:
    outcomes: dict[str, int] = {}
    for _ in range(ROUNDS):
        try:
            outcome = shape(time.monotonic() + LONG)
        except BaseException as exc:  # escaped the handlers of the loop's frame
            outcome = f"escaped: {exc!r}"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert innermost.get() is None  # every scope exited
    return outcomes


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: shape.__name__)
def test_on_the_main_thread(shape: Callable[[float], str]) -> None:
    assert threading.current_thread() is threading.main_thread()
    assert _outcomes(shape) == {"caught": ROUNDS}


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: shape.__name__)
def test_on_another_thread(shape: Callable[[float], str]) -> None:
    found: list[dict[str, int]] = []
    thread = threading.Thread(target=lambda: found.append(_outcomes(shape)))
    thread.start()
    thread.join(LONG * 4)
    assert found == [{"caught": ROUNDS}]


def test_nothing_is_left_waiting() -> None:
    from taut import _backward_jump

    for shape in SHAPES:
        _outcomes(shape)
    assert _backward_jump._pending == {}


def test_a_thread_blocked_in_a_c_call_gets_the_interrupt_as_the_call_returns() -> None:
    # The thread runs no instruction while blocked: after 50 ms its
    # interrupt becomes an asynchronous exception, raised as the call
    # returns (at the call, inside the blocks), and the code object stops
    # calling the hook meanwhile.
    from taut import _backward_jump

    gate = threading.Lock()
    gate.acquire()
    outcome: list[str] = []

    def blocked() -> None:
        try:
            with fail_after(0.01, interrupt=True):
                gate.acquire(timeout=LONG)
            outcome.append("not interrupted")
        except DeadlineExpired:
            outcome.append("caught")

    thread = threading.Thread(target=blocked)
    thread.start()
    time.sleep(0.5)  # the deadline (10 ms) and the fallback (50 ms more), lopsided
    assert thread.is_alive()  # still blocked
    assert _backward_jump._pending == {}
    gate.release()
    thread.join(LONG)
    assert outcome == ["caught"]
