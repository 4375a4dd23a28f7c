"""Waking an event loop from taut's timer thread, without the GIL.

One non-blocking socket pair per event loop: its read end is watched by the
loop, its write end is owned by a ``taut._core.LoopChannel``. A deadline
armed through the channel (``LoopWaker.arm``) or watched by it (:meth:`LoopWaker.watch`)
makes the Rust timer thread, at expiry, push its owner onto the channel and
write one byte (no GIL needed, so neither a busy Python thread nor the
loop's own timers can delay it); the loop wakes and calls ``_fire()`` on the
owners pushed so far. A deadline that never fires costs its arm and its cancel: the
loop is not touched.

The write end closes when the channel and every deadline armed through it
are gone, so the timer never writes to a descriptor number that was closed
and reused; the read end closes with the loop.

A loop without ``add_reader`` (the Windows proactor loop) is woken through
``call_soon_threadsafe`` from taut's callback thread instead.

asyncio tells nobody when a loop closes. What taut holds for a loop that
must be let go of, or acted on, once it closes (what waits in its channel;
a turn in a bounded queue's line held by one of its coroutines) is handled
by :meth:`LoopWaker._loop_closed`: called as the loop closes (the loop drops
its reader callback then, see ``_CloseAlarm``), and otherwise when the next
loop starts using taut.

The same channel carries the loop's finished asyncio-native calls
(``taut._asyncio``: ``(future, ok, value)`` pushed by workers), so a loop
has one wake-up descriptor and one reader callback for both.

This module knows deadlines and their owners (anything with a ``_fire()``
method) and how a finished call settles its asyncio future; deadline
scopes, bounded calls and ``taut._asyncio`` are its users.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import socket
import sys
import weakref
from typing import Any, Callable, Protocol

from taut._checks import describe
from taut._core import Deadline, LoopChannel
from taut._fork_locks import fork_safe_lock

__all__ = ["LoopWaker", "Owner", "Watch", "last_seen", "waker_for"]


class Owner(Protocol):
    """What a deadline armed through a waker is armed for."""

    def _fire(self) -> None:
        """Called on the loop's thread once the deadline has expired."""


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


class _CloseAlarm:
    """Handed to ``add_reader`` as the reader callback's argument: the
    loop's selector holds its only reference and drops it when the loop
    closes (asyncio's selector loops close their selector then) or is
    collected; its weak reference then tells the waker (``_loop_closed``)."""

    __slots__ = ("__weakref__",)


