"""``DeadlineScope``: one deadline over a ``with`` or ``async with`` block.

Entering arms one deadline on the Rust timer thread; leaving in time
cancels it. That is the whole cost of a scope that does not expire: inside
a task the deadline is armed through the loop's wake-up channel in the same
Rust call, and the loop is touched only if the deadline fires. Everything
else (misnesting, expiry, interrupts, cancellations) takes the general path.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from types import FrameType, TracebackType
from typing import Any, Optional

from taut import _core, _loop_waker, _signal_interrupt
from taut._core import MAX_TIMEOUT, _os_thread_ident, clamp_timeout
from taut.deadline import _clock, _lost_interrupts, _thread_end
from taut.deadline._context import bounding_scope, innermost, open_scope
from taut.deadline._errors import DeadlineExpired, ScopeInterrupt, format_seconds
from taut.deadline._tasks import HAS_CANCELLING, exit_task, get_running_loop, running_task, task_of

__all__ = ["DeadlineScope"]

_monotonic = time.monotonic
# The exit protocol's arguments.
_ExcType = Optional[type[BaseException]]
_Exc = Optional[BaseException]
_Tb = Optional[TracebackType]

_MISNESTING_ADVICE = (
    "scopes must be exited in the reverse order of entry (an async generator or a "
    "task that outlives a `with` block are common causes)"
)


class DeadlineScope(_core.ScopeCore):
    """A deadline over a ``with`` or ``async with`` block. Made by
    ``fail_after``/``move_on_after``/``fail_at``/``move_on_at``; enter once.

    Inside a running asyncio task, ``with`` and ``async with`` behave alike:
    at expiry the task is cancelled (the cancellation becomes
    ``DeadlineExpired`` for ``fail_*`` scopes and is swallowed by
    ``move_on_*`` scopes). Elsewhere, and with ``interrupt=True`` (synchronous
    code in the block), ``with`` raises on exit and, with ``interrupt=True``,
    also inside the block.

    The fields, the construction (``DeadlineScope(seconds, absolute,
    raise_on_expiry, label, interrupt)``, ``seconds`` checked as a timeout,
    ``absolute`` already checked) and the usual entry and exit are
    ``_core.ScopeCore``'s, in Rust (see ``rust/py_scope.rs``): a scope is
    made per request. They call the methods below for everything else:
    ``_enter_slow``, ``_aenter_slow``, ``_exit`` and ``_aexit_slow``."""

    # Its public home (reprs and pickles name it, as before the package split).
    __module__ = "taut.deadline"

    __slots__ = ()
    # As the subclass sees them (the Rust base knows only "a scope").
    _parent: DeadlineScope | None
    _outer: DeadlineScope | None

    # -- inspection ---------------------------------------------------------

    @property
    def deadline(self) -> float | None:
        """The absolute deadline (clock seconds), known once entered."""
        return self._at

    @property
    def expired(self) -> bool:
        """True once this scope's own deadline has passed: the timer fired or
        the clock reads at or past the deadline (so a deadline already past
        at entry is expired at once, whatever the timer's latency)."""
        if self._expired is not None:
            return self._expired
        return self._past()

    def _past(self) -> bool:
        at = self._at
        if at is None or self._deadline is None:
            return False
        return self._deadline.expired or self._clock() >= at

    @property
    def timeout_s(self) -> float | None:
        """The budget in seconds, from entry to the deadline."""
        return None if self._at is None else max(0.0, self._at - self._start)

    def remaining(self) -> float | None:
        """Seconds left on this scope's own deadline (None if unbounded)."""
        if self._at is None:
            return None
        d = self._deadline
        if d is not None and d.expired and self._clock is _monotonic:
            return 0.0
        return max(0.0, self._at - self._clock())

    def _error(self) -> DeadlineExpired:
        return DeadlineExpired(self.label, self.timeout_s, self._clock() - self._start)

    # -- what the main-thread signal interrupt asks (_signal_interrupt) ---------

    def _interrupt_due(self) -> bool:
        return not self._closed and not self._interrupt_raised and self._past()

    def _interrupt_error(self) -> BaseException:
        self._interrupt_raised = True
        return ScopeInterrupt(self.label, self.timeout_s)

    def _interrupt_lost(self) -> None:
        self._interrupt_raised = False

    def _interrupt_block(self) -> FrameType | None:
        """The frame that must be running for the interrupt to land: in a
        task, the block's (not while it is suspended at an ``await``); with
        greenlets, the first frame of the entering greenlet (not while
        another greenlet runs on the thread, see ``_enter_slow``)."""
        return self._frame if self._task is not None else self._stack_root

    # -- entry ----------------------------------------------------------------

    def _enter(
        self,
        loop: asyncio.AbstractEventLoop | None,
        task: asyncio.Task[Any] | None,
    ) -> None:
        """Compute the deadline, link to the enclosing scope, arm the timer.
        With a task (and its loop), expiry cancels the task."""
        if self._entered:
            raise RuntimeError("a deadline scope can be entered only once")
        clock = self._clock
        # Read (and checked) before anything changes: a bad clock leaves the
        # scope as it was.
        now = _clock.read(clock)
        self._entered = True
        self._thread = _os_thread_ident()
        self._start = now
        at = self._relative
        if at is not None:
            at += now
        elif self._absolute is not None:
            delay = clamp_timeout(self._absolute - now, name="deadline")
            at = None if delay is None else now + delay
        self._at = at
        parent = innermost.get()
        if parent is not None and parent._abandoned:
            parent = bounding_scope()
        self._effective = at
        if parent is not None and parent._clock is not clock:
            # Each clock's deadlines are compared on that clock only: the
            # parent (a real scope around scope_clock(), say) bounds this
            # one through _outer.
            self._outer = parent
        elif parent is not None:
            outer = parent._effective
            if outer is not None:
                self._effective = outer if at is None else min(at, outer)
            self._outer = parent._outer
        self._parent = parent
        if task is not None:
            self._task = task
            self._cancelling = task.cancelling() if HAS_CANCELLING else 0  # type: ignore[attr-defined,unused-ignore]
        if at is not None:
            real_at = at if clock is _monotonic else _core.monotonic() + (at - now)
            if loop is None or task is None:
                self._deadline = _core.Deadline(real_at)
            else:
                # One Rust call through the loop's wake-up channel: the loop is
                # woken (and _fire called) only if the deadline expires.
                ref, waker_ref, _, _ = _loop_waker.last_seen[0]
                waker = None
                if ref is not None and ref() is loop and waker_ref is not None:
                    waker = waker_ref()
                if waker is None:
                    waker = _loop_waker.waker_for(loop)
                self._deadline = waker.arm(real_at, self)
                if at <= now:
                    # Already expired: cancel before the task's next step, as
                    # asyncio.timeout does, not whenever the timer's wake-up arrives.
                    loop.call_soon(self._cancel_task)
        self._token = innermost.set(self)

    def _enter_slow(self) -> DeadlineScope:
        """``__enter__`` beyond the Rust fast path."""
        fresh = not self._entered  # (a second entry is refused, changing nothing)
        try:
            running = running_task()
            if running is not None and not self._interrupt:
                self._enter(*running)
                return self
            # interrupt=True says the block is synchronous code (the gather runs a
            # sync call inline this way, even on an event loop's thread): it is
            # interrupted on its thread, even while it blocks the loop. In a task
            # the block may await all the same: the thread then runs the loop or
            # another task, where the interrupt must not land (it stopped the
            # loop). So in a task the scope is also entered as a task's scope
            # (the task is cancelled at expiry while the block is suspended), and
            # the interrupt lands only while the block's frame runs
            # (_interrupt_block).
            in_task = running is not None
            self._enter(*(running or (None, None)))
            if self._interrupt and self._deadline is not None:
                self._frame = _lost_interrupts.block_frame(sys._getframe(1), in_task=in_task)
                if not in_task and "greenlet" in sys.modules:
                    # Greenlets (gevent, eventlet, or greenlet itself) take turns
                    # on this thread: while the block's greenlet waits, another
                    # runs here, and the interrupt must not land in that one's
                    # code. It lands only while this greenlet's stack runs (the
                    # signal is sent again, the asynchronous one put off).
                    self._stack_root = _lost_interrupts.stack_root(self._frame)
                _lost_interrupts.watch()
                if _signal_interrupt.available():
                    self._signal_armed = True
                    self._interrupt_raised = False
                    _signal_interrupt.arm(self, self._deadline)
                else:
                    # Addressed by thread ident, which a later thread reuses:
                    # withdrawn if this thread ends with the scope still open.
                    _thread_end.watch(self._deadline)
                    self._deadline.interrupt_thread(
                        _os_thread_ident(), ScopeInterrupt, block=self._interrupt_block()
                    )
            return self
        except BaseException:
            if fresh:
                self._abort_entry()
            raise

    async def _aenter_slow(self) -> DeadlineScope:
        """``__aenter__`` beyond the Rust fast path."""
        if self._interrupt:
            raise ValueError(
                "interrupt=True is for `with` blocks; `async with` cancels the task instead"
            )
        # asyncio's own lookup: the fast path's shortcuts (rust/py_scope.rs,
        # `running_loop`) save a little per scope, and `_enter` finds the
        # loop's arming function itself.
        found = running_task()
        if found is None:
            raise RuntimeError("`async with` a deadline scope must run inside an asyncio task")
        loop, task = found
        # (In a forked child still running its parent's loop, asyncio, and so
        # this path, refuses: that loop does not run in the child. So does
        # the Rust fast path, which trusts the loop's _thread_id before 3.12:
        # the child forgets the loop seen last, see
        # _loop_waker._forget_the_parents_loops.)
        fresh = not self._entered
        try:
            self._enter(loop, task)
            return self
        except BaseException:
            if fresh:
                self._abort_entry()
            raise

    def _abort_entry(self) -> None:
        """The entry raised after it had taken effect: the `with` statement
        raises, its block never runs and the exit never comes. So undo the
        entry, or the deadline outlives the scope (its interrupt, or the
        task's cancellation, hits whatever code runs at its expiry) and the
        context stays bounded by it (``remaining()`` 0 for good once past).
        Usually arming failed (taut's callback thread could not start: no
        new threads in an atexit hook on CPython 3.12.0-3.12.1, or none left;
        or its callbacks stopped at exit); but an exception from another
        signal handler (a Ctrl-C, a raising SIGALRM handler) can land at any
        bytecode of the entry: taut's own signal waits for it to return,
        theirs does not. Another such exception landing here is dropped (the
        first is on its way out); a few tries, as ``_finish_exit`` makes."""
        if not self._entered:
            return  # it landed before anything changed
        for _ in range(8):
            try:
                self._close()
                if innermost.get() is self:
                    if self._token is not None:
                        self._restore()
                    else:
                        # It landed between the context's change and the
                        # token's store.
                        innermost.set(self._parent)
                return
            except BaseException:
                continue

    # -- exit -----------------------------------------------------------------

    async def _aexit_slow(self, exc_type: _ExcType, exc: _Exc, tb: _Tb) -> bool:
        """``__aexit__`` beyond the Rust fast path (``__exit__``'s is ``_exit``)."""
        return self._exit(exc_type, exc)

    def _exit(self, exc_type: _ExcType, exc: _Exc) -> bool:
        """What ``__exit__`` and ``__aexit__`` return (True swallows ``exc``)."""
        # Outside the try: a refused exit must leave the scope as it was.
        if not self._entered:
            # Silently "exited", it was also marked closed: entered later, it
            # would never leave the context again.
            raise RuntimeError(f"{self._describe()} was exited without being entered")
        self._refuse_other_thread()
        try:
            return self._exit_steps(exc_type, exc)
        except BaseException:
            self._finish_exit()
            raise

    def _finish_exit(self) -> None:
        """The exit raised. Usually on purpose, with the scope closed; but an
        exception from another signal handler (a Ctrl-C, a SIGALRM timeout)
        can land at any bytecode of it: taut's own signal waits for this code
        to return, theirs does not. Finish closing and restoring the context
        then, or the deadline outlives the scope: its interrupt would hit
        unrelated code and ``remaining()`` stay 0. Another such exception
        landing here is dropped (the first is on its way out); a few tries
        only, so a failure that repeats cannot keep the caller here. Not on
        a thread whose exit was refused: the scope is not its to close."""
        if self._on_other_thread() or not self._entered:
            return
        for _ in range(8):
            try:
                self._close()
                if innermost.get() is self:
                    self._restore()
                return
            except BaseException:
                continue

    def _on_other_thread(self) -> bool:
        return self._entered and not self._closed and self._thread != _os_thread_ident()

    def _refuse_other_thread(self) -> None:
        """An open scope is exited only on the thread that entered it. Its
        context (the innermost scope, what ``remaining()`` reads) belongs to
        that thread and cannot be changed from here: closed from here, the
        scope would go on bounding that thread, at 0 s left once its
        deadline passed, whatever scope it entered next. So refuse, as trio
        does, and change nothing: the entering thread can still exit it."""
        if not self._on_other_thread():
            return
        here = _os_thread_ident()
        raise RuntimeError(
            f"{self._describe()} was entered on thread {_thread_name(self._thread)} and "
            f"cannot be exited on thread {_thread_name(here)}: a scope bounds the thread "
            "that entered it, which must exit it (the scope is still open)"
        )

    def _exit_steps(self, exc_type: _ExcType, exc: _Exc) -> bool:
        if self._abandoned:
            # Closed when an outer scope was exited first; that exit raised.
            return False
        if self._task is not None:
            return exit_task(self, exc_type, exc)
        expired = self._leave()
        if not expired:
            return False
        if exc_type is not None and issubclass(exc_type, ScopeInterrupt):
            if not self._claims_interrupt():
                return False
            if not self._raise:
                return True
            raise self._error() from None
        if exc_type is None and self._raise:
            raise self._error()
        # Any other exception propagates unchanged.
        return False

    def _leave(self) -> bool:
        """Disarm, restore the context; True if this scope's deadline expired.
        Raises RuntimeError (after closing) if an inner scope is still open."""
        if self._closed:
            return bool(self._expired)
        inner = open_scope()
        expired = self._close()
        if inner is self:
            self._restore()
            return expired
        scope = inner
        while scope is not None and scope is not self:
            scope = scope._parent
        if scope is None:
            # Exited in another context than the one it was entered in: that
            # context cannot be changed from here. Abandoned, so that it
            # skips this closed scope (see _restore).
            self._abandoned = True
            return expired
        # Misnesting: close the inner scopes still open, as trio does.
        assert inner is not None
        error = RuntimeError(
            f"deadline scope stack corrupted: {self._describe()} was exited while "
            f"{inner._describe()}, entered inside it, was still open (now closed); "
            f"{_MISNESTING_ADVICE}"
        )
        while inner is not None and inner is not self:
            inner._close()
            inner._abandoned = True
            inner = inner._parent
        innermost.set(self._parent)
        raise error

    def _claims_interrupt(self) -> bool:
        """Whether a ``ScopeInterrupt`` reaching this (expired) scope's exit
        ends here. It does not carry the scope it was raised for (on worker
        threads it is a class set asynchronously), so: only an interrupt
        scope takes one, and only if no enclosing interrupt scope of this
        thread is past its deadline as well. Otherwise it goes on outwards:
        that scope's block must end too, and its interrupt may be the very
        one raised (it is raised once), so swallowing it here would let the
        rest of that block run unbounded."""
        if not self._interrupt:
            return False
        scope = self._parent
        while scope is not None:
            if scope._interrupt_due_on(self._thread):
                return False
            scope = scope._parent
        return True

    def _interrupt_due_on(self, thread: int) -> bool:
        """Whether this is an open interrupt scope of ``thread`` past its
        deadline: its block must end, by the interrupt if need be."""
        return (
            self._interrupt
            and not self._closed
            and self._deadline is not None
            and self._thread == thread
            and self._past()
        )

    def _restore(self) -> None:
        """Undo this scope's entry in the context (it was the innermost)."""
        try:
            innermost.reset(self._token)
        except ValueError:
            # Exited in a copy of the context it was entered in (an async
            # generator closed by another task, say). The entering context
            # still names this scope as its innermost and cannot be changed
            # from here: abandoned, the scope is skipped there, or that task
            # would stay bounded by a closed scope (0 s left for good once
            # its deadline passed, even inside fresh scopes).
            self._abandoned = True
            innermost.set(self._parent)

    def _close(self) -> bool:
        """Disarm everything; True if the deadline expired. Safe to run again
        when an exception cut it short (see ``_finish_exit``)."""
        if not self._closed:
            d = self._deadline
            # cancel() first: after it returns no asynchronous interrupt of
            # ours can be set any more (and the loop's wake-up for it is
            # dropped). Asked again after an interrupted close, cancel()
            # finds it cancelled, which is not fired.
            fired = d is not None and not d.cancel() and not d.cancelled
            self._expired = fired or (self._at is not None and self._clock() >= self._at)
            self._closed = True
        if self._interrupt:
            # The frames hold this scope: no cycle left behind.
            self._frame = self._stack_root = None
            if self._deadline is not None:
                _thread_end.forget(self._deadline)
            if self._signal_armed:
                _signal_interrupt.disarm(self)  # (a second call does nothing)
                self._signal_armed = False
        return bool(self._expired)

    def _fire(self) -> None:
        """On the loop's thread: this scope's deadline has expired (called by
        the loop's waker, see ``taut._loop_waker``).

        The task is cancelled from a callback of its own, after the loop's
        timers due by now. The loop runs its reader (this call) before those
        timers in the same pass, and an outer cancel scope due first (anyio's
        at the same timeout, entered just before this one) cancels the task
        from such a timer; cancelled here first, the task's waiter is done,
        anyio then sends nothing, and this scope took the cancellation for its
        own (14 runs in 20). So the outer one cancels first, and the exit
        counts two cancellations, one not ours: the outer wins, as with
        ``asyncio.timeout`` in this one's place."""
        task = self._task
        if task is None or self._closed or self._cancel_requested or task.done():
            return
        task.get_loop().call_soon(self._cancel_task)

    def _cancel_task(self) -> None:
        """Cancel the scope's task, unless the scope has exited meanwhile,
        or (before 3.11) a cancellation from elsewhere is on its way to it."""
        task = self._task
        if task is None or self._closed or self._cancel_requested or task.done():
            return
        if not HAS_CANCELLING and _cancel_pending(task):
            # Without Task.cancelling() the exit cannot tell two cancellations
            # apart: cancelling too would make the other one this scope's own
            # (swallowed by move_on_*). The other one wins, as from 3.11.
            return
        self._cancel_requested = True
        task.cancel()

    # -- description ------------------------------------------------------------

    def _label_text(self) -> str:
        # The label is a str (checked at construction), perhaps a subclass:
        # str's own repr, so a subclass's __repr__ (one that raises) never
        # runs in a misnesting error or a repr.
        return str.__repr__(self.label)

    def _describe(self) -> str:
        kind = "fail" if self._raise else "move_on"
        return f"the {kind} scope {self._label_text()}"

    def __repr__(self) -> str:
        kind = "fail" if self._raise else "move_on"
        parts = [f"<taut.DeadlineScope {kind} label={self._label_text()}"]
        if not self._entered:
            if self._relative is not None:
                parts.append(f"timeout={format_seconds(self._relative)}s")
            elif self._absolute is not None:
                # Clamped as the entry will clamp it (10**400 is a valid
                # deadline; its 309 digits are not a useful repr).
                left = min(max(0.0, self._absolute - self._clock()), MAX_TIMEOUT)
                parts.append(f"remaining={format_seconds(left)}s")
            else:
                parts.append("unbounded")
            parts.append("not entered")
        elif self._at is None:
            parts.append("unbounded exited" if self._closed else "unbounded active")
        elif self._closed:
            parts.append(f"timeout={format_seconds(self.timeout_s or 0.0)}s")
            parts.append("exited expired" if self._expired else "exited in time")
        else:
            left = self.remaining() or 0.0
            parts.append(f"remaining={format_seconds(left)}s")
            parts.append(f"timeout={format_seconds(self.timeout_s or 0.0)}s")
            parts.append("active expired" if self._past() else "active")
        return " ".join(parts) + ">"


def _cancel_pending(task: asyncio.Task[Any]) -> bool:
    """Whether ``task.cancel()`` was called and has not reached the task yet
    (before 3.11, where tasks do not count cancellations): the task's next
    step raises it, or the future it waits on was cancelled for it."""
    if getattr(task, "_must_cancel", False):
        return True
    waiter = getattr(task, "_fut_waiter", None)
    return waiter is not None and waiter.cancelled()


def _thread_name(ident: int) -> str:
    """``'name' (ident)`` of a thread, for a message (the ident alone if it has ended)."""
    for thread in threading.enumerate():
        if thread.ident == ident:
            return f"{thread.name!r} ({ident})"
    return f"({ident})"


# No interrupt is raised inside scope entry and exit: the main-thread signal
# handler waits for the next signal, and taut's callback thread puts off an
# asynchronous exception for another thread (rust/py_timer.rs).
# (The Rust fast paths run no bytecode: nothing can land there.)
_signal_interrupt.protect(
    DeadlineScope._enter_slow,
    DeadlineScope._exit,
    DeadlineScope._refuse_other_thread,
    DeadlineScope._exit_steps,
    DeadlineScope._finish_exit,
    DeadlineScope._aenter_slow,
    DeadlineScope._abort_entry,
    DeadlineScope._aexit_slow,
)

# The fast paths call these and must run no bytecode: asyncio's C functions
# and C Task only (without its accelerator, every scope takes the general path).
_C_FUNCTION = type(len)
_core._scope_setup(
    innermost,
    _loop_waker.last_seen,
    get_running_loop if isinstance(get_running_loop, _C_FUNCTION) else None,
    task_of if isinstance(task_of, _C_FUNCTION) else None,
    getattr(sys.modules.get("_asyncio"), "Task", None),
    _monotonic,
    _clock.current,
    DeadlineScope,
    HAS_CANCELLING,
)
