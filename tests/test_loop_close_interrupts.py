"""A Ctrl-C landing while a closing loop passes on the turn one of its
coroutines held in a bounded queue's line never loses that turn.

The first Ctrl-C ends ``run_until_complete``; the program then closes the
loop, and ``LoopWaker._loop_closed`` (run as the loop drops its reader)
passes on the turn of its coroutine told there is room. A second Ctrl-C may
land there, at any bytecode. The probe raises KeyboardInterrupt at each
bytecode of ``_loop_closed`` and ``_loop_gone`` in turn (a trace hook with
``f_trace_opcodes``, one fresh run per bytecode, as in
``test_room_interrupts``); the next coroutine in line, on another loop,
must then be told there is room: the queue is empty, so nothing else would
ever tell it."""

from __future__ import annotations

import pytest
from _opcode_events import run_probe

_PROBE = """
import asyncio, faulthandler, gc, json, sys, threading, time
import taut
from taut import _asyncio, _loop_waker
from _opcode_events import InterruptAtOpcode, each_bytecode

faulthandler.dump_traceback_later(240, exit=True)
CODES = {_loop_waker.LoopWaker._loop_closed.__code__, _asyncio._RoomNotice._loop_gone.__code__}
swallowed = []
sys.unraisablehook = lambda u: swallowed.append(u.exc_type.__name__)


def run_once(n):
    ex = taut.ThreadPoolExecutor(1, max_queue=1)
    gate = threading.Event()
    ex.submit(gate.wait, 60)  # running
    ex.submit(gate.wait, 60)  # queued: the queue is full
    loop1 = asyncio.new_event_loop()
    loop2 = asyncio.new_event_loop()
    a = loop1.create_task(ex.run(abs, -1))
    for _ in range(3):
        loop1.run_until_complete(asyncio.sleep(0))
    b = loop2.create_task(ex.run(abs, -2))
    for _ in range(3):
        loop2.run_until_complete(asyncio.sleep(0))
    assert not a.done() and not b.done() and ex._core.has_room_line()
    gate.set()  # both calls end: A, first in line, is told, on loop 1
    channel = _loop_waker.waker_for(loop1).channel
    until = time.monotonic() + 60
    while not len(channel):
        assert time.monotonic() < until, "A was never told"
        time.sleep(0.001)
    # Loop 1 closes with A's turn in its channel, A never resumed.
    hook = InterruptAtOpcode(n, lambda frame: frame.f_code in CODES)
    try:
        with hook:
            loop1.close()
            gc.collect()
    except KeyboardInterrupt:
        pass
    where = hook.where
    # As the next loop starts using taut, closed loops are looked at again.
    loop3 = asyncio.new_event_loop()
    _loop_waker.waker_for(loop3)
    loop3.close()
    told = True
    if where is not None:
        try:
            loop2.run_until_complete(asyncio.wait_for(b, 10))
        except asyncio.TimeoutError:
            told = False
    loop2.close()
    ex.shutdown()
    return where, told


print(json.dumps({**each_bytecode(run_once), "swallowed": swallowed}))
"""


@pytest.mark.timeout(300)
def test_a_second_ctrl_c_as_the_loop_closes_never_loses_a_turn() -> None:
    outcome = run_probe(_PROBE)
    # The turn was lost where this interrupt landed (number, function, offset).
    assert outcome["lost_at"] is None, outcome["lost_at"]
    covered = set(outcome["interrupted_in"])
    assert {"_loop_closed", "_loop_gone"} <= covered, covered
