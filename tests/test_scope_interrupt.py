"""``interrupt=True`` on the main thread reaches blocking C calls.

The timer thread (and the timer's callback thread) sends ``SIGURG`` to the
main thread; the system call returns with EINTR and taut's handler raises. pytest runs tests on the
main thread. Timings are lopsided: a 0.05 s budget against 30 s of blocking.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any, Callable

import pytest
from _ctrl_c_lines import ctrl_c_at, lines_of

import taut
from taut import (
    DeadlineExpired,
    _core,
    _signal_interrupt,
    fail_after,
    fail_at,
    move_on_after,
    move_on_at,
)
from taut.deadline import DeadlineScope

LONG = 30.0
BUDGET = 0.05

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        not hasattr(signal, "pthread_kill") or not hasattr(signal, "SIGURG"),
        reason="needs signal.pthread_kill and SIGURG (POSIX)",
    ),
]


def _on_main_thread() -> None:
    assert threading.current_thread() is threading.main_thread()


def _assert_interrupted(block: Callable[[], object], budget: float = BUDGET) -> None:
    _on_main_thread()
    before = signal.getsignal(signal.SIGURG)
    t0 = time.monotonic()
    with pytest.raises(DeadlineExpired) as info:
        with fail_after(budget, "blocking", interrupt=True):
            block()
    assert time.monotonic() - t0 < LONG / 3
    assert type(info.value) is DeadlineExpired
    assert info.value.label == "blocking"
    assert signal.getsignal(signal.SIGURG) is before


def test_time_sleep_is_interrupted() -> None:
    _assert_interrupted(lambda: time.sleep(LONG))


def test_socket_recv_is_interrupted() -> None:
    a, b = socket.socketpair()
    with a, b:
        _assert_interrupted(lambda: a.recv(1))


def test_select_is_interrupted() -> None:
    a, b = socket.socketpair()
    with a, b:
        _assert_interrupted(lambda: select.select([a], [], [], LONG))


def test_subprocess_wait_is_interrupted() -> None:
    child = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({LONG})"])
    try:
        _assert_interrupted(child.wait)
    finally:
        child.kill()
        child.wait()


def test_lock_acquire_is_interrupted() -> None:
    lock = threading.Lock()
    lock.acquire()
    try:
        _assert_interrupted(lock.acquire)
    finally:
        lock.release()


def test_move_on_with_interrupt_swallows_a_blocking_call() -> None:
    t0 = time.monotonic()
    with move_on_after(BUDGET, interrupt=True) as scope:
        time.sleep(LONG)
    assert scope.expired
    assert time.monotonic() - t0 < LONG / 3


def test_deadline_already_past_interrupts_the_blocking_call() -> None:
    for _ in range(5):
        t0 = time.monotonic()
        with pytest.raises(DeadlineExpired):
            with fail_after(0, interrupt=True):
                time.sleep(LONG)
        assert time.monotonic() - t0 < LONG / 3


def test_outer_interrupt_reaches_a_blocking_call_in_an_inner_scope() -> None:
    with pytest.raises(DeadlineExpired) as info:
        with fail_after(BUDGET, "outer", interrupt=True):
            with move_on_after(LONG, "inner") as inner:
                time.sleep(LONG)
    assert info.value.label == "outer"
    assert not inner.expired


@pytest.mark.parametrize("inner_interrupts", [False, True], ids=["cooperative", "interrupt"])
def test_an_expired_inner_scope_passes_the_outer_interrupt_on(inner_interrupts: bool) -> None:
    # Both deadlines at one moment: the handler raises the outer scope's
    # interrupt (once) inside the inner block. The inner scope, expired
    # too, took it for its own and swallowed it, so the second sleep ran to
    # its end, LONG seconds past the outer deadline.
    at = time.monotonic() + BUDGET
    t0 = time.monotonic()
    with pytest.raises(DeadlineExpired) as info:
        with fail_at(at, "outer", interrupt=True):
            with move_on_at(at, "inner", interrupt=inner_interrupts) as inner:
                time.sleep(LONG)
            time.sleep(LONG)
    assert time.monotonic() - t0 < LONG / 3
    assert info.value.label == "outer"
    assert inner.expired


def test_an_interrupt_dropped_by_a_finalizer_is_raised_again() -> None:
    # A finalizer that blocks (closing a connection politely) runs in the
    # block at the deadline: the signal ends its wait, and Python drops the
    # exception escaping a __del__ (sys.unraisablehook). It was raised only
    # once, so the rest of the block ran LONG seconds past the deadline.
    class Connection:
        def __del__(self) -> None:
            time.sleep(LONG)

    reported: list[object] = []
    previous_hook = sys.unraisablehook
    sys.unraisablehook = reported.append
    try:
        t0 = time.monotonic()
        with pytest.raises(DeadlineExpired) as info:
            with fail_after(BUDGET, "block", interrupt=True):
                Connection()
                time.sleep(LONG)
        elapsed = time.monotonic() - t0
        # Other reports still reach the program's hook.
        exc = ValueError("not taut's")
        sys.unraisablehook(
            type("Args", (), {"exc_value": exc, "exc_type": ValueError})()  # a stand-in
        )
    finally:
        sys.unraisablehook = previous_hook
    assert elapsed < LONG / 3
    assert info.value.label == "block"
    assert [getattr(r, "exc_value", None) for r in reported] == [exc]


def test_an_interrupt_scope_exited_on_another_thread() -> None:
    # Only the main thread may set a signal handler: the exit on another
    # thread once raised ValueError ("signal only works in main thread") from
    # inside taut, with taut's handler left in place. Now such an exit is
    # refused before anything changes (tests/test_scope_exit_thread.py), and
    # the main thread's own exit puts the program's handler back.
    received: list[int] = []

    def users_handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    def body() -> None:
        scope = move_on_after(LONG, interrupt=True)
        scope.__enter__()
        outcome: list[object] = []

        def exit_here() -> None:
            try:
                outcome.append(scope.__exit__(None, None, None))
            except BaseException as e:
                outcome.append(e)

        closer = threading.Thread(target=exit_here)
        closer.start()
        closer.join(LONG)
        assert len(outcome) == 1 and isinstance(outcome[0], RuntimeError), outcome
        # The program's handler still gets the SIGURG taut did not send ...
        signal.pthread_kill(threading.get_ident(), signal.SIGURG)
        deadline = time.monotonic() + 5
        while not received and time.monotonic() < deadline:
            time.sleep(0.001)
        assert received == [signal.SIGURG]
        # ... and is back once the main thread exits the scope.
        assert scope.__exit__(None, None, None) is False
        assert signal.getsignal(signal.SIGURG) is users_handler

    previous = signal.signal(signal.SIGURG, users_handler)
    try:
        contextvars.copy_context().run(body)
    finally:
        signal.signal(signal.SIGURG, previous)


_LEFT_OPEN_AT_EXIT = """
import atexit, time, taut
def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
for i in range(3):
    atexit.register(lambda i=i: (spin(1.0), print("atexit", i, "done", flush=True)))
