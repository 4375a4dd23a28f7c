"""``taut.Future``: a ``concurrent.futures.Future`` without a Condition
until somebody waits, and the helpers that wait on one."""

from __future__ import annotations

import threading
import time
from concurrent import futures as _cf
from concurrent.futures import _base
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from taut._checks import OS_WAIT_SLICE, check_timeout
from taut._notices import _deliver_notices

if TYPE_CHECKING:
    from taut._core import PoolCore

_T = TypeVar("_T")

_PENDING = _base.PENDING
_RUNNING = _base.RUNNING
_CANCELLED = _base.CANCELLED
_CANCELLED_AND_NOTIFIED = _base.CANCELLED_AND_NOTIFIED
_FINISHED = _base.FINISHED
_DONE_STATES = (_CANCELLED, _CANCELLED_AND_NOTIFIED, _FINISHED)
_CANCELLED_STATES = (_CANCELLED, _CANCELLED_AND_NOTIFIED)


# How long result() spins (GIL released) for a short call before parking.
_SPIN_MICROS = 50

# Guards the lazy creation of a future's Condition against the lock-free
# state changes below. Held only for a few attribute reads and writes.
_state_lock = threading.Lock()


def _wait_seconds(future: Future[Any], left: float | None) -> float | None:
    """A timeout already through the gate, waited down to one OS-sized piece:
    the base class makes a single ``threading`` wait, which takes far less
    than ``MAX_TIMEOUT`` on some platforms; a long timeout is kept exactly."""
    if left is None or left <= OS_WAIT_SLICE:
        return left
    end = time.monotonic() + left
    cond = future._condition
    while (left := end - time.monotonic()) > OS_WAIT_SLICE:
        with cond:
            if future._state in _DONE_STATES:
                break
            cond.wait(OS_WAIT_SLICE)
    return max(left, 0.0)


class Future(_cf.Future[_T]):
    """A ``concurrent.futures.Future`` that is cheap to create and complete.

    The standard future builds a ``threading.Condition`` for every call,
    which costs as much as the rest of a submission. Ours creates it on first
    use (by a waiter, a callback registration, ``wait()``/``as_completed()``),
    and completes futures nobody waits on without it. The private fields
    ``_state``, ``_condition`` and ``_waiters`` keep their meaning, so
    ``wait``, ``as_completed`` and ``asyncio.wrap_future`` work unchanged.
    """

    _seq: int
    _core: PoolCore | None

    def __init__(self) -> None:
        # The base __init__ is skipped on purpose: it builds the Condition.
        self._cond: threading.Condition | None = None
        self._state = _PENDING
        self._result = None
        self._exception: BaseException | None = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Callable[[_cf.Future[_T]], object]] = []
        self._seq = 0
        self._core = None

    @property
    def _condition(self) -> threading.Condition:
        cond = self._cond
        if cond is None:
            with _state_lock:
                cond = self._cond
                if cond is None:
                    cond = self._cond = threading.Condition()
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
            self._core.spin_for_release(_SPIN_MICROS)
        if self._state == _FINISHED:
            if self._exception is not None:
                try:
                    raise self._exception
                finally:
                    # Break the cycle frame -> exception -> traceback -> frame.
                    self = None  # type: ignore[assignment]
            return self._result  # type: ignore[return-value]  # FINISHED, no exception: a _T
        return super().result(_wait_seconds(self, timeout))

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if timeout is not None:
            timeout = check_timeout(timeout)
        if self._state == _FINISHED:
            return self._exception
        return super().exception(_wait_seconds(self, timeout))

    def cancel(self) -> bool:
        if self._state in (_RUNNING, _FINISHED):  # states only move forward
            return False
        with _state_lock:
            fast = self._cond is None
            if fast:
                state = self._state
                if state in (_RUNNING, _FINISHED):
                    return False
                if state in _CANCELLED_STATES:
                    return True
                self._state = _CANCELLED
        if fast:
            self._invoke_callbacks()  # type: ignore[attr-defined]
        elif not super().cancel():
            return False
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
        return True

    def add_done_callback(self, fn: Callable[[_cf.Future[_T]], object]) -> None:
        # Without the Condition when nobody waits: asyncio.wrap_future (so
        # every run_in_executor) registers a callback on each future.
        with _state_lock:
            fast = self._cond is None
            if fast and self._state not in _DONE_STATES:
                self._done_callbacks.append(fn)
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
                    # Nobody can be waiting: waiters need the Condition.
                    self._state = _CANCELLED_AND_NOTIFIED
                    return False
        return super().set_running_or_notify_cancel()

    def set_result(self, result: _T) -> None:
        with _state_lock:
            fast = self._cond is None
            if fast:
                if self._state in _DONE_STATES:
                    raise _base.InvalidStateError(f"{self._state}: {self!r}")
                self._result = result
                self._state = _FINISHED
        if fast:
            if self._done_callbacks:
                self._invoke_callbacks()  # type: ignore[attr-defined]
            return
        super().set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        with _state_lock:
            fast = self._cond is None
            if fast:
                if self._state in _DONE_STATES:
                    raise _base.InvalidStateError(f"{self._state}: {self!r}")
                self._exception = exception
                self._state = _FINISHED
        if fast:
            if self._done_callbacks:
                self._invoke_callbacks()  # type: ignore[attr-defined]
            return
        super().set_exception(exception)


def _result_or_cancel(future: _cf.Future[_T], timeout: float | None) -> _T:
    """The result, cancelling the future if waiting fails (timeout, Ctrl-C)."""
    try:
        return future.result(timeout)
    except BaseException:
        future.cancel()
        raise
    finally:
        del future
