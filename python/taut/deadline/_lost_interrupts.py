"""Interrupts raised where Python drops exceptions: raised again, not lost.

An ``interrupt=True`` scope's exception lands at whatever bytecode the thread
runs when it arrives, and that can be a ``__del__`` method, a weakref
callback or a ``weakref.finalize`` function that the garbage collector runs
in the middle of the block. Python reports an exception escaping those
through ``sys.unraisablehook`` and carries on: the interrupt was raised once,
so the rest of the block ran unbounded.

While interrupt scopes are in use, ``sys.unraisablehook`` is wrapped: a
``ScopeInterrupt`` that reaches it is not reported but raised again (the
outermost expired interrupt scope of this thread, which the interrupt ends
anyway), through the same path as the first time. Everything else goes on to
the hook that was in place. A program that installs its own hook later
is wrapped again at the next interrupt scope's entry.
"""

from __future__ import annotations

import sys
import threading
from threading import get_ident
from types import FrameType
from typing import Any, Callable

from taut import _signal_interrupt
from taut.deadline._context import innermost
from taut.deadline._errors import ScopeInterrupt

__all__ = ["watch"]

_previous: Callable[[Any], object] = sys.__unraisablehook__
# Set (per thread) while the hook runs: a hook of the program's that calls
# the one it replaced (this one) must not send the report around in a circle.
_busy = threading.local()


def watch() -> None:
    """An interrupt scope is being entered: make sure the hook is in place."""
    global _previous
    if sys.unraisablehook is not _hook:
        _previous = sys.unraisablehook
        sys.unraisablehook = _hook


def _hook(unraisable: Any) -> None:
    if isinstance(unraisable.exc_value, ScopeInterrupt) and _raise_again():
        return
    if getattr(_busy, "on", False):
        sys.__unraisablehook__(unraisable)
        return
    _busy.on = True
    try:
        _previous(unraisable)
    finally:
        _busy.on = False


def _running() -> set[int]:
    """The frames on this thread's stack (by id: they are alive meanwhile)."""
    frames = set()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        frames.add(id(frame))
        frame = frame.f_back
    return frames


def _raise_again() -> bool:
    """Interrupt the outermost expired, still open interrupt scope of this
    thread again, if the finalizer ran inside its block (the frame that
    entered it is on the stack: not a generator suspended in the block, not
    an atexit callback after the program left it open); False if there is
    none (the report then goes on)."""
    thread = get_ident()
    target = None
    running: set[int] | None = None
    scope = innermost.get()
    while scope is not None:
        if (
            scope._interrupt
            and not scope._closed
            and scope._deadline is not None
            and scope._thread == thread
            and scope._past()
        ):
            if running is None:
                running = _running()
            if id(scope._frame) in running:
                target = scope
        scope = scope._parent
    if target is None or target._deadline is None:
        return False
    if target._signal_armed:
        _signal_interrupt.raise_again(target)
    else:
        target._deadline.interrupt_thread(thread, ScopeInterrupt)
    return True