taut.move_on_after(0.3, interrupt=True).__enter__()
"""


def test_a_scope_left_open_at_exit_is_not_raised_again_in_every_atexit_callback() -> None:
    # Its interrupt lands in the first atexit callback (Python reports it);
    # raising it again there, as for a finalizer inside the block, would cut
    # every later callback short as well, unreported.
    done = subprocess.run(
        [sys.executable, "-c", _LEFT_OPEN_AT_EXIT],
        capture_output=True,
        text=True,
        timeout=LONG,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0
    assert len(done.stdout.splitlines()) == 2  # one of three cut short
    assert "ScopeInterrupt" in done.stderr


def test_users_handler_is_restored_and_still_receives_its_signals() -> None:
    received: list[int] = []

    def users_handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = signal.signal(signal.SIGURG, users_handler)
    try:
        with fail_after(LONG, interrupt=True):
            assert signal.getsignal(signal.SIGURG) is not users_handler
            # A SIGURG that taut did not send goes on to the user's handler.
            signal.pthread_kill(threading.get_ident(), signal.SIGURG)
            deadline = time.monotonic() + 5
            while not received and time.monotonic() < deadline:
                time.sleep(0.001)
        assert received == [signal.SIGURG]
        assert signal.getsignal(signal.SIGURG) is users_handler
        _assert_interrupted_keeping(users_handler)
        assert received == [signal.SIGURG]  # taut's own signal is not forwarded
    finally:
        signal.signal(signal.SIGURG, previous)


def _assert_interrupted_keeping(handler: Callable[[int, FrameType | None], object]) -> None:
    with pytest.raises(DeadlineExpired):
        with fail_after(BUDGET, interrupt=True):
            time.sleep(LONG)
    assert signal.getsignal(signal.SIGURG) is handler


def test_nested_interrupt_scopes_restore_once_at_the_outermost_exit() -> None:
    before = signal.getsignal(signal.SIGURG)
    with fail_after(LONG, interrupt=True):
        with move_on_after(BUDGET, interrupt=True) as inner:
            time.sleep(LONG)
        assert inner.expired
        assert signal.getsignal(signal.SIGURG) is _signal_interrupt._handler
    assert signal.getsignal(signal.SIGURG) is before


def test_no_signal_after_a_scope_ends_in_time() -> None:
    with fail_after(0.1, interrupt=True) as scope:
        pass
    time.sleep(0.5)  # five times the budget: a stray interrupt would land here
    assert not scope.expired


def test_handler_never_raises_inside_scope_entry_or_exit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The handler's own rule, driven by hand: inside a scope's exit it stays
    quiet (the exit decides from the clock, and an exception there would
    leave the scope half-closed); in ordinary code it raises."""

    class Due:
        raised = False

        def _interrupt_due(self) -> bool:
            return not self.raised

        def _interrupt_error(self) -> BaseException:
            self.raised = True
            return DeadlineExpired("due")

        def _interrupt_block(self) -> None:
            return None  # not a task's block: lands anywhere

    due = Due()
    monkeypatch.setattr(_signal_interrupt, "_active", [due])

    class Probe(DeadlineScope):
        __slots__ = ()

        def _leave(self) -> bool:
            # Runs inside DeadlineScope._exit, a protected frame.
            _signal_interrupt._handler(signal.SIGURG, sys._getframe())
            return super()._leave()

    with Probe(seconds=None, absolute=None, raise_on_expiry=True, label="p", interrupt=False):
        pass
    assert not due.raised
    with pytest.raises(DeadlineExpired, match="due"):
        _signal_interrupt._handler(signal.SIGURG, sys._getframe())
    assert due.raised


