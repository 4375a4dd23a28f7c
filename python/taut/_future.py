"""``taut.Future``: a ``concurrent.futures.Future`` that owns nothing but
itself until somebody needs more, and completes without a Condition when
only ``result()`` waits on it."""

from __future__ import annotations

import threading
import time
from _thread import allocate_lock
from concurrent import futures as _cf
from concurrent.futures import _base

from taut import _lazy_import
from taut._checks import OS_WAIT_SLICE, check_timeout
from taut._core import FutureStateLock
from taut._future_condition import FutureCondition
from taut._notices import _deliver_notices

TYPE_CHECKING = False  # typing's, without importing typing (see taut/__init__)
if TYPE_CHECKING:
    from typing import Any, Callable, TypeVar

    from taut._core import PoolCore

    _T = TypeVar("_T")

_PENDING = _base.PENDING
_RUNNING = _base.RUNNING
_CANCELLED = _base.CANCELLED
_CANCELLED_AND_NOTIFIED = _base.CANCELLED_AND_NOTIFIED
_FINISHED = _base.FINISHED
_DONE_STATES = (_CANCELLED, _CANCELLED_AND_NOTIFIED, _FINISHED)
_CANCELLED_STATES = (_CANCELLED, _CANCELLED_AND_NOTIFIED)


# Guards the lazy creation of a future's Condition and of its lists, and
# the registration of result() waiters, against the lock-free state changes
# below (some made by the workers in Rust). Held only for a few attribute
# reads and writes. A lock of taut's own (see taut._core.FutureStateLock):
# the workers take it for every call, without a Python call. Re-entrant, as
# the standard library's Condition lock: a signal handler (a graceful
# shutdown cancelling pending calls, say) runs in the main thread between
# any two bytecodes, also while that thread holds this lock; with a plain
# lock it would wait for itself for good.
_state_lock = FutureStateLock()


def _release_leaked_state_lock() -> None:
    """Let go of ``_state_lock`` if this thread still holds it, for the exit
    hook, which runs outside every block that takes it: any hold left then
    was leaked. On CPython 3.9 a KeyboardInterrupt that lands just as a
    ``with`` block ends skips the block's release (fixed in 3.10: CPython's
    bpo-29988): the main thread then holds the lock for good, and every
    worker that starts or settles a call waits for it, so the exit hook's
    join of the workers hung. (The lock is looked up here: a forked child
    replaces it.)"""
    lock = _state_lock
    while lock._is_owned():
        lock.release()


# A FutureCondition offers all that the stdlib uses of a Condition: typed as
# one, so that _condition keeps the base class's type at no cost per call.
_new_condition: Callable[[], threading.Condition] = FutureCondition  # type: ignore[assignment]


def _release_all(gates: list[Any]) -> None:
    """Wake the ``result()``/``exception()`` callers parked on these gates."""
    for gate in gates:
        gate.release()


