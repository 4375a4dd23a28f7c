"""An interrupt taken back (a deadline's, or ``executor.interrupt``'s, after
its call or scope ended) must leave nothing behind in the interpreter.

Taking one back with ``PyThreadState_SetAsyncExc(thread, NULL)`` left
CPython's "asynchronous exception pending" flag raised for good before 3.13
(rust/async_exc.rs): all Python code of the process ran 14-48% slower from
then on, and on 3.11 the next ``sys.setprofile``/``sys.settrace`` hook
(debuggers, profilers, coverage) hung the process at its first function call.
The hang is what these tests can see without timing anything: on 3.11 each
of them hung before the fix (on other versions they pass either way). Each
runs in a fresh interpreter, with a lopsided limit: a second or two of work
against 60 s."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# After the interrupt: a profile hook, then a trace hook, each seeing one
# call; then plenty of bytecode, in which no stray exception may land.
_AFTERWARDS = """
seen = []
def f():
    return 1
sys.setprofile(lambda frame, event, arg: seen.append(event))
f()
sys.setprofile(None)
sys.settrace(lambda frame, event, arg: seen.append(event))
f()
sys.settrace(None)
assert "call" in seen, seen
total = 0
for i in range(200_000):
    total += i
print("clean", flush=True)
"""

_SCOPE = """
import sys, threading, taut

def busy_scope():
    turns = 0
    try:
        with taut.fail_after(0.01, interrupt=True):
            while True:  # not a bare `pass`: see the README on CPython's loops
                turns += 1
    except taut.DeadlineExpired:
        print("expired", flush=True)
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("where", ["worker thread", "main thread"])
def test_a_scope_that_interrupted_its_block_leaves_no_trace(where: str) -> None:
    run = (
        "t = threading.Thread(target=busy_scope); t.start(); t.join()\n"
        if where == "worker thread"
        else "busy_scope()\n"
    )
    proc = _run(_SCOPE + run + _AFTERWARDS)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["expired", "clean"], proc.stdout + proc.stderr


def test_a_pool_call_interrupted_by_the_executor_leaves_no_trace() -> None:
    code = """
    import sys, threading, time, taut

    started = threading.Event()

    def spin():
        started.set()
        while True:
            pass

    class Stop(Exception):
        pass

    with taut.ThreadPoolExecutor(1) as ex:
        future = ex.submit(spin)
        assert started.wait(30)
        assert ex.interrupt(future, Stop)
        try:
            future.result(30)
        except Stop:
            print("interrupted", flush=True)
        # The same worker runs the next call: nothing stray lands in it.
        assert ex.submit(sum, range(100_000)).result(30) == sum(range(100_000))
    """
    proc = _run(textwrap.dedent(code) + _AFTERWARDS)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["interrupted", "clean"], proc.stdout + proc.stderr


def test_taking_back_an_interrupt_that_already_landed_raises_nothing_later() -> None:
    # The deadline fires and its interrupt lands; the scope's exit then takes
    # back an interrupt that is no longer pending. The marker set in its
    # place must be raised and caught there, never in the code that follows.
    code = """
    for _ in range(50):
        t = threading.Thread(target=busy_scope); t.start(); t.join()
    busy_scope()
    """
    proc = _run(_SCOPE + textwrap.dedent(code) + _AFTERWARDS)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["expired"] * 51 + ["clean"], proc.stdout + proc.stderr
    assert "TakenBack" not in proc.stderr


def test_a_blocked_loop_interrupt_taken_back_leaves_no_trace() -> None:
    """Regression: ``run_bounded_async(interrupt_blocked_loop=True)`` took its
    interrupt back with ``PyThreadState_SetAsyncExc(thread, NULL)`` once the
    call was over, so every blocked loop it interrupted left the flag raised
    (a ``sys.settrace`` run later in the same pytest process hung)."""
    code = """
    import asyncio, sys, time, taut

    async def blocks():
        time.sleep(10)

    async def main():
        done = await taut.run_bounded_async(
            blocks(), 0.05, interrupt_blocked_loop=True, blocked_grace=0.05
        )
        print("timed out" if done.timed_out else "not timed out", flush=True)

    asyncio.run(main())
    """
    proc = _run(textwrap.dedent(code) + _AFTERWARDS)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["timed", "out", "clean"], proc.stdout + proc.stderr
