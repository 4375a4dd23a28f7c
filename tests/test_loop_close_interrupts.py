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
import asyncio, faulthandler, gc, json, sys
from taut import _asyncio, _loop_waker
from _opcode_events import each_bytecode, interrupted_at
from _room_line import (
    ends_in_time, full_queue, join_the_line, start_another_loop_on_taut, wait_until_told,
)

faulthandler.dump_traceback_later(240, exit=True)
CODES = {_loop_waker.LoopWaker._loop_closed.__code__, _asyncio._RoomNotice._loop_gone.__code__}
swallowed = []
sys.unraisablehook = lambda u: swallowed.append(u.exc_type.__name__)


def run_once(n):
    ex, gate = full_queue()
    loop1 = asyncio.new_event_loop()
    loop2 = asyncio.new_event_loop()
    a = join_the_line(loop1, ex.run(abs, -1))
    b = join_the_line(loop2, ex.run(abs, -2))
    assert not a.done() and not b.done() and ex._core.has_room_line()
    gate.set()  # both calls end: A, first in line, is told, on loop 1
    channel = _loop_waker.waker_for(loop1).channel
    wait_until_told(lambda: len(channel))

    # Loop 1 closes with A's turn in its channel, A never resumed.
    def close_loop1():
        loop1.close()
        gc.collect()

    where = interrupted_at(n, lambda frame: frame.f_code in CODES, close_loop1)
    # As the next loop starts using taut, closed loops are looked at again.
    start_another_loop_on_taut()
    told = where is None or ends_in_time(loop2, b)
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