class LoopWaker:
    """Wakes one event loop at the expiry of the deadlines armed through it."""

    __slots__ = (
        "__weakref__",
        "_close_alarm",
        "_loop_ref",
        "_reader",
        "_reader_fd",
        "arm",
        "channel",
        "closing_owners",
        "link",
        "room_retries",
        "room_watch",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop_ref = weakref.ref(loop)
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        self._reader = reader
        self._reader_fd = reader.fileno()
        # The channel owns the writing end from here on.
        self.channel: LoopChannel | None = LoopChannel(writer.detach())
        self.arm: Callable[[float, Owner], Deadline]
        """``arm(at, owner)``: a deadline at ``at`` (``time.monotonic()``
        seconds) that calls ``owner._fire()`` on the loop's thread once it
        expires (never if it is cancelled first). The channel's own method
        where there is one: a scope's entry calls it directly."""
        self.closing_owners: set[Any] = set()
        """Owners that must act if the loop closes before they are done (a
        coroutine waiting for room in a bounded queue, whose place in line
        must be given up, or told there is some, whose turn must pass on):
        ``_loop_closed`` pops each and calls its ``_loop_gone()``; one done
        first removes itself (``set.remove``/``pop``: exactly one of the two
        gets it, from any thread)."""
        self.room_retries: set[Any] = set()
        """The room notices (among ``closing_owners``) of this loop's
        coroutines back in a bounded queue's line after a turn they did not
        use (refused, or left to one of them): a coroutine of this loop told
        there is room leaves it to one of them ahead of it in line (see
        ``taut._asyncio._room``)."""
        self.room_watch: Any = None
        """The loop's ``taut._asyncio._StaleTurnWatch``, made when one of its
        coroutines first waits for room."""
        self.link: Any = None
        """The loop's ``taut._asyncio`` link, made on its first call there:
        kept here, it lives as long as the waker (see ``waker_for``)."""
        self._close_alarm: weakref.ReferenceType[_CloseAlarm] | None = None
        alarm = _CloseAlarm()
        try:
            loop.add_reader(reader.fileno(), self._drain, alarm)
        except (NotImplementedError, AttributeError):
            reader.close()
            self.channel = None
            self.arm = self._arm_threadsafe
            return
        self.arm = self.channel.arm
        self._close_alarm = weakref.ref(alarm, self._alarm_dropped)
        # Not a method of ours: the finalizer is held from outside the loop
        # for as long as the loop lives (see waker_for).
        weakref.finalize(loop, _loop_freed, reader)

    def _arm_threadsafe(self, at: float, owner: Owner) -> Deadline:
        deadline = Deadline(at)
        deadline.call_soon(functools.partial(self._wake_threadsafe, owner))
        return deadline

    def watch(self, deadline: Deadline, on_expire: Callable[[], object]) -> Watch:
        """Call ``on_expire()`` on the loop's thread once ``deadline`` expires
        (unless it is cancelled or the watch stopped first)."""
        watch = Watch(on_expire)
        if self.channel is not None:
            self.channel.watch(deadline, watch)
        else:
            deadline.call_soon(functools.partial(self._wake_threadsafe, watch))
        return watch

    def _wake_threadsafe(self, owner: Owner) -> None:
        loop = self._loop_ref()
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(owner._fire)
            except RuntimeError:
                pass  # closed in between

    def _drain(self, _alarm: _CloseAlarm | None = None) -> None:
        """The loop's reader callback (called with the ``_CloseAlarm``):
        settle what the channel holds."""
        channel = self.channel
        if channel is None:
            return
        # The wake-up bytes are read before taking: a deadline firing or
        # a call finishing from then on writes a fresh byte, so none is
        # ever left behind unannounced.
        batch = channel.take_woken(self._reader_fd)
        try:
            for target, ok, value in batch:
                if ok is None:
                    target._fire()  # an expired deadline's owner, or a room notice
                elif ok:
                    try:
                        target.set_result(value)
                    except asyncio.InvalidStateError:
                        pass  # cancelled by its awaiting task: the outcome is dropped
                else:
                    try:
                        target.set_exception(awaitable_error(value))
                    except asyncio.InvalidStateError:
                        pass
        except BaseException:
            # One entry raised (a task's cancel() that fails, a Ctrl-C
            # landing here): the error goes its way, as it would from a
            # callback of its own, and the entries after it go back to the
            # channel, which wakes the loop for them. (The batch would give
            # them back as it goes away too, but the traceback keeps it
            # alive as long as the error is kept: a Ctrl-C's until the
            # program ends.)
            batch.give_back()
            raise

    def _alarm_dropped(self, _ref: object) -> None:
        """The loop dropped its reader callback: it closed (``close()`` marks
        it closed before closing its selector), or it is gone. (Not if
        someone merely removed the reader of taut's socket: the channel must
        then stay open for the loop's calls in flight.)"""
        loop = self._loop_ref()
        if loop is None or loop.is_closed():
            self._loop_closed()

    def _loop_closed(self) -> None:
        """The loop closed: drop what waits in the channel, and whatever is
        pushed later (a finished call's future there references the loop:
        kept, it would hold the loop and its descriptors for as long as
        anything holds this waker). The loop then goes as usual
        (``_loop_freed``). And the owners waiting to be told of it
        (``closing_owners``) are told.
        May run more than once (as the loop closes, and as the next one
        starts): the second time finds nothing left."""
        owners = self.closing_owners
        # Each is named (pending[-1]) before it is taken out of the set, and
        # dropped from pending once it acted: a Ctrl-C landing in between (a
        # second one: the first ended the loop, whose close runs this) cuts
        # short only pending[-1], and the handler below finds it.
        pending = list(owners)
        try:
            while pending:
                owner = pending[-1]
                try:
                    owners.remove(owner)
                except KeyError:
                    pass  # done in the meantime, on another thread
                else:
                    owner._loop_gone()
                pending.pop()
        except BaseException:
            # Out of the set, it may not have acted: it does now. (Once too
            # often at worst: a turn passed on twice sends the next in line
            # to try, and back to its place; a turn lost leaves the line
            # waiting for good.) Those after it act as usual.
            if pending and pending[-1] not in owners:
                pending.pop()._loop_gone()
            for owner in pending:
                try:
                    owners.remove(owner)
                except KeyError:
                    continue
                owner._loop_gone()
            raise
        channel = self.channel
        if channel is not None:
            # Dropped here, in Python (they may hold a user object's last
            # reference). A notice whose owner must act even though the loop
            # will never run it (a turn to pass on) is told so, unless it
            # was taken out of closing_owners already (a room notice is
            # there until its turn is spent: popped above, or spent).
            for target, ok, _ in channel.close_inbox():
                if ok is None:
                    let_go = getattr(target, "_let_go", None)
                    if let_go is not None:
                        let_go()


def _loop_freed(reader: socket.socket) -> None:
    """A loop with a channel was freed: close its read end (``reader``), and
    forget the fast lookup if it named that loop (or another one gone)."""
    reader.close()
    loop_ref = last_seen[0][0]
    if loop_ref is not None and loop_ref() is None:
        last_seen[0] = (None, None, False, None)


# What asyncio's own wrap_future (so run_in_executor and to_thread) turns a
# call's concurrent.futures error into, matched by exact type as asyncio does:
# a call raising concurrent.futures.CancelledError (say, from the result() of
# a future cancelled elsewhere) cancels the awaiting task. Before 3.11 the
# timeout errors are two classes too; from 3.11 on both are TimeoutError.
_ASYNCIO_ERRORS: dict[type[BaseException], type[BaseException]] = {
    concurrent.futures.CancelledError: asyncio.CancelledError,
    concurrent.futures.TimeoutError: asyncio.TimeoutError,
    concurrent.futures.InvalidStateError: asyncio.InvalidStateError,
}


def awaitable_error(exc: BaseException) -> BaseException:
    """The error an awaiting task gets for a call that raised ``exc``, as
    ``asyncio.wrap_future`` would give it (see ``_ASYNCIO_ERRORS``; the
    original stays reachable as ``__cause__``). And asyncio futures refuse
    StopIteration (it would end the awaiting coroutine silently); the
    standard library then never settles the awaiting future. Wrap it so the
    caller still gets an outcome. (Shown with ``describe``: this runs in the
    loop's reader callback, where a repr that raises, as one of a
    StopIteration carrying an unprintable value does, lost the outcome.)"""
    if isinstance(exc, StopIteration):
        error = RuntimeError(f"the call raised {describe(exc)}")
        error.__cause__ = exc
        return error
    converted = _ASYNCIO_ERRORS.get(type(exc))
    if converted is not None and converted is not type(exc):
        as_asyncio_gives_it = converted(*exc.args)
        as_asyncio_gives_it.__cause__ = exc
        return as_asyncio_gives_it
    return exc


# Each loop's waker, held weakly where the loop itself holds it (its reader
# callback is a method of the waker): a strong reference from here would
# keep a loop dropped without close() alive for good, through the futures of
# its finished calls waiting in the channel (each references its loop), and
# with it the loop's descriptors. A loop without a channel does not
# reference its waker: `_wakers_held` keeps those (their wakers reference
# the loop only weakly).
_wakers: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, weakref.ReferenceType[LoopWaker]
] = weakref.WeakKeyDictionary()
_wakers_held: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWaker] = (
    weakref.WeakKeyDictionary()
)
_wakers_lock = fork_safe_lock()
# The last loop looked up, its waker, whether that loop tells which thread
# runs it, and its channel (None without one): read directly by deadline
# scopes, which arm through the waker's ``arm`` when their loop is that one
# (the Rust fast path, rust/py_scope.rs, through the channel itself). Most
# programs run one loop, and a WeakKeyDictionary lookup makes a weak
# reference each time. All weak references: held here, the channel (and
# what waits in it, each finished call's future referencing its loop) would
# keep a loop dropped without close() alive until another loop came, and a
# bounded queue's turn handed to one of its coroutines with it.
#
# Held as the one item of a list, which the Rust fast path reads cheaper
# than a module global (a dict lookup).
#
# Before CPython 3.12, asyncio.get_running_loop() makes a getpid() system
# call each time (to notice a fork); a scope entered once per request pays
# for it. asyncio's own loops set ``_thread_id`` while they run and refuse to
# run while another loop runs on the same thread, so "this loop's _thread_id
# is this thread" answers the same question without it. Trusted only for
# loops whose run_forever is asyncio's own (nest_asyncio, for one, replaces
# it and lets loops nest), and only where the lookup is slow.
last_seen: list[
    tuple[
        weakref.ReferenceType[asyncio.AbstractEventLoop] | None,
        weakref.ReferenceType[LoopWaker] | None,
        bool,
        weakref.ReferenceType[LoopChannel] | None,
    ]
] = [(None, None, False, None)]


