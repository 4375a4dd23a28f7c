"""An ``interrupt=True`` scope left open by a thread that ends.

Off the main thread the interrupt is an asynchronous exception addressed by
thread ident, and idents are reused: the next thread started usually gets
the ended one's. A scope the ending thread never exited (entered by hand, or
held by a suspended generator, an ``ExitStack`` kept elsewhere) must not
interrupt that newcomer at its deadline: the thread it bounded is gone.
"""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack

import pytest

import taut
from taut.deadline import DeadlineScope

BUDGET = 0.05
pytestmark = pytest.mark.timeout(60)


def _leave_open(make_open: str) -> tuple[DeadlineScope, int]:
    """Run a thread that enters an interrupt scope and ends inside it."""
    kept: list[object] = []
    left: list[tuple[DeadlineScope, int]] = []

    def body() -> None:
        scope = taut.fail_after(BUDGET, "left open", interrupt=True)
        if make_open == "enter":
            scope.__enter__()
        else:
            stack = ExitStack()
            stack.enter_context(scope)
            kept.append(stack)  # outlives the thread, never closed
        left.append((scope, threading.get_ident()))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    return left[0]


@pytest.mark.parametrize("make_open", ["enter", "exit_stack"])
def test_scope_left_open_by_an_ended_thread_interrupts_no_newcomer(make_open: str) -> None:
    scope, ident = _leave_open(make_open)
    assert scope.deadline is not None
    hits: list[str] = []
    reused = threading.Event()

    def newcomer() -> None:
        if threading.get_ident() != ident:
            return
        reused.set()
        try:
            # Plain Python work well past the deadline: where an interrupt
            # for the ended thread would land.
            while time.monotonic() < scope.deadline + 0.5:  # type: ignore[operator]
                sum(range(50))
        except BaseException as exc:  # what landed is the finding
            hits.append(repr(exc))

    # Idents are reused (glibc hands the ended thread's stack to the next
    # one); a few tries find the reuse where it does not come at once.
    for _ in range(20):
        thread = threading.Thread(target=newcomer)
        thread.start()
        thread.join()
        if reused.is_set():
            break
    assert hits == []
    # The thread's end withdrew the deadline: nothing is left to fire.
    assert scope._deadline is not None and scope._deadline.cancelled