def test_busy_python_code_is_interrupted_without_waiting_for_the_gil() -> None:
    """Pure Python code holds the GIL until the switch interval: the timer
    thread's own signal needs no GIL, so the interrupt does not wait for it
    (the callback thread alone would, here for 30 s)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(LONG)
    try:

        def spin() -> None:
            while True:
                pass

        # A budget the scope's entry cannot outlast even on a busy machine:
        # a signal landing inside taut's own entry code is held back, and its
        # resend would wait out the switch interval.
        _assert_interrupted(spin, budget=10 * BUDGET)
    finally:
        sys.setswitchinterval(interval)


def test_a_late_timer_signal_does_not_hide_the_programs_next_signal() -> None:
    """A signal the timer thread sent that arrives only after the last scope
    closed goes to the program's handler (nothing else can take it); its
    count must not make the program's next signal, in a later scope, look
    like taut's."""
    with _programs_handler() as received:
        with _held_back():  # delivered as it ends, after the scope closed
            with fail_after(LONG, interrupt=True):
                _timer_signal_sent()
        _wait_for(lambda: received == [signal.SIGURG])
        with fail_after(LONG, interrupt=True):
            # Nothing is due: the program's own signal goes to its handler.
            signal.pthread_kill(threading.get_ident(), signal.SIGURG)
            _wait_for(lambda: len(received) == 2)
        assert received == [signal.SIGURG, signal.SIGURG]


