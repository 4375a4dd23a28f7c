"""A Ctrl-C landing while ``executor.run`` (or ``taut.to_thread``) queues its
call never leaves that call without the worker wake-up it is owed.

A call queued while a worker is busy leaves a parked worker parked: its
wake-up is owed, handed out at the end of the loop's pass or by a backstop
timer (``_LoopLink.owe``). If the busy worker's call waits for the queued
one, nothing else ever runs it. The probe raises KeyboardInterrupt at each
bytecode of taut's asyncio module in turn (a trace hook with
``f_trace_opcodes``, one fresh run per bytecode, as in
``test_room_interrupts``), lets the loop stop there for good (as Ctrl-C
ending ``run_until_complete`` does), and checks that a queued call runs."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _opcode_events import run_probe

_PROBE = """
import asyncio, faulthandler, json, sys, threading, time
import taut
from taut import _asyncio
from _opcode_events import each_bytecode, interrupted_at

faulthandler.dump_traceback_later(240, exit=True)
kind = sys.argv[1]
FILES = {_asyncio.__file__}


def parked_pair():
    # Two workers, both parked (not spinning: a spinning one takes a queued
    # call by itself, owed or not).
    ex = taut.ThreadPoolExecutor(2)
    both = threading.Barrier(2)
    for f in [ex.submit(both.wait, 30) for _ in range(2)]:
        f.result(30)
    until = time.monotonic() + 30
    while ex.stats().idle != 2:
        assert time.monotonic() < until, "the workers never went idle"
        time.sleep(0.001)
    time.sleep(0.05)  # far past a worker's spin (250 us at most): both parked
    return ex


def run_once(n):
    ex = parked_pair()
    gate = threading.Event()
    busy = threading.Event()
    # The busy worker's call waits for the call queued below: with its
    # wake-up lost, it waits for good beside a parked worker.
    blocked = ex.submit(lambda: (busy.set(), gate.wait(30))[1])
    assert busy.wait(30)
    loop = asyncio.new_event_loop()
    if kind == "to_thread":
        loop.set_default_executor(ex)
        coro = taut.to_thread(gate.set)
    else:
        coro = ex.run(gate.set)
    task = loop.create_task(coro)
    in_taut = lambda frame: frame.f_code.co_filename in FILES
    where = interrupted_at(n, in_taut, lambda: loop.run_until_complete(task))
    # The loop never runs again: its end-of-pass callbacks never run.
    ran = True
    if where is not None:
        # Stats first: a call that ran has set the gate by the time it no
        # longer counts as running.
        stats = ex.stats()
        never_queued = stats.queued == 0 and stats.running == 1 and not gate.is_set()
        if not never_queued:
            ran = gate.wait(10)
    gate.set()
    blocked.result(30)
    loop.close()
    ex.shutdown()
    return where, ran


print(json.dumps(each_bytecode(run_once)))
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["run", "to_thread"])
def test_a_ctrl_c_anywhere_while_queueing_never_loses_the_owed_wake_up(kind: str) -> None:
    outcome = run_probe(_PROBE, kind)
    # The queued call never ran: interrupted there (bytecode number, function, offset).
    assert outcome["lost_at"] is None, outcome["lost_at"]
    # The hook covered the way from queueing the call to owing its wake-up.
    covered = set(outcome["interrupted_in"])
    assert {"_after_queueing", "owe"} <= covered, covered
    assert ("run_in" if kind == "run" else "to_thread") in covered, covered


# The loop goes on after a Ctrl-C that landed as its end-of-pass callback
# (_LoopLink.flush) started, before it took anything: the executor is still
# listed as owed, with no flush to come. A call queued later on that loop,
# behind a busy worker waiting for it, must still get its wake-up.
_FLUSH_CUT_SHORT = """
import asyncio, faulthandler, sys, threading, time
import taut
from taut import _asyncio

faulthandler.dump_traceback_later(120, exit=True)
FLUSH = _asyncio._LoopLink.flush.__code__

ex = taut.ThreadPoolExecutor(2)
both = threading.Barrier(2)
for f in [ex.submit(both.wait, 30) for _ in range(2)]:
    f.result(30)
gate = threading.Event()
busy = threading.Event()
blocked = ex.submit(lambda: (busy.set(), gate.wait(30))[1])
assert busy.wait(30)


def parked():
    until = time.monotonic() + 30
    while ex.stats().idle != 1:
        assert time.monotonic() < until, "the worker never went idle"
        time.sleep(0.001)
    time.sleep(0.05)  # far past a worker's spin (250 us at most)


parked()
fired = []


def at_call(frame, event, arg):
    if frame.f_code is FLUSH and not fired:
        fired.append(True)
        raise KeyboardInterrupt  # before flush's first bytecode
    return None


loop = asyncio.new_event_loop()
first = loop.create_task(ex.run(abs, -1))
sys.settrace(at_call)
try:
    loop.run_until_complete(first)
except KeyboardInterrupt:
    pass
finally:
    sys.settrace(None)
assert fired
assert loop.run_until_complete(asyncio.wait_for(first, 30)) == 1
parked()
try:
    loop.run_until_complete(asyncio.wait_for(ex.run(gate.set), 10))
except asyncio.TimeoutError:
    print("lost")
else:
    print("woken")
gate.set()
blocked.result(30)
loop.close()
ex.shutdown()
"""


@pytest.mark.timeout(150)
def test_a_flush_cut_short_before_it_starts_leaves_later_calls_their_wake_ups() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FLUSH_CUT_SHORT], capture_output=True, text=True, timeout=140
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["woken"], done.stdout
