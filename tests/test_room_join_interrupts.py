"""A Ctrl-C landing while a coroutine joins the line for room in a bounded
queue (``_room``, before it is listed) passes on no turn it never held.

A turn passed on too many ends the turn of whoever holds one: a newcomer
then sees no line and takes the room ahead of the coroutine told there was
room (which goes back to its place). The probe raises KeyboardInterrupt at
each bytecode of ``_room`` in turn (a trace hook with ``f_trace_opcodes``,
one fresh run per bytecode, as in ``test_room_interrupts``) while a second
coroutine joins the line, the first one holding its turn, and checks the
line is still there."""

from __future__ import annotations

import pytest
from _opcode_events import run_probe

_PROBE = """
import asyncio, faulthandler, json, sys
from taut import _asyncio, _loop_waker
from _opcode_events import each_bytecode, interrupted_at
from _room_line import full_queue, join_the_line, wait_until_told

faulthandler.dump_traceback_later(240, exit=True)
ROOM = _asyncio._room.__code__


def run_once(n):
    ex, gate = full_queue()
    loop1 = asyncio.new_event_loop()
    a = join_the_line(loop1, ex.run(abs, -1))
    gate.set()  # both calls end: A is told there is room, and holds its turn
    channel = _loop_waker.waker_for(loop1).channel
    wait_until_told(lambda: len(channel))
    # C arrives while A holds its turn: it joins the line, and is cut short.
    loop2 = asyncio.new_event_loop()
    joins = lambda: loop2.run_until_complete(ex.run(abs, -2))
    where = interrupted_at(n, lambda frame: frame.f_code is ROOM, joins)
    kept = where is None or ex._core.has_room_line()  # A has not come back: its turn is out
    loop2.close()
    assert loop1.run_until_complete(asyncio.wait_for(a, 30)) == 1
    loop1.close()
    ex.shutdown()
    return where, kept


print(json.dumps(each_bytecode(run_once)))
"""


@pytest.mark.timeout(300)
def test_a_ctrl_c_as_a_coroutine_joins_the_line_passes_on_no_turn() -> None:
    outcome = run_probe(_PROBE)
    # A turn was passed on where this interrupt landed (number, function, offset).
    assert outcome["lost_at"] is None, outcome["lost_at"]
    assert set(outcome["interrupted_in"]) == {"_room"}, outcome["interrupted_in"]
