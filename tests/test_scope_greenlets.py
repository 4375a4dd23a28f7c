"""Deadline scopes where greenlets take turns on one thread (gevent, eventlet,
greenlet itself).

An ``interrupt=True`` scope's interrupt lands only while the greenlet that
entered the scope runs: another greenlet running on the thread meanwhile is
not interrupted. Timings are lopsided: a 0.05 s budget against busy loops
that go on for 0.3 s past it (the interrupt is sent again every 50 ms at
most, so one that could land in the wrong greenlet would) or for 5 s.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable

import pytest

import taut

greenlet = pytest.importorskip("greenlet")

BUDGET = 0.05
PAST_THE_DEADLINE = 0.3
LONG = 5.0

pytestmark = pytest.mark.timeout(120)


def _busy_until(done: Callable[[], bool], limit: float) -> bool:
    """Run Python bytecode until ``done()`` or ``limit`` seconds: True if
    ``done()`` came first."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if done():
            return True
    return False


def _two_greenlets() -> list[str]:
    """Greenlet A enters an interrupt scope and switches to B, which runs busy
    code until well past A's deadline; back in A, busy code until the
    interrupt. What each one saw, in order."""
    seen: list[str] = []

    def a() -> None:
        try:
            with taut.fail_after(BUDGET, "a's call", interrupt=True) as scope:
                in_b.switch(scope)
                seen.append("a: back in its block")
                _busy_until(lambda: False, LONG)
                seen.append("a: its block ran to the end, never interrupted")
        except taut.DeadlineExpired as e:
            seen.append(f"a: DeadlineExpired {e.label}")

    def b(scope: taut.DeadlineScope) -> None:
        try:
            expired = _busy_until(lambda: scope.expired, LONG)
            past = expired and not _busy_until(lambda: False, PAST_THE_DEADLINE)
            seen.append("b: ran past a's deadline" if past else "b: a's deadline never came")
        except BaseException as e:  # what must not land here
            seen.append(f"b: {type(e).__name__}")
        in_a.switch()

    in_a = greenlet.greenlet(a)
    in_b = greenlet.greenlet(b)
    in_a.switch()
    return seen


EXPECTED = [
    "b: ran past a's deadline",
    "a: back in its block",
    "a: DeadlineExpired a's call",
]


def test_an_interrupt_lands_only_in_the_greenlet_that_entered_the_scope_main_thread() -> None:
    """Regression: the main thread's interrupt (a signal) landed in whatever
    greenlet ran at the deadline: B, which has no scope, got the scope's
    interrupt, and A's block then ran to its end unbounded."""
    assert threading.current_thread() is threading.main_thread()
    assert _two_greenlets() == EXPECTED


def test_an_interrupt_lands_only_in_the_greenlet_that_entered_the_scope_other_thread() -> None:
    """The same off the main thread, where the interrupt is an asynchronous
    exception set by taut's callback thread."""
    seen: list[list[str]] = []
    thread = threading.Thread(target=lambda: seen.append(_two_greenlets()))
    thread.start()
    thread.join()
    assert seen == [EXPECTED]


def test_without_switching_an_interrupt_still_lands_in_busy_code() -> None:
    """With greenlet imported, a scope whose greenlet never switches away is
    interrupted as before, on the main thread and on another."""
    outcomes: list[str] = []

    def run() -> None:
        try:
            with taut.fail_after(BUDGET, interrupt=True):
                _busy_until(lambda: False, LONG)
            outcomes.append("not interrupted")
        except taut.DeadlineExpired:
            outcomes.append("interrupted")

    run()
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert outcomes == ["interrupted", "interrupted"]


_PATCHED_GET_IDENT = """
import os, threading, time
# As gevent's and eventlet's monkey-patching leave it, done before the program
# imports anything else: thread identities name greenlets, not OS threads.
os_thread_ident = threading.get_ident
threading.get_ident = lambda: os_thread_ident() + 1
try:
    import taut
    with taut.move_on_after(0.01) as scope:
        time.sleep(0.2)
    print("expired", scope.expired)
    try:
        with taut.fail_after(0.01):
            time.sleep(0.2)
    except taut.DeadlineExpired as e:
        print("DeadlineExpired", e.label)
except BaseException as e:
    print(type(e).__name__, e)
finally:
    # threading's own shutdown waits for good with get_ident patched this
    # crudely (gevent patches the rest of threading too): not tested here.
    print(end="", flush=True)
    os._exit(0)
"""


def test_scopes_work_when_thread_identities_are_patched_to_name_greenlets() -> None:
    """Regression: under gevent's ``patch_all()`` every scope that expired
    failed at its exit with "entered on thread X and cannot be exited on
    thread Y": the Rust entry recorded the OS thread, the Python exit
    compared it with the patched ``threading.get_ident()``."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_PATCHED_GET_IDENT)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["expired True", "DeadlineExpired operation"]
