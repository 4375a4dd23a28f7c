"""Interrupts that CPython 3.13 would raise at a loop's backward jump.

CPython 3.13 runs signal handlers and raises asynchronous exceptions at a
loop's backward jump, an instruction its compiler leaves out of the ranges of
the ``try`` and ``with`` blocks around the loop (CPython issue 139622; 3.11
and 3.12 cover it). An exception raised there skips every handler of that
frame (a deadline scope's exit, the program's ``except`` and ``finally``) and
leaves the function as if the loop stood outside them. Measured with a busy
loop written inside a ``with fail_after(..., interrupt=True)`` block: one
interrupt in six escaped on the main thread, five in six on other threads.

So such an interrupt is raised at the thread's next instruction in the code
object it runs instead (inside the blocks around the loop), by a
``sys.monitoring`` INSTRUCTION event enabled on that code object alone until
it has fired:

- on the main thread, by the signal handler (``taut._signal_interrupt``),
  when the frame it interrupted stands at a backward jump;
- on other threads, always, by taut's callback thread (``rust/py_timer.rs``)
  instead of an asynchronous exception: with the GIL held and without running
  Python code it reads the code object of the thread's running frame and
  arms this. The thread, stopped at one of its checks for the GIL, cannot
  move on meanwhile; but an asynchronous exception would be raised at its
  *next* check, maybe the jump, which is why the thread's position is no
  guide there. An interrupt taken back (its scope closed in time) is taken
  back here too (``forget``), and one that waits for 50 ms (the thread is
  blocked in a C call) becomes the asynchronous exception after all, raised
  as the call returns, at the call: the code object would otherwise call the
  hook at each instruction, in every thread, for as long as the call blocks.
"""

from __future__ import annotations

import sys
import threading
from types import CodeType, FrameType
from typing import Any, Callable

from taut._signal_interrupt import protect

__all__ = ["JUMP_BACKWARD", "TOOL", "at_backward_jump", "forget", "raise_at_next_instruction"]

# The opcode to avoid, and the sys.monitoring tool id taut uses for it; None
# where nothing is to be avoided, or no tool id was free (a debugger and a
# coverage tool use their own: 0 and 1).
JUMP_BACKWARD: int | None = None
TOOL: int | None = None

# What the next instruction run in a code object by a thread raises, by
# (code, thread ident): a function returning the exception (None: nothing to
# raise any more), one object per arming. Written by both arming paths,
# taken by _on_instruction or forget.
_pending: dict[tuple[CodeType, int], Callable[[], BaseException | None]] = {}
# sys.monitoring: CPython 3.12+.
_monitoring: Any = getattr(sys, "monitoring", None)


def at_backward_jump(frame: FrameType) -> bool:
    """Whether ``frame`` stands at a backward jump that must be avoided."""
    return JUMP_BACKWARD is not None and frame.f_code.co_code[frame.f_lasti] == JUMP_BACKWARD


def raise_at_next_instruction(
    code: CodeType, thread: int, make_error: Callable[[], BaseException | None]
) -> bool:
    """Raise ``make_error()`` (unless None) at the next instruction ``thread``
    runs in ``code``; False if it cannot be done (no tool id)."""
    if TOOL is None:
        return False
    _pending[(code, thread)] = make_error
    _monitoring.set_local_events(TOOL, code, _monitoring.events.INSTRUCTION)
    return True


def forget(thread: int, armed: object = None) -> bool:
    """Take back what waits for ``thread``'s next instruction (only ``armed``,
    if given: what one arming stored); True if something did. Called by
    taut's callback thread when the thread ran no instruction for a while
    (blocked in a C call: it then gets an asynchronous exception), and on the
    thread as its scope closes in time."""
    keys = [
        key
        for key, make_error in _pending.items()
        if key[1] == thread and (armed is None or make_error is armed)
    ]
    taken = [_take(key) for key in keys]
    return any(make_error is not None for make_error in taken)


def _take(key: tuple[CodeType, int]) -> Callable[[], BaseException | None] | None:
    """Remove ``key``'s entry; the code object's events go off with its last."""
    make_error = _pending.pop(key, None)
    code = key[0]
    if make_error is not None and not any(other[0] is code for other in _pending):
        _monitoring.set_local_events(TOOL, code, 0)
    return make_error


def _on_instruction(code: CodeType, offset: int) -> Any:
    if code.co_code[offset] == JUMP_BACKWARD:
        # Raised here, it would escape too: at the next instruction. (Not
        # met in the loops tested: a thread resumes after a check, and no
        # check sits right before a loop's jump; kept as the rule's guard.)
        return None
    make_error = _take((code, threading.get_ident()))
    if make_error is None:
        return None  # another thread runs the same code
    error = make_error()
    if error is not None:
        raise error
    return None


if sys.version_info >= (3, 13):  # pragma: no cover - depends on the interpreter
    import opcode

    JUMP_BACKWARD = opcode.opmap["JUMP_BACKWARD"]
    for _tool in (4, 3):
        if _monitoring.get_tool(_tool) is None:
            _monitoring.use_tool_id(_tool, "taut")
            _monitoring.register_callback(_tool, _monitoring.events.INSTRUCTION, _on_instruction)
            TOOL = _tool
            break

# A signal handled while the hook raises leaves the raising to it.
protect(_on_instruction)