def test_a_timer_signal_that_finds_nothing_due_is_not_passed_on() -> None:
    with _programs_handler() as received:
        with fail_after(LONG, interrupt=True):
            with _held_back():  # delivered as it ends, to taut's handler
                _timer_signal_sent()
            time.sleep(0.1)
        assert received == []


def test_a_scope_that_closes_just_after_expiry_sends_nothing_to_the_programs_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The block ends just as the deadline fires: the scope's cancel() finds it
    fired while the timer thread has settled it but not yet sent its signal.
    That signal must not reach the program's handler once it is back.

    The gap between settling and sending is microseconds, or a preemption of
    the timer thread; other actions run first on the entry widen it here to
    tens of milliseconds (against a block that leaves at once: lopsided).
    Without widening, a loop of such scopes sent ~60% of its signals there."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        while True:
            os.write(w, b"x" * 65536)  # full: each write below fails at once
    except BlockingIOError:
        pass
    real_arm = _signal_interrupt.arm
    armed_before_expiry: list[bool] = []

    def arm_behind_slow_actions(scope: DeadlineScope, deadline: _core.Deadline) -> None:
        for _ in range(50_000):
            deadline.notify_fd(w)  # runs on the timer thread before the signal
        real_arm(scope, deadline)
        armed_before_expiry.append(not deadline.expired)

    monkeypatch.setattr(_signal_interrupt, "arm", arm_behind_slow_actions)
    try:
        with _programs_handler() as received:
            with move_on_after(1.0, interrupt=True) as scope:
                deadline = scope._deadline
                assert deadline is not None
                while not deadline.expired:
                    pass  # leave as soon as the timer has settled the deadline
            time.sleep(0.5)  # a late signal lands at the program's handler here
            assert armed_before_expiry == [True]  # the timer's signal was registered
            assert received == []
    finally:
        os.close(r)
        os.close(w)


@contextlib.contextmanager
def _programs_handler() -> Iterator[list[int]]:
    """The program's own SIGURG handler for the block: what reaches it."""
    received: list[int] = []

    def programs_handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = signal.signal(signal.SIGURG, programs_handler)
    try:
        yield received
    finally:
        signal.signal(signal.SIGURG, previous)


@contextlib.contextmanager
def _held_back() -> Iterator[None]:
    """SIGURG blocked on this thread for the block: signals sent meanwhile are
    delivered as it ends."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGURG})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGURG})


def _timer_signal_sent() -> None:
    """A deadline of its own has the timer thread send SIGURG to this (main)
    thread, which holds it back: wait until it is pending."""
    d = _core.Deadline(_core.monotonic() + BUDGET)
    d.signal_main_thread(signal.SIGURG)
    assert d.wait(LONG)
    # wait() can return between the timer's settling and its send.
    _wait_for(lambda: signal.SIGURG in signal.sigpending())
    assert signal.SIGURG in signal.sigpending()


def _wait_for(condition: Callable[[], bool]) -> None:
    end = time.monotonic() + LONG / 3
    while not condition() and time.monotonic() < end:
        time.sleep(0.001)  # signal handlers run on this (main) thread


def test_other_threads_keep_the_asynchronous_exception() -> None:
    """Off the main thread no signal handler can run: a blocking call there
    finishes, and the interrupt lands at the next bytecode after it."""
    outcome: list[tuple[str, float]] = []
    before = signal.getsignal(signal.SIGURG)

    def worker() -> None:
        t0 = time.monotonic()
        try:
            with fail_after(BUDGET, interrupt=True):
                time.sleep(BUDGET * 6)
                while True:
                    pass
        except DeadlineExpired:
            outcome.append(("expired", time.monotonic() - t0))

    t = threading.Thread(target=worker)
    t.start()
    t.join(LONG)
    assert len(outcome) == 1
    kind, elapsed = outcome[0]
    assert kind == "expired"
    assert elapsed >= BUDGET * 6  # the sleep was not cut short
    assert signal.getsignal(signal.SIGURG) is before  # no handler from another thread


def test_a_handler_installed_inside_the_scope_is_left_alone() -> None:
    def programs_handler(signum: int, frame: FrameType | None) -> None:
        pass

    before = signal.getsignal(signal.SIGURG)
    try:
        with fail_after(LONG, interrupt=True):
            signal.signal(signal.SIGURG, programs_handler)
        assert signal.getsignal(signal.SIGURG) is programs_handler
    finally:
        signal.signal(signal.SIGURG, before)


_NO_CALLBACK_THREAD = """
import signal, threading, time
import taut, taut._timer

