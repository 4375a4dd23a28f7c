"""The worker loop, in Python: each call into Rust (a ``WorkerSlot``) only
hands out the next step and returns before any user code runs. Also the
exit hook that joins workers before the interpreter finalizes."""

from __future__ import annotations

import threading
import weakref
from concurrent.futures import _base
from concurrent.futures.thread import BrokenThreadPool

from taut._core import PoolCore, WorkerSlot
from taut._future import _CANCELLED, Future, _release_leaked_state_lock
from taut._notices import _deliver_notices

TYPE_CHECKING = False  # typing's, without importing typing (see taut/__init__)
if TYPE_CHECKING:
    from typing import Any, Callable

    from taut.executor import ThreadPoolExecutor


# Every worker thread not yet finished, for the exit hook: thread -> its
# pool and the event the thread sets as its very last step (abandon() sets
# it too: nobody waits for an abandoned worker). We wait on that event
# rather than Thread.join(): in CPython < 3.12 a join interrupted by Ctrl-C
# marks a still-running thread as stopped, and a later join returns at once.
_live_workers: dict[threading.Thread, tuple[PoolCore, threading.Event]] = {}
_interpreter_exiting = False


def _python_exit() -> None:
    """At interpreter exit, like the standard library: queued work still
    runs, then every (non-abandoned) worker is joined — before finalization,
    so no worker meets a finalizing interpreter."""
    global _interpreter_exiting
    _interpreter_exiting = True
    _release_leaked_state_lock()
    items = list(_live_workers.values())
    for core, _ in items:
        core.shutdown()
    for _, exited in items:
        exited.wait()


threading._register_atexit(_python_exit)  # type: ignore[attr-defined]


def _settle_on_its_loop(waiter: Any, error: BaseException | None) -> None:
    """An ``executor.run`` call drained from the queue: its awaiting task
    learns it will not run (cancelled, or ``error``), on its own loop (asyncio
    futures are not thread-safe)."""

    def settle() -> None:
        if waiter.done():
            return
        if error is None:
            waiter.cancel()
        else:
            waiter.set_exception(error)

    try:
        waiter.get_loop().call_soon_threadsafe(settle)
    except RuntimeError:
        pass  # its loop is closed: nobody awaits it any more


# The kinds of slow steps a WorkerSlot hands out (see _work).
_STEP_START = 0
_STEP_FINISH = 1
_STEP_SKIP = 2


def _slow_step(slot: WorkerSlot, step: list[Any]) -> Any:
    """The worker-loop steps that need Python: starting a call whose future
    has waiters, notices or a cancellation; completing one that has
    waiters or done callbacks; skipping an asyncio call whose awaiting task
    was cancelled. Returns the next step."""
    kind = step[0]
    if kind == _STEP_SKIP:
        return slot.skip()  # the call's objects go away with `step`, here
    if kind == _STEP_FINISH:
        _, future, ok, value = step
        try:
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)
        except _base.InvalidStateError:
            # Cancelled before a stray interrupt could fail it: that is
            # its outcome; make sure wait()/as_completed() hear of it.
            if future._state == _CANCELLED:
                future.set_running_or_notify_cancel()
        except BaseException:
            # A done callback raised SystemExit or KeyboardInterrupt (the
            # standard library logs only a callback's Exception). Escaping,
            # it would end this worker loop and break the pool for good,
            # failing every call queued behind. The future is complete and
            # its waiters told; the callbacks after this one do not run.
            _base.LOGGER.critical("exception calling callback for %r", future, exc_info=True)
        return slot.done(ok)
    _, notices, call, tracker, start = step
    _deliver_notices(notices)
    # `start` is the future's set_running_or_notify_cancel, None for an
    # asyncio call; a future settled by hand while queued is skipped too.
    if start is not None and not call[0]._start_unless_settled():
        return slot.skip()
    if tracker is not None:
        tracker.start()
    return call  # (future, fn, args, kwargs): run by _work like any other call


def _work(slot: WorkerSlot) -> None:
    """The worker loop. Each call into Rust returns before any user code
    runs, so a call that outlives the interpreter (abandoned, still running
    at exit) never has a Rust frame below it: CPython may end such a thread
    with ``pthread_exit`` at finalization, and unwinding through a Rust
    frame would abort the process."""
    ok = slot.ok
    step = slot.take()
    while step is not None:
        try:
            while True:
                if step.__class__ is tuple:
                    # The future is held here, not used: its last reference
                    # (and a result's __del__) then goes away in Python.
                    _future, fn, args, kwargs = step
                    step = ok(fn(*args) if kwargs is None else fn(*args, **kwargs))
                elif step is False:
                    # Idle: hold no references to the last call while parked.
                    _future = fn = args = kwargs = None
                    step = slot.park()
                elif step is None:
                    break
                else:
                    step = _slow_step(slot, step)
            break  # step is None: this thread ends
        except BaseException as exc:
            # The running call raised. So does an interrupt aimed at it that
            # lands just before or after it in this loop: either way it is
            # that call's outcome (fail() re-raises if no call is running).
            step = slot.fail(exc)
    # This thread ends (abandoned, retired, shut down). A call that failed
    # last has this frame in its traceback (as its caller): still holding
    # that call's future, which holds the exception, the frame would make a
    # cycle that kept the call's frames (their locals) until the collector ran.
    _future = fn = args = kwargs = None