# "_T" in quotes: the TypeVar exists for type checkers only. At run time the
# base is concurrent.futures.Future itself, as with any subscript of it.
class Future(_cf.Future["_T"]):
    """A ``concurrent.futures.Future`` that is cheap to create and complete.

    The standard future builds a ``threading.Condition`` for every call,
    which costs as much as the rest of a submission. Ours creates it only
    for ``wait()``/``as_completed()`` (and the base class's slow paths);
    ``result()`` parks on a plain lock of its own instead, so the worker can
    complete a waited-on future without running Python code. The private
    fields ``_state``, ``_condition``, ``_waiters`` and ``_done_callbacks``
    keep their meaning, so ``wait``, ``as_completed`` and
    ``asyncio.wrap_future`` work unchanged.
    """

    # The queue entry of a submitted call: its number, and the pool's core
    # (set on submission; cancel() uses them to take the call out).
    _seq: int
    _core: PoolCore | None
    # The lists behind ``_waiters`` and ``_done_callbacks``, made on first
    # use like the Condition: most futures never get a waiter or a callback,
    # and every object a pending future owns is one more for the garbage
    # collector to walk (a third of a no-op task's cost with 100k pending).
    _waiter_list: list[Any] | None = None
    _callbacks: list[Callable[[_cf.Future[_T]], object]] | None = None
    # One held lock per thread parked in result()/exception(), released by
    # whoever completes or cancels the future. A plain lock instead of the
    # base class's Condition: the worker can then complete the future in
    # Rust (no Python notify, no Condition built for every waited call).
    _result_gates: list[Any] | None = None

    def __init__(self) -> None:
        # The base __init__ is skipped on purpose: it builds the Condition.
        # Every field is set here, always in this order, even though class
        # defaults would make a future cheaper to create: CPython then keeps
        # all futures' fields in one shared layout, and the worker's reads
        # and writes of them (in Rust, on every call) stay fast. With class
        # defaults the fields are added later, in whatever order a call's
        # path takes, and a worker's per-call cost went up by half.
        self._cond: threading.Condition | None = None
        self._state = _PENDING
        self._result: _T | None = None
        self._exception: BaseException | None = None
        self._seq = 0
        self._core = None

    def __copy__(self) -> Future[_T]:
        """``copy.copy``: the standard library's shallow copy (the same
        fields), except that the copy is not the submitted call's entry in
        its pool's queue. Sharing ``_core`` and ``_seq``, cancelling the
        copy took the original's call out of the queue: the call never
        ran and the original stayed pending for good, its waiters with it.
        (The standard library's copy cancels only itself.) Nor does it
        share the gates of the threads parked in the original's
        ``result()``: settling the copy released them, and settling the
        original then released them again, which raised RuntimeError
        ("release unlocked lock") from its set_result, before its callbacks."""
        # Loaded by `copy` already; not at `import taut`.
        copyreg = _lazy_import.load("copyreg")
        cls = self.__class__
        clone = cls.__new__(cls)
        clone.__dict__.update(self.__dict__)
        for name in copyreg._slotnames(cls):
            if hasattr(self, name):
                setattr(clone, name, getattr(self, name))
        clone._core = None
        clone._seq = 0
        clone._result_gates = None
        return clone

    # The standard library's code (wait(), as_completed(), the base methods)
    # uses these two lists only under the future's Condition, so making them
    # on first read needs no other lock.
    @property
    def _waiters(self) -> list[Any]:
        waiters = self._waiter_list
        if waiters is None:
            waiters = self._waiter_list = []
        return waiters

    @_waiters.setter
    def _waiters(self, waiters: list[Any]) -> None:
        self._waiter_list = waiters

    @property
    def _done_callbacks(self) -> list[Callable[[_cf.Future[_T]], object]]:
        callbacks = self._callbacks
        if callbacks is None:
            callbacks = self._callbacks = []
        return callbacks

    @_done_callbacks.setter
    def _done_callbacks(self, callbacks: list[Callable[[_cf.Future[_T]], object]]) -> None:
        self._callbacks = callbacks

    # wait() and as_completed() take this for every future they are given,
    # so it is a FutureCondition (one C object, no Python constructor)
    # rather than a threading.Condition. Made under _state_lock: from then
    # on the state changes under it, never in Rust without it.
    @property
    def _condition(self) -> threading.Condition:
        cond = self._cond
        if cond is None:
            with _state_lock:
                cond = self._cond
                if cond is None:
                    cond = self._cond = _new_condition()
        return cond

    @_condition.setter
    def _condition(self, cond: threading.Condition) -> None:
        # Settable like the stdlib's attribute, so that the typing protocol of
        # as_completed() (a mutable _condition) accepts our futures.
        self._cond = cond

    def __repr__(self) -> str:
        state = self._state
        if state == _FINISHED:
            if self._exception is not None:
                what = f"raised {self._exception.__class__.__name__}"
            else:
                what = f"returned {self._result.__class__.__name__}"
            return f"<{self.__class__.__name__} at {id(self):#x} state=finished {what}>"
        return f"<{self.__class__.__name__} at {id(self):#x} state={state.lower()}>"

    # Reading the state needs no lock: it only ever moves forward, and the
    # result is stored before the state says FINISHED.
    def done(self) -> bool:
        return self._state in _DONE_STATES

    def cancelled(self) -> bool:
        return self._state in _CANCELLED_STATES

    def running(self) -> bool:
        return self._state == _RUNNING

    def result(self, timeout: float | None = None) -> _T:
        if timeout is not None:
            timeout = check_timeout(timeout)
        if self._state != _FINISHED and self._core is not None and timeout != 0:
            # A short call is likely to finish within microseconds: wait for
            # it without parking this thread (see PoolCore.spin_for_release).
            self._core.spin_for_release(timeout)
        if self._state != _FINISHED:
            self._wait_until_done(timeout)
        state = self._state
        if state == _FINISHED:
            if self._exception is not None:
                try:
                    raise self._exception
                finally:
                    # Break the cycle frame -> exception -> traceback -> frame.
                    self = None  # type: ignore[assignment]
            return self._result  # type: ignore[return-value]  # FINISHED, no exception: a _T
        if state in _CANCELLED_STATES:
            raise _base.CancelledError()
        raise _base.TimeoutError()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if timeout is not None:
            timeout = check_timeout(timeout)
        if self._state != _FINISHED:
            self._wait_until_done(timeout)
        state = self._state
        if state == _FINISHED:
            return self._exception
        if state in _CANCELLED_STATES:
            raise _base.CancelledError()
        raise _base.TimeoutError()

    def _wait_until_done(self, timeout: float | None) -> None:
        """Park until the future is done or ``timeout`` (already through the
        gate) has passed, on a gate of its own that the completer releases.
        A long timeout is waited in OS-sized pieces: one lock wait takes far
        less than ``MAX_TIMEOUT`` on some platforms."""
        if timeout == 0:
            return
        gate = allocate_lock()
        gate.acquire()
        with _state_lock:
            if self._state in _DONE_STATES:
                return
            gates = self._result_gates
            if gates is None:
                self._result_gates = [gate]
            else:
                gates.append(gate)
        woken = False
        try:
            if self._state in _DONE_STATES:
                # A signal handler ran in the block above, before our gate was
                # in the list, and finished the future (cancel()): nobody will
                # release the gate. The finally takes it back.
                pass
            elif timeout is None:
                woken = gate.acquire()
            else:
                end = time.monotonic() + timeout
                while not woken and (left := end - time.monotonic()) > 0:
                    woken = gate.acquire(True, min(left, OS_WAIT_SLICE))
        finally:
            if not woken:
                # Timed out or interrupted (Ctrl-C): take the gate back, so
                # that polling with short timeouts leaves nothing behind.
                with _state_lock:
                    gates = self._result_gates
                    if gates is not None and gate in gates:
                        gates.remove(gate)

    def _wake_waiting_results(self) -> None:
        """After a change to a done state made under the Condition."""
        with _state_lock:
            gates = self._result_gates
            if gates is not None:
                self._result_gates = None
        if gates:
            _release_all(gates)

    def cancel(self) -> bool:
        if self._state in (_RUNNING, _FINISHED):  # states only move forward
            return False
        with _state_lock:
            fast = self._cond is None
            if fast:
                cancelled = self._to_cancelled()
                if cancelled is None:
                    return False
                if not cancelled:
                    return True
                gates = self._result_gates
                if gates is not None:
                    self._result_gates = None
        if fast:
            if gates:
                _release_all(gates)
        else:
            cancelled = self._cancel_under_condition()
            if cancelled is None:
                return False
            self._wake_waiting_results()
            if not cancelled:
                # Cancelled before, its callbacks ran then: only finish
                # what an interrupt may have cut short of that cancel.
                self._leave_queue()
                return True
        # The call leaves the queue before the callbacks run: one that
        # submits to this pool (a fallback for the cancelled call) finds the
        # room the call held in a bounded queue. (Left there while they ran,
        # it kept that submit waiting until a running call ended: for good
        # if the running call waited for the fallback.) wait()/as_completed()
        # are told after the callbacks, as the standard library's worker
        # tells them after cancel() returned, and even if one raises
        # (KeyboardInterrupt, SystemExit: the base class passes those on):
        # the call never runs, so nothing else would tell them.
        try:
            self._take_out_of_queue()
        finally:
            try:
                self._invoke_callbacks()  # type: ignore[attr-defined]
            finally:
                if self._seq == -1 and self._state == _CANCELLED:
                    self.set_running_or_notify_cancel()
        return True

    def _cancel_under_condition(self) -> bool | None:
        """The base class's ``cancel()`` without its callbacks, which
        ``cancel`` runs once the waiters are woken: True if this cancelled
        the future, False if it was cancelled already, None if it cannot
        be (running or finished)."""
        cond = self._condition
        with cond:
            cancelled = self._to_cancelled()
            if cancelled:
                cond.notify_all()
        return cancelled

    def _to_cancelled(self) -> bool | None:
        """With the state's lock held (``_state_lock``, or the Condition
        once made): move to CANCELLED. True if this cancelled the future,
        False if it was cancelled already, None if it cannot be (running or
        finished)."""
        state = self._state
        if state in (_RUNNING, _FINISHED):
            return None
        if state in _CANCELLED_STATES:
            return False
        self._state = _CANCELLED
        return True

    def _take_out_of_queue(self) -> None:
        """A cancelled future's call leaves its pool's queue, if still there,
        as one taken out by hand (``_seq`` -1): its room goes to the next
        call at once, and ``_leave_queue`` tells wait()/as_completed()."""
        core = self._core
        if core is not None and self._state == _CANCELLED:
            removed = core.remove(self._seq)
            if removed is not None:
                self._core = None
                self._seq = -1
                # The calls behind it: their new positions.
                _deliver_notices(removed[0])

    def _leave_queue(self) -> None:
        """A cancelled future's call leaves its pool's queue, if still there."""
        core = self._core
        if core is not None and self._state == _CANCELLED:
            removed = core.remove(self._seq)
            if removed is not None:
                # Out of the queue: no worker will ever see it, so tell the
                # waiters of wait()/as_completed() here, and the calls
                # behind it their new positions.
                self.set_running_or_notify_cancel()
                _deliver_notices(removed[0])
        elif self._seq == -1 and self._state == _CANCELLED:
            # Taken out of the queue by hand (_work_queue.get()): likewise.
            self.set_running_or_notify_cancel()

    def add_done_callback(self, fn: Callable[[_cf.Future[_T]], object]) -> None:
        # Without the Condition when nobody waits: asyncio.wrap_future (so
        # every run_in_executor) registers a callback on each future.
        with _state_lock:
            fast = self._cond is None
            if fast and self._state not in _DONE_STATES:
                callbacks = self._callbacks
                if callbacks is None:
                    self._callbacks = [fn]
                else:
                    callbacks.append(fn)
                return
        if not fast:
            super().add_done_callback(fn)
            return
        try:
            fn(self)
        except Exception:
            _base.LOGGER.exception("exception calling callback for %r", self)

    def set_running_or_notify_cancel(self) -> bool:
        with _state_lock:
            if self._cond is None:
                state = self._state
                if state == _PENDING:
                    self._state = _RUNNING
                    return True
                if state == _CANCELLED:
                    # No wait()/as_completed() waiter (they need the
                    # Condition); result() waiters were woken by cancel().
                    self._state = _CANCELLED_AND_NOTIFIED
                    return False
        return super().set_running_or_notify_cancel()

    def _start_unless_settled(self) -> bool:
        """``set_running_or_notify_cancel`` for the worker about to run this
        future's call, except that a future settled by hand while its call
        was queued (``set_result``/``set_exception``) is not started either:
        False, and the worker skips the call as it skips a cancelled one. Its
        outcome is decided; the base method would log that at CRITICAL and
        raise RuntimeError (the standard library's worker dies of it).

        The look at the state and the start are one step under the lock the
        state changes under (both locks are re-entrant), so a ``set_result``
        landing in between cannot make the start raise after all."""
        with _state_lock:
            cond = self._cond
            if cond is None:  # it is made under _state_lock: stays None here
                return self._state != _FINISHED and self.set_running_or_notify_cancel()
        with cond:
            return self._state != _FINISHED and self.set_running_or_notify_cancel()

    # A Condition, once made, is never taken away: with one, skip the
    # quiet attempt (and its _state_lock) and finish under the Condition.
    def set_result(self, result: _T) -> None:
        if self._cond is not None or not self._finish_quietly("_result", result):
            self._finish_under_condition("_result", result)

    def set_exception(self, exception: BaseException | None) -> None:
        if self._cond is not None or not self._finish_quietly("_exception", exception):
            self._finish_under_condition("_exception", exception)

    def _finish_under_condition(self, field: str, value: object) -> None:
        """The base class's set_result/set_exception (``field`` says which),
        without its detours through the lazy lists; then the result()
        waiters and the callbacks. The worker's step for a call that a
        wait() or as_completed() waits on, when telling them needs their
        Python methods (otherwise the Rust core's ``finish_waited_quietly``
        does it)."""
        cond = self._cond
        assert cond is not None  # only called once it exists
        with cond:
            if self._state in _DONE_STATES:
                raise _base.InvalidStateError(f"{self._state}: {self!r}")
            setattr(self, field, value)
            self._state = _FINISHED
            waiters = self._waiter_list
            if waiters:
                if field == "_result":
                    for waiter in waiters:
                        waiter.add_result(self)
                else:
                    for waiter in waiters:
                        waiter.add_exception(self)
            cond.notify_all()
        self._wake_waiting_results()
        if self._callbacks:
            self._invoke_callbacks()  # type: ignore[attr-defined]

    def _finish_quietly(self, field: str, value: object) -> bool:
        """Store the outcome in ``field`` and wake result() waiters and
        callbacks, if nobody needs the Condition; False if the base class
        must (a wait()/as_completed() waiter made it)."""
        with _state_lock:
            if self._cond is not None:
                return False
            if self._state in _DONE_STATES:
                raise _base.InvalidStateError(f"{self._state}: {self!r}")
            setattr(self, field, value)
            self._state = _FINISHED
            gates = self._result_gates
            if gates is not None:
                self._result_gates = None
        if gates:
            _release_all(gates)
        if self._callbacks:
            self._invoke_callbacks()  # type: ignore[attr-defined]
        return True


def _result_or_cancel(future: _cf.Future[_T], end_time: float | None) -> _T:
    """The result, waited for until ``end_time`` (``time.monotonic()``; None:
    no limit), cancelling the future if waiting fails (timeout, Ctrl-C)."""
    try:
        return future.result(None if end_time is None else end_time - time.monotonic())
    except BaseException:
        future.cancel()
        raise
    finally:
        del future
