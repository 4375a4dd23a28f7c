"""The standard library pool's private attributes, as views of the Rust core.

Real clients of ``concurrent.futures.ThreadPoolExecutor`` read its privates:
google-cloud-pubsub drains ``_work_queue`` at shutdown to hand back work that
never started, monitoring reads ``_work_queue.qsize()`` and
``_idle_semaphore._value``. A drop-in keeps their meaning; these objects
give it, without a second queue next to the real one. They hold the
executor's Rust core, never the executor itself: a cycle would keep a dropped
executor (and its workers) alive until the garbage collector ran.
"""

from __future__ import annotations

import queue
import time
from concurrent.futures import Future as _ConcurrentFuture
from concurrent.futures._base import CANCELLED_AND_NOTIFIED

from taut._checks import check_duration, describe
from taut._core import PoolCore

TYPE_CHECKING = False  # typing's, without importing typing (see taut/__init__)
if TYPE_CHECKING:
    from typing import Any, Callable


class WorkItem:
    """A call taken out of the queue by hand, like the standard library's
    ``_WorkItem``: ``run()`` runs it and completes its future. Both shapes
    of it are here: ``fn``/``args``/``kwargs`` and ``run()`` (before 3.14),
    ``task`` and ``run(ctx)`` with a worker context (3.14)."""

    __slots__ = ("args", "fn", "future", "kwargs")

    def __init__(
        self,
        future: _ConcurrentFuture[Any],
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.future = future
        self.fn = fn
        self.args = args
        self.kwargs = kwargs

    @property
    def task(self) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        """``(fn, args, kwargs)``: what 3.14's ``_WorkItem`` keeps and hands
        to its worker context's ``run``."""
        return (self.fn, self.args, self.kwargs)

    def run(self, ctx: Any = None) -> None:
        """Run the call and complete its future; with ``ctx`` (3.14's
        ``WorkerContext``, or anything with its ``run(task)``), through it."""
        if self.future._state == CANCELLED_AND_NOTIFIED:
            # cancel() of a call taken out of the pool has told its waiters
            # already (the standard library's run() does that): skip it, as
            # there, instead of set_running_or_notify_cancel's RuntimeError.
            return
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            if ctx is None:
                result = self.fn(*self.args, **self.kwargs)
            else:
                result = ctx.run(self.task)
        except BaseException as exc:
            self.future.set_exception(exc)
            self = None  # type: ignore[assignment]  # break the traceback cycle
        else:
            self.future.set_result(result)

    def __repr__(self) -> str:
        return f"<taut WorkItem {self.fn!r} args={self.args!r} kwargs={self.kwargs!r}>"


class WorkQueue:
    """``executor._work_queue``: the ``queue.SimpleQueue`` methods such code
    uses, over the pool's own queue.

    ``get``/``get_nowait`` take the oldest waiting call *out* of the pool
    (no worker will run it) and return it as a :class:`WorkItem`; its future
    stays pending until the taker runs or cancels it (cancelling then wakes
    ``wait()``/``as_completed()`` as usual). ``put(None)`` is accepted as the
    standard library's wake-up sentinel and does nothing: taut's workers are
    woken by ``shutdown`` itself.
    """

    def __init__(self, core: PoolCore) -> None:
        self._core = core

    def qsize(self) -> int:
        return self._core.stats()[4]

    def empty(self) -> bool:
        return self.qsize() == 0

    def get_nowait(self) -> WorkItem:
        return self.get(block=False)

    def get(self, block: bool = True, timeout: float | None = None) -> WorkItem:
        """The oldest waiting call, taken out of the pool. ``block``: wait for
        one (checking every millisecond) up to ``timeout`` seconds; raises
        ``queue.Empty`` when there is none."""
        from taut._notices import _deliver_notices
        from taut._worker import _settle_on_its_loop

        # As queue.SimpleQueue.get: a negative timeout is a ValueError before
        # the queue is looked at (not "expired"), and without blocking the
        # timeout is not looked at at all.
        limit = check_duration(timeout, "timeout") if block else 0.0
        end = None if limit is None else time.monotonic() + limit
        while True:
            taken = self._core.pop_queued()
            if taken is not None:
                notices, (future, fn, args, kwargs) = taken
                _deliver_notices(notices)
                if not isinstance(future, _ConcurrentFuture):
                    # An `await executor.run(...)` call: its awaiting task
                    # learns it will not run; look for the next one. (Not
                    # told if its loop has closed: nobody awaits it then.
                    # Told through call_soon_threadsafe, a closed loop's
                    # RuntimeError reached the caller of get().)
                    _settle_on_its_loop(future, None)
                    continue
                # Out of the pool: cancel() no longer looks for it there.
                future._core = None  # type: ignore[attr-defined]
                future._seq = -1  # type: ignore[attr-defined]
                return WorkItem(future, fn, args, kwargs or {})
            if end is not None and time.monotonic() >= end:
                raise queue.Empty
            time.sleep(0.001)

    def put(self, item: object, block: bool = True, timeout: float | None = None) -> None:
        # block and timeout are ignored, as by queue.SimpleQueue.put (which
        # never waits).
        if item is not None:
            raise TypeError(
                "taut's _work_queue accepts only None (the standard library's wake-up "
                f"sentinel); submit work with executor.submit(), got {describe(item)}"
            )

    def put_nowait(self, item: object) -> None:
        self.put(item)


class IdleSemaphore:
    """``executor._idle_semaphore``: ``_value`` is the number of idle workers,
    as in the standard library. ``acquire`` takes nothing (the Rust core
    reuses idle workers itself); it says whether one is idle."""

    def __init__(self, core: PoolCore) -> None:
        self._core = core

    @property
    def _value(self) -> int:
        return self._core.stats()[2]

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        return self._value > 0

    def release(self, n: int = 1) -> None:
        pass
