"""The object behind a ``taut.Future``'s ``_condition``: a reentrant lock
whose ``acquire``/``release``/``with`` are C code, plus the
``wait``/``notify`` of a Condition, written in Python and used only by
whoever calls them.

``concurrent.futures.wait()`` and ``as_completed()`` take the
``_condition`` of every future they are given (``acquire()``/``release()``
and ``with``) and never wait on it. A ``threading.Condition`` costs about a
microsecond to build and eight more objects for the garbage collector (its
lock, deque and bound methods), paid once per waited future: that was most
of what ``wait()`` cost over a list of taut futures. This lock is one object
made by a C constructor, and it keeps the Condition's contract (reentrant,
``wait``/``wait_for``/``notify``/``notify_all`` only by its owner) for the
base class's code and for anyone else who uses it as one.
"""

from __future__ import annotations

import time
from _thread import RLock, allocate_lock

from taut._core import OS_WAIT_SLICE

TYPE_CHECKING = False  # typing's, without importing typing (see taut/__init__)
if TYPE_CHECKING:
    from typing import Any, Callable, TypeVar

    _R = TypeVar("_R")


# The gates of the threads in a FutureCondition's wait(), oldest first, by
# condition; read and changed only by the condition's owner. Kept here
# rather than on the condition, which then needs no Python constructor and
# no attribute that could be missing: notify_all() runs on every waited
# future's completion and almost always finds nobody.
_sleepers_of: dict[FutureCondition, list[Any]] = {}


# typeshed marks _thread.RLock final; CPython's type (3.9 to 3.14) is a base
# type, which is what this class relies on.
class FutureCondition(RLock):  # type: ignore[misc]
    """A ``threading.RLock`` that is also a Condition over itself."""

    __slots__ = ()

    # C methods of _thread.RLock that typeshed does not declare. They are
    # what threading.Condition uses to release a reentrant lock fully.
    _is_owned: Callable[[], bool]
    _release_save: Callable[[], Any]
    _acquire_restore: Callable[[Any], None]

    def wait(self, timeout: float | None = None) -> bool:
        """Release the lock until notified or ``timeout`` seconds have
        passed, then take it back; False if the time ran out."""
        if not self._is_owned():
            raise RuntimeError("cannot wait on un-acquired lock")
        gate = allocate_lock()
        gate.acquire()
        sleepers = _sleepers_of.get(self)
        if sleepers is None:
            _sleepers_of[self] = [gate]
        else:
            sleepers.append(gate)
        saved = self._release_save()
        woken = False
        try:
            if timeout is None:
                woken = gate.acquire()
            elif timeout > 0:
                # In OS-sized pieces: one lock wait cannot take every float.
                end = time.monotonic() + timeout
                while not woken and (left := end - time.monotonic()) > 0:
                    woken = gate.acquire(True, min(left, OS_WAIT_SLICE))
            else:
                woken = gate.acquire(False)
        finally:
            self._acquire_restore(saved)
            if not woken:
                sleepers = _sleepers_of.get(self)
                if sleepers is not None and gate in sleepers:
                    sleepers.remove(gate)
                    if not sleepers:
                        del _sleepers_of[self]
                else:
                    # notify() took the gate after the time ran out and
                    # before the lock was back: it woke this thread.
                    woken = True
        return woken

    def wait_for(self, predicate: Callable[[], _R], timeout: float | None = None) -> _R:
        """Wait until ``predicate()`` is true or ``timeout`` seconds have
        passed; the predicate's last value."""
        end = None if timeout is None else time.monotonic() + timeout
        result = predicate()
        while not result:
            if end is None:
                self.wait()
            else:
                left = end - time.monotonic()
                if left <= 0:
                    break
                self.wait(left)
            result = predicate()
        return result

    def notify(self, n: int = 1) -> None:
        """Wake up to ``n`` threads waiting in ``wait()``, oldest first."""
        if not self._is_owned():
            raise RuntimeError("cannot notify on un-acquired lock")
        sleepers = _sleepers_of.get(self)
        if not sleepers:
            return
        woken = sleepers[:n]
        del sleepers[:n]
        if not sleepers:
            del _sleepers_of[self]
        for gate in woken:
            gate.release()

    def notify_all(self) -> None:
        """Wake every thread waiting in ``wait()``."""
        if not self._is_owned():
            raise RuntimeError("cannot notify on un-acquired lock")
        sleepers = _sleepers_of.pop(self, None)
        if sleepers:
            for gate in sleepers:
                gate.release()
