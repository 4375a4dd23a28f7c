"""A Ctrl-C landing while a coroutine is told there is room in a bounded queue
never loses the turn: whatever bytecode it lands on, from the loop's reader
taking the notice to the coroutine spending the turn, the turn passes on to
the next coroutine in line once the loop closes.

A ``KeyboardInterrupt`` raised by the signal handler lands between any two
bytecodes of the main thread. The probe raises it at each one in turn, from
a trace hook (``f_trace_opcodes``), one fresh run per bytecode, until the
coroutine goes through without meeting it."""

from __future__ import annotations

import pytest
from _opcode_events import run_probe

# One run: the first coroutine in line ("A", on loop 1) is told there is
# room, loop 1 runs with the hook armed at bytecode `n` of taut's asyncio
# modules, the KeyboardInterrupt stops it, and it closes without running
# again (its tasks never resumed, as when Ctrl-C ends `run_until_complete`
# and the program closes the loop). The second in line ("B", on loop 2) must
# then be told there is room: the queue is empty, so nothing else would
# ever tell it. faulthandler ends a hang, with every thread's stack.
_PROBE = """
import asyncio, faulthandler, functools, gc, json, sys
from taut import _asyncio, _loop_waker
from _opcode_events import each_bytecode, interrupted_at
from _room_line import (
    ends_in_time, full_queue, join_the_line, start_another_loop_on_taut, wait_until_told,
)

faulthandler.dump_traceback_later(240, exit=True)
kind = sys.argv[1]
FILES = {_asyncio.__file__, _loop_waker.__file__}


class LoopWithoutReaders(asyncio.SelectorEventLoop):
    # As Windows' proactor loop: no channel; told there is room through
    # taut's callback thread and call_soon_threadsafe.
    handed = 0

    def add_reader(self, *args, **kwargs):
        raise NotImplementedError

    def call_soon_threadsafe(self, callback, *args, **kwargs):
        handle = super().call_soon_threadsafe(callback, *args, **kwargs)
        self.handed += 1
        return handle


def first_in_line(ex, loop):
    if kind == "submit_when_room":
        # A plain submit waiting in the same line (a gather's calls).
        return _asyncio.submit_when_room(ex, functools.partial(ex.submit, abs, -1), loop)
    return ex.run(abs, -1)  # without readers: a plain submit, in line


def run_once(n):
    ex, gate = full_queue()
    if kind == "without_readers":
        loop1 = LoopWithoutReaders()
        told_a = lambda: loop1.handed
    else:
        loop1 = asyncio.new_event_loop()
        told_a = lambda: len(_loop_waker.waker_for(loop1).channel)
    loop2 = asyncio.new_event_loop()
    a = join_the_line(loop1, first_in_line(ex, loop1))
    b = join_the_line(loop2, ex.run(abs, -2))
    assert not a.done() and not b.done() and ex._core.has_room_line()
    gate.set()  # both calls end: the first in line is told, on loop 1
    wait_until_told(told_a)
    # Files, not functions: _fire and there_may_be_room run once per process.
    in_taut = lambda frame: frame.f_code.co_filename in FILES
    where = interrupted_at(n, in_taut, lambda: loop1.run_until_complete(a))
    loop1.close()
    gc.collect()  # the interrupt's traceback held loop 1's reader callback
    # A loop without readers tells nobody that it closed: taut sees it as
    # the next loop starts using taut.
    start_another_loop_on_taut()
    # B told, and nothing left holding a turn: a newcomer need not queue.
    told = where is None or (ends_in_time(loop2, b) and not ex._core.has_room_line())
    loop2.close()
    gate.set()
    ex.shutdown()
    return where, told


print(json.dumps(each_bytecode(run_once)))
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["run", "submit_when_room", "without_readers"])
def test_a_ctrl_c_anywhere_on_the_way_of_a_turn_never_loses_it(kind: str) -> None:
    outcome = run_probe(_PROBE, kind)
    # The turn was lost where this interrupt landed (bytecode number, function).
    assert outcome["lost_at"] is None, outcome["lost_at"]
    # The hook covered the whole way: the loop's reader, the notice telling
    # the coroutine, the coroutine taking its turn back to the queue.
    covered = set(outcome["interrupted_in"])
    assert {"_fire", "there_may_be_room", "_room"} <= covered, covered
    if kind == "without_readers":
        assert "submit_when_room" in covered, covered
    else:
        assert "_drain" in covered, covered
        assert ("run_in" if kind == "run" else "submit_when_room") in covered, covered
