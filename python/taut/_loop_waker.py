"""Waking an event loop from taut's timer thread, without the GIL.

One non-blocking socket pair per event loop, its read end watched by the loop.
A watched deadline asks the Rust timer thread to write one byte to the write
end at expiry (no GIL needed, so neither a busy Python thread nor the loop's
own timers can delay it); the loop wakes and runs the callbacks of the watched
deadlines that have expired. A loop without ``add_reader`` (the Windows
proactor loop) is woken through ``call_soon_threadsafe`` from taut's callback
thread instead.

This module knows deadlines and callbacks only; deadline scopes and bounded
calls are its users.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import weakref
from typing import Callable

from taut._core import Deadline, monotonic

__all__ = ["LoopWaker", "Watch", "waker_for"]


class Watch:
    """One deadline watched on one loop; :meth:`stop` before the owner goes away."""

    __slots__ = ("deadline", "on_expire", "waker")

    def __init__(self, waker: LoopWaker, deadline: Deadline, on_expire: Callable[[], object]):
        self.waker = waker
        self.deadline = deadline
        self.on_expire = on_expire

    def stop(self) -> None:
        self.waker._unwatch(self)


class _Descriptors:
    """What the loop's finaliser needs: no reference to the loop or to the
    watchers' callbacks (which often hold the loop), so the loop can be collected."""

    __slots__ = ("fired", "pending", "reader", "writer")

    def __init__(self, reader: socket.socket, writer: socket.socket) -> None:
        self.reader = reader
        self.writer = writer
        self.pending: set[Deadline] = set()
        self.fired = False  # some watched deadline fired: its byte may be in flight

    def release(self) -> None:
        """The loop is gone: disarm what is pending, then close the sockets.

        A deadline that fired may still be writing its byte on the timer thread,
        and a closed descriptor number can be reused at once. The timer thread
        runs one expiry's effects before it fires the next deadline, so the
        sockets are closed from the callback of a fresh deadline, fired after
        every earlier one. At interpreter exit they are left open instead."""
        for deadline in list(self.pending):
            deadline.cancel()
        if not (self.fired or any(d.expired for d in self.pending)):
            self.close()
            return
        if sys.is_finalizing():
            return
        try:
            Deadline(monotonic()).call_soon(self.close)
        except Exception:  # no callback thread (exit under way): leave them open
            pass

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


class LoopWaker:
    """Wakes one event loop at the expiry of the deadlines it watches."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop_ref = weakref.ref(loop)
        self._watches: set[Watch] = set()
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        self._fds = _Descriptors(reader, writer)
        self._write_fd: int | None = writer.fileno()
        try:
            loop.add_reader(reader.fileno(), self._on_readable)
        except (NotImplementedError, AttributeError):
            self._fds.close()
            self._write_fd = None
            return
        weakref.finalize(loop, self._fds.release)

    def watch(self, deadline: Deadline, on_expire: Callable[[], object]) -> Watch:
        """Call ``on_expire()`` on the loop's thread once ``deadline`` expires
        (unless the watch is stopped first)."""
        watch = Watch(self, deadline, on_expire)
        self._watches.add(watch)
        if self._write_fd is not None:
            self._fds.pending.add(deadline)
            try:
                deadline.notify_fd(self._write_fd)
                return watch
            except NotImplementedError:  # no fd wake-ups on this platform
                self._fds.pending.discard(deadline)
        deadline.call_soon(self._wake_threadsafe)
        return watch

    def _unwatch(self, watch: Watch) -> None:
        self._watches.discard(watch)
        self._fds.pending.discard(watch.deadline)
        if watch.deadline.expired:
            self._fds.fired = True

    def _wake_threadsafe(self) -> None:
        loop = self._loop_ref()
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._check)
            except RuntimeError:
                pass  # closed in between

    def _on_readable(self) -> None:
        try:
            while self._fds.reader.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        self._check()

    def _check(self) -> None:
        for watch in [w for w in self._watches if w.deadline.expired]:
            watch.on_expire()


_wakers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWaker] = (
    weakref.WeakKeyDictionary()
)
_wakers_lock = threading.Lock()


def waker_for(loop: asyncio.AbstractEventLoop) -> LoopWaker:
    """The waker of ``loop``, made on first use."""
    waker = _wakers.get(loop)
    if waker is None:
        with _wakers_lock:
            waker = _wakers.get(loop)
            if waker is None:
                waker = _wakers[loop] = LoopWaker(loop)
    return waker
