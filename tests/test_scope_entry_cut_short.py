"""A scope's entry cut short by another signal handler's exception.

A Ctrl-C, or a ``SIGALRM`` handler that raises (a test runner's timeout),
can land at any bytecode of a scope's general entry (``_enter_slow``: an
``interrupt=True`` scope, a mock clock, ``fail_at``); taut's own signal waits
for the entry to return, theirs does not. The ``with`` statement then raises
and its block never runs, so the scope is never exited. Cut short after the
entry took effect, the scope stayed the context's innermost
(``remaining()`` went on counting it, 0 for good once past) and its deadline
stayed armed: the interrupt later hit code outside any scope. Found with a
1 kHz ``SIGALRM`` whose handler raises, around ``with move_on_after(0.0005,
interrupt=True)`` in a loop: the interrupt escaped a later ``move_on`` scope
and ``remaining()`` stayed 0.0. Here the exception is raised at each line of
the entry in turn (through a trace function), as the signal would.
"""

from __future__ import annotations

import asyncio
import contextvars
import signal
import sys
import threading
import time
from types import CodeType, FrameType
from typing import Any, Callable

import pytest
from _ctrl_c_lines import ctrl_c_at, lines_of

import taut
from taut import _signal_interrupt
from taut.deadline import DeadlineScope, _clock, _lost_interrupts, _thread_end
from taut.testing import scope_clock

SHORT = 0.05
pytestmark = pytest.mark.timeout(300)


def _entry_functions() -> dict[str, CodeType]:
    """The Python code a scope's general entry runs, by name."""
    functions: list[Any] = [
        DeadlineScope._enter_slow,
        DeadlineScope._aenter_slow,
        DeadlineScope._enter,
        _clock.read,
        _lost_interrupts.block_frame,
        _lost_interrupts.watch,
        _signal_interrupt.arm,
        _thread_end.watch,
    ]
    return {fn.__qualname__: fn.__code__ for fn in functions}


def _entry_lines() -> list[tuple[str, int]]:
    return lines_of(_entry_functions())


def _raising_at(code: CodeType, line: int, landed: list[bool]) -> Callable[..., Any]:
    return ctrl_c_at(code, line, landed, "entry")


def _assert_nothing_left(scope: DeadlineScope) -> None:
    assert scope not in _signal_interrupt._active
    deadline = scope._deadline
    assert deadline is None or deadline.cancelled or not scope._entered
    # Past its deadline now: nothing of it may land in unrelated code.
    time.sleep(SHORT * 2)
    total = 0
    for i in range(20000):
        total += i
    assert total == sum(range(20000))


def _enter_cut_short(scope: DeadlineScope, tracer: Callable[..., Any]) -> None:
    # In a context of its own: what a failure leaves behind stays there.
    contextvars.Context().run(_enter_traced, scope, tracer)
    assert taut.remaining() is None


def _enter_traced(scope: DeadlineScope, tracer: Callable[..., Any]) -> None:
    try:
        sys.settrace(tracer)
        with scope:
            # Reached only when the line is not on the entry's path (or
            # not a line start the tracer sees): a plain in-time scope.
            sys.settrace(None)
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
    # What the program sees after its `with` raised: no scope left.
    assert taut.remaining() is None


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="main-thread signals"
)
@pytest.mark.parametrize(("function", "line"), _entry_lines())
def test_a_ctrl_c_inside_a_main_thread_interrupt_scopes_entry_leaves_nothing_behind(
    function: str, line: int
) -> None:
    def program_handler(signum: int, frame: FrameType | None) -> None:
        pass

    previous = signal.signal(signal.SIGURG, program_handler)
    try:
        landed: list[bool] = []
        scope = taut.move_on_after(SHORT, label="cut short", interrupt=True)
        _enter_cut_short(scope, _raising_at(_entry_functions()[function], line, landed))
        _assert_nothing_left(scope)
        assert signal.getsignal(signal.SIGURG) is program_handler
    finally:
        signal.signal(signal.SIGURG, previous)


@pytest.mark.parametrize(("function", "line"), _entry_lines())
def test_a_signal_inside_a_worker_thread_interrupt_scopes_entry_leaves_nothing_behind(
    function: str, line: int
) -> None:
    failures: list[BaseException] = []

    def body() -> None:
        try:
            landed: list[bool] = []
            scope = taut.move_on_after(SHORT, label="cut short", interrupt=True)
            _enter_cut_short(scope, _raising_at(_entry_functions()[function], line, landed))
            _assert_nothing_left(scope)
        except BaseException as exc:  # reported to the test's thread
            failures.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert failures == []


@pytest.mark.parametrize(("function", "line"), _entry_lines())
def test_a_signal_inside_a_mock_clock_scopes_entry_leaves_the_context_unbounded(
    function: str, line: int
) -> None:
    with scope_clock():
        landed: list[bool] = []
        scope = taut.fail_after(SHORT, label="cut short")
        _enter_cut_short(scope, _raising_at(_entry_functions()[function], line, landed))
        assert taut.remaining() is None
        assert scope._deadline is None or scope._deadline.cancelled or not scope._entered


@pytest.mark.parametrize(("function", "line"), _entry_lines())
def test_a_signal_inside_an_async_scopes_entry_leaves_the_task_uncancelled(
    function: str, line: int
) -> None:
    async def main() -> tuple[float | None, int]:
        landed: list[bool] = []
        scope = taut.fail_at(time.monotonic() + SHORT, label="cut short")
        tracer = _raising_at(_entry_functions()[function], line, landed)
        try:
            sys.settrace(tracer)
            async with scope:
                sys.settrace(None)  # the line is not on the entry's path
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        # Past the deadline: an armed scope would cancel this sleep.
        await asyncio.sleep(SHORT * 2)
        return taut.remaining(), asyncio.current_task().cancelling() if hasattr(
            asyncio.Task, "cancelling"
        ) else 0  # type: ignore[union-attr]

    assert asyncio.run(main()) == (None, 0)