def refuse():
    # What CPython 3.12.0-3.12.1 says in an atexit hook (and any CPython when
    # the process is out of threads): taut's callback thread cannot start.
    raise RuntimeError("can't create new thread at interpreter shutdown")

taut._timer._start_callback_thread = refuse
program_handler = signal.getsignal(signal.SIGURG)
outcomes = []

def enter_and_wait():
    try:
        with taut.fail_after(0.05, interrupt=True):
            outcomes.append("entered")
    except RuntimeError:
        outcomes.append("refused")
    # Nothing of the refused scope may stay behind: no deadline around the
    # code that follows, and no interrupt raised into it later.
    outcomes.append(taut.remaining())
    try:
        time.sleep(0.5)
    except BaseException as exc:
        outcomes.append(type(exc).__name__)

enter_and_wait()  # main thread: the signal interrupt
print(outcomes, signal.getsignal(signal.SIGURG) is program_handler)
outcomes.clear()
worker = threading.Thread(target=enter_and_wait)  # asynchronous exception
worker.start()
worker.join()
print(outcomes)
"""


def test_a_scope_that_cannot_arm_its_interrupt_leaves_nothing_armed() -> None:
    # Arming an interrupt needs taut's callback thread. When it cannot start,
    # entering fails; the scope used to stay half-entered: its deadline kept
    # bounding the code after the `with` (taut.remaining()), and at expiry a
    # ScopeInterrupt was raised into that code, outside any scope.
    proc = subprocess.run(
        [sys.executable, "-c", _NO_CALLBACK_THREAD], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["['refused', None] True", "['refused', None]"], proc.stdout


class _ErrorInDel:
    def __del__(self) -> None:
        raise ValueError("reported")


def test_a_hook_restored_by_the_program_gets_the_reports_again() -> None:
    # The usual "save, replace, restore" of sys.unraisablehook (CPython's
    # test.support.catch_unraisable_exception, pytest's plugin, a library's
    # own capture) around code that enters an interrupt scope. What it
    # saved and restores is taut's wrapper, but _lost_interrupts keeps one
    # global _previous, by then the temporary hook: every later report of
    # the program goes to that dead temporary hook, never to its own.
    got: list[object] = []
    outer_previous = sys.unraisablehook
    sys.unraisablehook = lambda u: got.append(u.exc_value)
    try:
        with move_on_after(30, interrupt=True):
            pass  # taut wraps the program's hook
        saved = sys.unraisablehook
        captured: list[object] = []
        sys.unraisablehook = captured.append  # a temporary capture ...
        with move_on_after(30, interrupt=True):
            pass
        sys.unraisablehook = saved  # ... and the program's hook restored

        _ErrorInDel()  # its __del__'s ValueError goes to sys.unraisablehook
    finally:
        sys.unraisablehook = outer_previous
    assert [type(e).__name__ for e in got] == ["ValueError"]


def test_an_interrupt_dropped_by_a_finalizer_is_raised_again_through_a_contextmanager() -> None:
    # The common wrapper (@contextmanager around an interrupt scope, or
    # ExitStack.enter_context): the frame _lost_interrupts records at entry
    # is the wrapper's generator (or enter_context), never on the stack while
    # the block runs, so the dropped interrupt is reported and not raised
    # again: the rest of the block runs unbounded (here 5 s past a 0.05 s
    # deadline). Entered directly, the same block ends at 0.05 s.
    long = 5.0

    class Connection:
        def __del__(self) -> None:
            time.sleep(long)  # a polite close, cut by the interrupt

    @contextlib.contextmanager
    def bounded(seconds: float) -> Iterator[None]:
        with fail_after(seconds, "block", interrupt=True):
            yield

    reported: list[object] = []
    previous = sys.unraisablehook
    sys.unraisablehook = reported.append
    t0 = time.monotonic()
    try:
        with pytest.raises(DeadlineExpired):
            with bounded(0.05):
                Connection()
                time.sleep(long)
    finally:
        sys.unraisablehook = previous
    assert time.monotonic() - t0 < long / 3


def test_a_report_goes_through_every_hook_the_program_chained() -> None:
    # The program's hook, wrapped by taut; then a library's hook that passes
    # reports on to the one it replaced (taut's wrapper), wrapped again. A
    # report reaches the library's hook, then the program's, once each: the
    # circle guard of one wrapper must not stop the report at the other.
    got: list[tuple[str, str]] = []
    outer = sys.unraisablehook

    def program(unraisable: Any) -> None:
        got.append(("program", type(unraisable.exc_value).__name__))

    sys.unraisablehook = program
    try:
        with move_on_after(30, interrupt=True):
            pass
        replaced = sys.unraisablehook

        def library(unraisable: Any) -> None:
            got.append(("library", type(unraisable.exc_value).__name__))
            replaced(unraisable)

        sys.unraisablehook = library
        with move_on_after(30, interrupt=True):
            pass

        _ErrorInDel()  # its __del__'s ValueError goes to sys.unraisablehook
    finally:
        sys.unraisablehook = outer
    assert got == [("library", "ValueError"), ("program", "ValueError")]


def _exit_functions() -> dict[str, Any]:
    """The code an interrupt scope's exit runs, by name."""
    from taut import _signal_interrupt

    functions: list[Any] = [
        DeadlineScope._exit,
        DeadlineScope._exit_steps,
        DeadlineScope._leave,
        DeadlineScope._close,
        DeadlineScope._restore,
        _signal_interrupt.disarm,
    ]
    return {fn.__qualname__: fn.__code__ for fn in functions}