# The standard library's words for a broken pool.
INITIALIZER_FAILED = "A thread initializer failed, the thread pool is not usable anymore"
WORKER_DIED = "A worker thread died unexpectedly, the thread pool is not usable"


def _break_pool(
    executor_ref: weakref.ReferenceType[ThreadPoolExecutor], core: PoolCore, reason: str
) -> None:
    executor = executor_ref()
    if executor is not None:
        executor._break(reason)
        return
    # Its owner dropped it (ThreadPoolExecutor(...).submit(...)): no
    # submission can come any more, but the calls queued behind have
    # waiters, and nobody else will ever settle them (the standard
    # library leaves them pending for good).
    core.shutdown()
    _fail_queue(core, BrokenThreadPool(reason))


def _fail_queue(core: PoolCore, error: BaseException) -> None:
    """Fail every call still queued in ``core`` with ``error``."""

    def fail(future: Any) -> None:
        if not isinstance(future, Future):
            _settle_on_its_loop(future, error)
            return
        try:
            future.set_exception(error)
        except _base.InvalidStateError:
            # Cancelled by its owner while we drained it: that is its
            # outcome; make sure wait()/as_completed() hear of it.
            if future._state == _CANCELLED:
                future.set_running_or_notify_cancel()

    _drain_and_settle(core.drain, fail)


def _drain_and_settle(drain: Callable[[list[Any]], object], settle: Callable[[Any], None]) -> None:
    """Take calls out of a core's queue (``drain`` appends them to the list
    it is given, see ``PoolCore.drain``) and ``settle`` each one's future.

    Out of the queue, nothing else will ever settle them: an interrupt must
    not end this before all are settled, or every waiter of the rest waits
    for good. It is raised once they are. Interrupts come from a done
    callback raising KeyboardInterrupt, or from a Ctrl-C: one that came
    during a long drain (the core holds the GIL) is raised at the first
    check after it, which on 3.13 is the entry of the next function called:
    so the drain is made here, inside the ``try``, not by the caller. A call
    whose settling was cut short is settled again (``settle`` is safe to
    repeat), once: a second error there moves on."""
    drained: list[Any] = []
    drawn = False
    settled = [0]  # how many of `drained`: kept up to date by _settle_from
    interrupted: BaseException | None = None
    failed_at = -1
    while True:
        try:
            if not drawn:
                drawn = True  # before: a drain that fails is not repeated
                drain(drained)
            _settle_from(drained, settled, settle)
            break
        except BaseException as error:
            if interrupted is None:
                interrupted = error
            if failed_at == settled[0]:
                settled[0] += 1
            failed_at = settled[0]
    if interrupted is not None:
        try:
            raise interrupted
        finally:
            interrupted = None  # no cycle through this frame


def _settle_from(drained: list[Any], settled: list[int], settle: Callable[[Any], None]) -> None:
    """``settle`` the calls of ``drained`` from ``settled[0]`` on, counting
    them there. A function of its own, not a loop in _drain_and_settle's
    ``try``: from CPython 3.12 the back edge of a loop that ends a ``try``
    body lies outside the ``try`` (its exception table), and a Ctrl-C
    raised there escaped it (seen on 3.13)."""
    while settled[0] < len(drained):
        settle(drained[settled[0]][0])
        settled[0] += 1


def _worker_main(
    slot: WorkerSlot,
    core: PoolCore,
    exited: threading.Event,
    initializer: Callable[..., object] | None,
    initargs: tuple[Any, ...],
    executor_ref: weakref.ReferenceType[ThreadPoolExecutor],
) -> None:
    try:
        if initializer is not None:
            try:
                initializer(*initargs)
            except BaseException:
                _base.LOGGER.critical("Exception in initializer:", exc_info=True)
                slot.give_back()
                _break_pool(executor_ref, core, INITIALIZER_FAILED)
                return
            executor = executor_ref()
            if executor is not None:
                executor._initializing.pop(threading.current_thread(), None)
            del executor
        try:
            _work(slot)
        except BaseException:
            _base.LOGGER.critical("taut worker loop failed", exc_info=True)
            _break_pool(executor_ref, core, WORKER_DIED)
    finally:
        executor = executor_ref()
        if executor is not None:
            executor._forget_thread(threading.current_thread())
        _live_workers.pop(threading.current_thread(), None)
        exited.set()