def _forget_the_parents_loops() -> None:
    """In a forked child: no loop of the parent runs here (asyncio refuses
    them), yet the one seen last, if the fork came from inside it, still
    carries the ``_thread_id`` of the thread that forked, which is the
    child's only thread. Trusted as the running loop (see ``last_seen``), it
    took the place of the child's own loop: a scope in a task of that loop
    was armed on the parent's, which never runs, so its task was never
    cancelled at the deadline. Forgotten, the child's loop is looked up."""
    last_seen[0] = (None, None, False, None)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_the_parents_loops)


def _let_closed_loops_go() -> None:
    """Called (under ``_wakers_lock``) as a new loop gets its waker: the
    loops closed since then let go of what their channels hold (see
    ``LoopWaker._loop_closed``). A program that runs one loop after another
    (``asyncio.run`` per request) so never holds more than the last one."""
    for old_loop, waker_ref in list(_wakers.items()):
        if old_loop.is_closed():
            waker = waker_ref()
            if waker is not None:
                waker._loop_closed()


_THREAD_ID_LOOKUP = sys.version_info < (3, 12)
_RUN_FOREVER = asyncio.BaseEventLoop.run_forever


def _runs_as_asyncio_does(loop: asyncio.AbstractEventLoop) -> bool:
    return (
        _THREAD_ID_LOOKUP
        and isinstance(loop, asyncio.BaseEventLoop)
        and type(loop).run_forever is _RUN_FOREVER
    )


def waker_for(loop: asyncio.AbstractEventLoop) -> LoopWaker:
    """The waker of ``loop``, made on first use. (A closed loop, its reader
    callback dropped, may have lost it: it gets a new one, or the error of
    its ``add_reader``.)"""
    waker_ref = _wakers.get(loop)
    waker = None if waker_ref is None else waker_ref()
    if waker is None:
        with _wakers_lock:
            waker_ref = _wakers.get(loop)
            waker = None if waker_ref is None else waker_ref()
            if waker is None:
                _let_closed_loops_go()
                waker = LoopWaker(loop)
                _wakers[loop] = weakref.ref(waker)
                if waker.channel is None:
                    _wakers_held[loop] = waker
    channel = waker.channel
    last_seen[0] = (
        weakref.ref(loop),
        weakref.ref(waker),
        _runs_as_asyncio_does(loop),
        None if channel is None else weakref.ref(channel),
    )
    return waker