def _exit_lines() -> list[tuple[str, int]]:
    """Every line of the code an interrupt scope's exit runs, by function."""
    return lines_of(_exit_functions())


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="main-thread signals"
)
@pytest.mark.parametrize(("function", "line"), _exit_lines())
def test_a_ctrl_c_inside_an_interrupt_scopes_exit_leaves_nothing_of_it_behind(
    function: str, line: int
) -> None:
    # Another signal handler's exception (Ctrl-C) can land at any bytecode of
    # the exit; taut's own signal waits for the exit to return, that one does
    # not. Cut short after cancelling the deadline, the scope stayed open and
    # armed: its interrupt later hit code outside any scope, the program's
    # SIGURG handler was never put back, and remaining() said 0 for good.
    from taut import _signal_interrupt

    def program_handler(signum: int, frame: FrameType | None) -> None:
        pass

    previous = signal.signal(signal.SIGURG, program_handler)
    landed: list[bool] = []

    tracer = ctrl_c_at(_exit_functions()[function], line, landed, "exit")

    scope = move_on_after(0.05, label="short", interrupt=True)
    try:
        try:
            sys.settrace(tracer)
            with scope:
                pass
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        assert scope._closed
        assert scope not in _signal_interrupt._active
        assert taut.remaining() is None
        assert signal.getsignal(signal.SIGURG) is program_handler
        # Past its deadline now: nothing of it may land in unrelated code.
        time.sleep(0.1)
        for _ in range(1000):
            pass
    finally:
        signal.signal(signal.SIGURG, previous)
