"""Waking an event loop from taut's timer thread, without the GIL.

One non-blocking socket pair per event loop: its read end is watched by the
loop, its write end is owned by a ``taut._core.LoopChannel``. A deadline
armed through the channel (``LoopWaker.arm``) or watched by it (:meth:`LoopWaker.watch`)
makes the Rust timer thread, at expiry, push its callback onto the channel
and write one byte (no GIL needed, so neither a busy Python thread nor the
loop's own timers can delay it); the loop wakes and calls the callbacks
pushed so far. A deadline that never fires costs its arm and its cancel: the
loop is not touched.

The write end closes when the channel and every deadline armed through it
are gone, so the timer never writes to a descriptor number that was closed
and reused; the read end closes with the loop.

A loop without ``add_reader`` (the Windows proactor loop) is woken through
``call_soon_threadsafe`` from taut's callback thread instead.

This module knows deadlines and callbacks only; deadline scopes and bounded
calls are its users.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import threading
import weakref
from typing import Callable

from taut._core import Deadline, LoopChannel

__all__ = ["LoopWaker", "Watch", "last", "waker_for"]


class Watch:
    """One deadline watched on one loop; :meth:`stop` before the owner goes away."""

    __slots__ = ("on_expire",)

    def __init__(self, on_expire: Callable[[], object]) -> None:
        self.on_expire: Callable[[], object] | None = on_expire

    def stop(self) -> None:
        """Never call back from now on (also if the deadline already fired)."""
        self.on_expire = None

    def _fire(self) -> None:
        on_expire = self.on_expire
        if on_expire is not None:
            on_expire()


class LoopWaker:
    """Wakes one event loop at the expiry of the deadlines armed through it."""

    __slots__ = ("__weakref__", "_loop_ref", "_reader", "arm", "channel")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop_ref = weakref.ref(loop)
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        self._reader = reader
        # The channel owns the writing end from here on.
        self.channel: LoopChannel | None = LoopChannel(writer.detach())
        self.arm: Callable[[float, Callable[[], object]], Deadline]
        """``arm(at, on_expire)``: a deadline at ``at`` (``time.monotonic()``
        seconds) that calls ``on_expire()`` on the loop's thread once it
        expires (never if it is cancelled first). The channel's own method
        where there is one: a scope's entry calls it directly."""
        try:
            loop.add_reader(reader.fileno(), self._drain)
        except (NotImplementedError, AttributeError):
            reader.close()
            self.channel = None
            self.arm = self._arm_threadsafe
            return
        self.arm = self.channel.arm
        weakref.finalize(loop, self._release)

    def _arm_threadsafe(self, at: float, on_expire: Callable[[], object]) -> Deadline:
        deadline = Deadline(at)
        deadline.call_soon(functools.partial(self._wake_threadsafe, on_expire))
        return deadline

    def watch(self, deadline: Deadline, on_expire: Callable[[], object]) -> Watch:
        """Call ``on_expire()`` on the loop's thread once ``deadline`` expires
        (unless it is cancelled or the watch stopped first)."""
        watch = Watch(on_expire)
        if self.channel is not None:
            self.channel.watch(deadline, watch._fire)
        else:
            deadline.call_soon(functools.partial(self._wake_threadsafe, watch._fire))
        return watch

    def _wake_threadsafe(self, callback: Callable[[], object]) -> None:
        loop = self._loop_ref()
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(callback)
            except RuntimeError:
                pass  # closed in between

    def _drain(self) -> None:
        try:
            while self._reader.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        channel = self.channel
        if channel is None:
            return
        # Taken after reading the wake-up bytes: a deadline firing from now
        # on writes a fresh byte, so none is ever left behind unannounced.
        for callback, _, _ in channel.take():
            callback()

    def _release(self) -> None:
        """The loop is gone: close the read end, forget the fast lookup."""
        global last
        self._reader.close()
        if last[1] is self.arm:
            last = (None, None)


_wakers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWaker] = (
    weakref.WeakKeyDictionary()
)
_wakers_lock = threading.Lock()
# The last loop looked up and its waker's ``arm``, read directly by deadline
# scopes (``(ref, arm) = last; if ref() is loop: arm(at, on_expire)``): most
# programs run one loop, and a WeakKeyDictionary lookup makes a weak reference
# each time.
last: tuple[
    weakref.ReferenceType[asyncio.AbstractEventLoop] | None,
    Callable[[float, Callable[[], object]], Deadline] | None,
] = (None, None)


def waker_for(loop: asyncio.AbstractEventLoop) -> LoopWaker:
    """The waker of ``loop``, made on first use."""
    global last
    waker = _wakers.get(loop)
    if waker is None:
        with _wakers_lock:
            waker = _wakers.get(loop)
            if waker is None:
                waker = _wakers[loop] = LoopWaker(loop)
    last = (weakref.ref(loop), waker.arm)
    return waker
