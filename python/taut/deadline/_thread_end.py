"""Interrupt scopes left open by a thread that ends: withdrawn at its end.

Off the main thread an ``interrupt=True`` scope's interrupt is an
asynchronous exception addressed by thread ident, and idents are reused: the
next thread started usually gets the ended one's. A scope the thread never
exited (entered by hand, kept open by a suspended generator or an
``ExitStack`` that outlives it) would interrupt that newcomer at its
deadline, in code it never bounded.

So each such scope's deadline is listed in a ``threading.local`` of its
thread. CPython drops a thread's locals as the thread ends, on that thread,
before its ident can be handed out again; the list's ``__del__`` then
cancels the deadlines still armed, so nothing is left to fire.
"""

from __future__ import annotations

import threading

from taut import _core

__all__ = ["forget", "watch"]


class _OpenInterrupts:
    """The armed interrupt deadlines of one thread; held only by its local."""

    __slots__ = ("deadlines",)

    def __init__(self) -> None:
        self.deadlines: set[_core.Deadline] = set()

    def __del__(self) -> None:
        # On the ending thread: cancel() also takes back an interrupt set
        # for it that has not landed (harmless here, the thread is done).
        for deadline in self.deadlines:
            try:
                deadline.cancel()
            except BaseException:  # a finalizer must not raise
                pass
        self.deadlines.clear()


_local = threading.local()


def watch(deadline: _core.Deadline) -> None:
    """``deadline`` interrupts this thread: cancel it if the thread ends first."""
    held = getattr(_local, "held", None)
    if held is None:
        held = _local.held = _OpenInterrupts()
    held.deadlines.add(deadline)


def forget(deadline: _core.Deadline) -> None:
    """The scope of ``deadline`` closed on this thread: nothing left to withdraw."""
    held = getattr(_local, "held", None)
    if held is not None:
        held.deadlines.discard(deadline)
