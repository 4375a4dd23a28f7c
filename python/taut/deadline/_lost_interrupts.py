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
the hook that was in place when that wrapper was made. A program that
installs its own hook later is wrapped again at the next interrupt scope's
entry; one that saves a wrapper and restores it later gets the wrapper of its
own hook back (each wrapper keeps the hook it wraps).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from types import FrameType
from typing import Any, Callable

from taut import _signal_interrupt
from taut._core import _os_thread_ident
from taut.deadline._context import innermost
from taut.deadline._errors import ScopeInterrupt

__all__ = ["block_frame", "stack_root", "watch"]

# Code flags of frames that are suspended while the code that resumed them
# goes on: generators and coroutines (inspect.CO_GENERATOR, CO_COROUTINE,
# CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR; inspect itself is a heavy import).
_GENERATOR = 0x20
_SUSPENDABLE = _GENERATOR | 0x80 | 0x100 | 0x200
_CONTEXTLIB = contextlib.__file__

def watch() -> None:
    """An interrupt scope is being entered: make sure the hook is wrapped."""
    if not getattr(sys.unraisablehook, "_taut_wrapper", False):
        sys.unraisablehook = _wrapping(sys.unraisablehook)


def _wrapping(previous: Callable[[Any], object]) -> Callable[[Any], None]:
    # Set (per thread) while this wrapper passes a report on: a hook of the
    # program's that calls the one it replaced (this wrapper) must not send
    # the report around in a circle.
    busy = threading.local()

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, ScopeInterrupt) and _raise_again():
            return
        if getattr(busy, "on", False):
            sys.__unraisablehook__(unraisable)
            return
        busy.on = True
        try:
            previous(unraisable)
        finally:
            busy.on = False

    hook._taut_wrapper = True  # type: ignore[attr-defined]
    return hook


def block_frame(entering: FrameType, in_task: bool = False) -> FrameType:
    """The frame that runs a scope's block, from the frame that entered it:
    that one, unless a wrapper entered the scope for it (a ``@contextmanager``
    generator, suspended while the block runs; ``ExitStack.enter_context``):
    then the first frame above the wrappers, which stays on the stack.
    ``in_task``: a coroutine's frame is the block's (on the stack exactly
    while the block runs); only plain generators are wrappers."""
    wrappers = _GENERATOR if in_task else _SUSPENDABLE
    frame = entering
    while frame.f_back is not None and (
        frame.f_code.co_flags & wrappers or frame.f_code.co_filename == _CONTEXTLIB
    ):
        frame = frame.f_back
    return frame


def stack_root(frame: FrameType) -> FrameType:
    """The first frame of the stack ``frame`` runs on: the thread's (its
    bootstrap, the main module), or, in a greenlet, that greenlet's own.
    Greenlets take turns on one thread, each on a stack of its own that
    frames of the others never reach: the thread runs a greenlet's code
    exactly while that greenlet's first frame is on its stack."""
    while frame.f_back is not None:
        frame = frame.f_back
    return frame


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
    thread = _os_thread_ident()
    target = None
    running: set[int] | None = None
    scope = innermost.get()
    while scope is not None:
        if scope._interrupt_due_on(thread):
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
