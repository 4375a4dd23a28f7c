"""``taut.ThreadPoolExecutor``: a drop-in for ``concurrent.futures.ThreadPoolExecutor``
whose queue, worker ceiling and worker loop live in the Rust core.

Beyond the standard library it offers a bounded queue (``max_queue``), idle
workers that retire (``idle_timeout``), a ceiling that changes at run time
(``resize``), context propagation, exact queue positions (``submit_tracked``),
``in_worker()``, ``stats()``, and ``abandon``/``interrupt`` for calls that ran
past their deadline. Where the standard library is wrong it is right:
``shutdown(cancel_futures=True)`` wakes waiters of ``wait()``/``as_completed()``,
a forked child gets fresh workers instead of hanging, and cancelling a queued
future takes it out of the queue at once.
"""

from __future__ import annotations

import collections
import contextvars
import itertools
import os
import queue
import sys
import threading
import time
import weakref
from collections.abc import Coroutine, Iterable, Iterator
from concurrent import futures as _cf
from concurrent.futures import _base
from concurrent.futures.thread import BrokenThreadPool
from sys import _getframe

from taut import _future, _lazy_import, _worker
from taut._checks import check_count, check_duration, check_timeout, describe
from taut._core import FutureStateLock, PoolCore, WorkerSlot
from taut._future import _CANCELLED, Future, _result_or_cancel
from taut._greenlet_threads import refuse_greenlet_thread
from taut._notices import _deliver_notices, _Tracker
from taut._stdlib_views import IdleSemaphore, WorkQueue
from taut._worker_thread import WorkerThread

__all__ = [
    "Future",
    "QueueFull",
    "ThreadPoolExecutor",
    "default_executor",
]

TYPE_CHECKING = False  # typing's, without importing typing (see taut/__init__)
if TYPE_CHECKING:  # (typing.ParamSpec is 3.10+: for annotations only)
    from typing import Any, Callable, ParamSpec, TypeVar

    from taut._pool_stats import PoolStats

    _T = TypeVar("_T")
    _P = ParamSpec("_P")


class QueueFull(queue.Full):
    """``try_submit`` found the bounded queue (``max_queue``) full."""


# Seconds a worker waiting for room in its own pool's full queue waits
# before it checks again whether another worker could still make room (see
# _wait_for_room_on_a_worker). Only a worker that submits into its own full
# queue ever waits this way.
_WORKER_ROOM_RECHECK = 0.05


# PoolStats once stats() has loaded it: a load through _lazy_import on every
# call made stats() seven times slower (2.4 against 0.33 us, measured).
_pool_stats_class: type[PoolStats] | None = None


def _load_pool_stats() -> type[PoolStats]:
    global _pool_stats_class
    loaded: type[PoolStats] = _lazy_import.load_from("taut._pool_stats", "PoolStats")
    _pool_stats_class = loaded
    return loaded


if not TYPE_CHECKING:  # (type checkers see the import above; a module
    # __getattr__ would make every unknown name of this module pass for them)

    def __getattr__(name: str) -> Any:
        # `from taut.executor import PoolStats`, and pickles of stats made
        # before PoolStats moved to its own module, still work.
        if name == "PoolStats":
            return _pool_stats_class or _load_pool_stats()
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Every executor alive, to reset in a forked child. By id, not in a
# WeakSet: a subclass may define __eq__ (and so have no __hash__, or one
# that raises), as the standard library's pool allows.
_live_executors: weakref.WeakValueDictionary[int, ThreadPoolExecutor] = (
    weakref.WeakValueDictionary()
)


# The code of asyncio's BaseEventLoop.run_in_executor, once asyncio is
# loaded and a loop called submit (see ThreadPoolExecutor.submit).
_run_in_executor_code: Any = None
_submit_for_run_in_executor: Any = None  # taut._asyncio's, imported with it


def _submit_for_loop(
    executor: ThreadPoolExecutor, caller: Any, fn: Callable[..., Any], args: tuple[Any, ...]
) -> Any:
    """``submit`` called from ``caller``, a function named run_in_executor:
    if it is asyncio's ``BaseEventLoop.run_in_executor`` (which passes no
    keyword arguments and wraps what it gets with ``asyncio.wrap_future``),
    the asyncio future for its loop, else None."""
    global _run_in_executor_code, _submit_for_run_in_executor
    if _run_in_executor_code is None:
        base_events = sys.modules.get("asyncio.base_events")
        if base_events is None:
            return None
        # Through taut's counted lazy load (see taut._lazy_import): fork-safe.
        _submit_for_run_in_executor = _lazy_import.load("taut._asyncio").submit_for_run_in_executor
        _run_in_executor_code = base_events.BaseEventLoop.run_in_executor.__code__
        if caller is not _run_in_executor_code:
            return None
    if executor._broken or executor._shutdown or _worker._interpreter_exiting:
        return None  # the ordinary path raises the right error
    # The loop whose run_in_executor called us (not "the running loop": the
    # caller's `self` is exact, and it may not be running yet).
    loop = _getframe(2).f_locals["self"]
    return _submit_for_run_in_executor(executor, loop, fn, args)


# taut._asyncio's run_in, once loaded: asyncio loads on first use only.
_run_in: Any = None


def _load_run_in() -> Any:
    global _run_in
    # Through taut's counted lazy load (see taut._lazy_import): fork-safe.
    _run_in = _lazy_import.load("taut._asyncio").run_in
    return _run_in


def _running_loop() -> Any:
    """The event loop running on this thread, if any (without importing
    asyncio: if nothing imported it, no loop can be running)."""
    asyncio = sys.modules.get("asyncio")
    return None if asyncio is None else asyncio._get_running_loop()


def _usable_cpu_count() -> int | None:
    """``os.process_cpu_count()`` where it exists (3.13+), else ``os.cpu_count()``."""
    count = getattr(os, "process_cpu_count", os.cpu_count)
    result: int | None = count()
    return result


def _submit_each(
    executor: ThreadPoolExecutor, fn: Callable[..., _T], arg_tuples: Iterable[tuple[Any, ...]]
) -> list[Future[_T]]:
    """``executor.submit(fn, *args)`` for each of ``arg_tuples``, for ``map``.

    A full bounded queue that refuses a submit (``QueueFull``: on an event
    loop's thread ``submit`` does not wait for room) refuses the whole map:
    the calls it queued before are cancelled (those already running finish).
    That is load shedding: the caller gets none of their futures, and a
    refused request must not spend the capacity that is short on part of
    itself (retried, it would run them twice). Any other error midway (the
    input raising, a shutdown meanwhile, a Ctrl-C) leaves the calls
    submitted before it to run, as the standard library's ``map`` does."""
    futures: list[Future[_T]] = []
    try:
        for args in arg_tuples:
            futures.append(executor.submit(fn, *args))
    except QueueFull:
        for future in futures:
            future.cancel()
        raise
    return futures


def _buffered_results(
    executor: ThreadPoolExecutor,
    fn: Callable[..., _T],
    arg_tuples: Iterator[tuple[Any, ...]],
    buffersize: int,
    end_time: float | None,
) -> Iterator[_T]:
    """``map(..., buffersize=n)``'s iterator: ``n`` calls submitted at once,
    then one more each time a result is asked for, before waiting for it."""
    pending = collections.deque(
        _submit_each(executor, fn, itertools.islice(arg_tuples, buffersize))
    )
    # Weak: an iterator left lying around does not keep the executor alive
    # (nor, through it, its workers), as in the standard library.
    owner = weakref.ref(executor)
    del executor

    def result_iterator() -> Iterator[_T]:
        refill = True
        try:
            while pending:
                if refill:
                    submitter = owner()
                    args = None if submitter is None else next(arg_tuples, None)
                    if submitter is None or args is None:
                        refill = False  # the input ran out, or the executor went away
                    else:
                        pending.append(submitter.submit(fn, *args))
                    submitter = args = None  # held across no yield
                # Popped inside the call: no reference to a result once
                # it is yielded (bpo-14406).
                yield _result_or_cancel(pending.popleft(), end_time)
        finally:
            for future in pending:
                future.cancel()

    return result_iterator()


def _cancel_drained(future: Any) -> None:
    if not isinstance(future, Future):
        _worker._settle_on_its_loop(future, None)
        return
    future.cancel()
    # Unlike the stdlib (gh-87893), tell wait()/as_completed(). (Checked by
    # state, not by cancel()'s answer: this may be a second try.)
    if future._state == _CANCELLED:
        future.set_running_or_notify_cancel()


class ThreadPoolExecutor(_cf.ThreadPoolExecutor):
    """A drop-in for ``concurrent.futures.ThreadPoolExecutor`` on a Rust pool.

    ``max_queue``: how many calls may wait for a worker (0: unbounded);
    ``submit`` then blocks (GIL released) until there is room, and
    ``try_submit`` raises :class:`QueueFull`. ``idle_timeout``: seconds after
    which an idle worker retires (None: never). ``propagate_context``: run
    each call in a copy of the submitter's ``contextvars`` context.
    """

    # No `_counter` of our own: the base class's numbers the default thread
    # name prefix, so a taut pool and a stdlib pool in one process never
    # both name their threads "ThreadPoolExecutor-0_0".

    def __init__(
        self,
        max_workers: int | None = None,
        thread_name_prefix: str = "",
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        *,
        max_queue: int = 0,
        idle_timeout: float | None = None,
        propagate_context: bool = False,
    ) -> None:
        # The base __init__ is not called: it builds the pure-Python queue
        # and thread bookkeeping that the Rust core replaces.
        if max_workers is None:
            # The standard library's default. From 3.13 it counts the CPUs
            # this process may use (affinity, PYTHON_CPU_COUNT), not the
            # machine's: so must we, or a pinned process gets more threads.
            max_workers = min(32, (_usable_cpu_count() or 1) + 4)
        max_workers = check_count(
            max_workers, "max_workers", minimum=1, too_small="greater than 0", or_none=True
        )
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        max_queue = check_count(max_queue, "max_queue", minimum=0)
        idle_timeout = check_duration(idle_timeout, "idle_timeout", zero_ok=False)
        self._max_workers = max_workers
        self._max_queue = max_queue
        self._idle_timeout = idle_timeout
        if not isinstance(propagate_context, bool):
            # bool() would take "no" as True.
            raise TypeError(f"propagate_context must be a bool, got {describe(propagate_context)}")
        self._propagate_context = propagate_context
        self._thread_name_prefix = thread_name_prefix or (
            f"ThreadPoolExecutor-{self._counter()}"  # type: ignore[attr-defined]
        )
        self._initializer = initializer  # type: ignore[assignment]
        self._initargs = initargs
        # The worker threads (`_threads` is a snapshot of them). Changed by
        # single dict operations, atomic under the GIL: a lock held across
        # bytecodes would stay held for good if a Ctrl-C landed on the
        # bytecode before its release, and the next worker start or exit
        # would wait for it forever.
        self._worker_threads: dict[threading.Thread, None] = {}
        self._slots: dict[threading.Thread, WorkerSlot] = {}
        self._exited: dict[threading.Thread, threading.Event] = {}
        # This pool's workers now waiting in its shutdown(wait=True).
        self._workers_in_shutdown: dict[threading.Thread, None] = {}
        # Its workers not yet through the initializer (see shutdown).
        self._initializing: dict[threading.Thread, None] = {}
        self._thread_numbers = itertools.count()
        self._broken: str | bool = False  # type: ignore[assignment]
        self._shutdown = False
        self._shutdown_lock = threading.Lock()
        # Workers of this executor waiting in submit() for room in its own
        # full queue (see _wait_for_room_on_a_worker).
        self._room_lock = threading.Lock()
        self._workers_waiting_for_room = 0
        self._core = PoolCore(max_workers, max_queue, idle_timeout)
        # The standard library's privates that real clients read, as views.
        self._work_queue = WorkQueue(self._core)  # type: ignore[assignment]
        self._idle_semaphore = IdleSemaphore(self._core)  # type: ignore[assignment]
        # A dropped executor lets its workers finish the queue and exit.
        self._finalizer = weakref.finalize(self, PoolCore.shutdown, self._core)
        _live_executors[id(self)] = self

    # -- submitting -----------------------------------------------------

    def _check_open(self) -> None:
        # `from None`: called where the core refused a call, this is the
        # error the caller gets, alone, as from the stdlib (not "During
        # handling of the above exception" under the core's RuntimeError).
        if self._broken:
            raise BrokenThreadPool(self._broken) from None
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown") from None
        if _worker._interpreter_exiting:
            raise RuntimeError("cannot schedule new futures after interpreter shutdown") from None

    def _submit(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        block: bool,
        tracker: _Tracker | None = None,
    ) -> Future[Any]:
        if self._broken or self._shutdown or _worker._interpreter_exiting:
            self._check_open()
        if self._propagate_context:
            args = (fn, *args)
            fn = contextvars.copy_context().run
        future: Future[Any] = Future()
        future._core = core = self._core
        waiting_at = None
        # This worker counts as waiting for room in its own pool from its
        # first wait until this submit ends (see _wait_for_room_on_a_worker).
        waiting_on_worker = False
        try:
            while True:
                try:
                    if tracker is None:
                        spawn = core.submit(future, fn, args, kwargs)
                    else:
                        spawn, waiting_at = core.submit_tracked(future, fn, args, kwargs, tracker)
                    break
                except QueueFull:
                    # Only workers make room: start any an interrupted submit
                    # left unstarted (each accepted submission does, but a full
                    # queue accepts none).
                    self._spawn()
                    if not block:
                        raise
                    if _running_loop() is not None:
                        # Waiting here would stall the event loop (and every
                        # request it serves): refuse at once instead.
                        raise QueueFull(
                            f"the queue is full: max_queue={self._max_queue} calls waiting; "
                            "submit() on an event loop's thread does not wait for room: "
                            "use `await executor.run(fn, ...)` or `taut.to_thread(fn, ...)`"
                        ) from None
                except RuntimeError:
                    self._check_open()
                    raise
                # The queue is full: wait for room outside the `except`, so that
                # a Ctrl-C (or our own QueueFull) meanwhile is not shown as
                # raised while handling the core's QueueFull.
                if core.in_worker():
                    waiting_on_worker = self._wait_for_room_on_a_worker(waiting_on_worker)
                else:
                    core.wait_for_room()
        finally:
            if waiting_on_worker:
                with self._room_lock:
                    self._workers_waiting_for_room -= 1
        if spawn:
            self._spawn_for(future)
        if tracker is not None and waiting_at is not None:
            tracker.wait(waiting_at)
        return future

    def _wait_for_room_on_a_worker(self, counted: bool) -> bool:
        """``submit`` on one of this executor's own workers found the queue
        full. Only a worker makes room, by taking a call: if every other
        worker already waits for room here, this one must not wait too (the
        pool would wait for itself for good), so it raises instead.

        It waits one slice, then its caller tries again and asks again:
        the answer holds only while the other workers stay, and one may
        leave without making room (a surplus worker retiring after
        ``resize`` shrank the pool), leaving this one the last. ``counted``:
        an earlier slice of this submit counted this worker as waiting.
        Returns True: it is counted now, and the caller uncounts it when
        its submit ends."""
        with self._room_lock:
            workers = self._core.stats()[1]
            others_waiting = self._workers_waiting_for_room - int(counted)
            if others_waiting + 1 >= workers:
                others = (
                    "this is the executor's only worker"
                    if workers <= 1
                    else f"the other {workers - 1} worker(s) of this executor already wait for room"
                )
                raise QueueFull(
                    f"the queue is full: max_queue={self._max_queue} calls waiting, and "
                    f"{others}: submit() on its own worker does not wait, as nothing would "
                    "make room; run the call inline, or use a larger max_queue"
                )
            if not counted:
                self._workers_waiting_for_room += 1
        self._core.wait_for_room(_WORKER_ROOM_RECHECK)
        return True

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        """Schedule ``fn(*args, **kwargs)``; with a bounded queue, wait
        (GIL released, Ctrl-C honoured) until there is room.

        Called by asyncio's ``loop.run_in_executor`` itself, it returns the
        asyncio future that call would have wrapped ours in (see
        ``taut._asyncio.submit_for_run_in_executor``)."""
        caller = _getframe(1).f_code
        if caller is _run_in_executor_code or (
            _run_in_executor_code is None and caller.co_name == "run_in_executor"
        ):
            waiter = _submit_for_loop(self, caller, fn, args)
            if waiter is not None:
                return waiter  # type: ignore[no-any-return]  # an asyncio future
        if self._propagate_context or _worker._interpreter_exiting:
            return self._submit(fn, args, kwargs, block=True)
        # The common case inline: a submission is on every call's critical
        # path. The core refuses a shut down or broken pool and a full
        # queue; _submit then raises the right error, or waits for room.
        # (An executor made while the interpreter exits has a core that is
        # not shut down: the test above sends it to _submit, which refuses.)
        future: Future[_T] = Future()
        future._core = core = self._core
        try:
            spawn = core.submit(future, fn, args, kwargs)
        except (QueueFull, RuntimeError):
            spawn = None
        if spawn is None:
            # Outside the `except`: what _submit raises (or a Ctrl-C while
            # it waits for room) is not shown as raised while handling the
            # core's refusal.
            return self._submit(fn, args, kwargs, block=True)
        if spawn:
            self._spawn_for(future)
        return future

    def run(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, _T]:
        """``await executor.run(fn, *args, **kwargs)``: ``fn`` runs on a worker,
        on the asyncio-native path (no ``concurrent.futures`` future, no
        ``call_soon_threadsafe`` per call). With a full bounded queue it waits
        for room without blocking the loop, in FIFO order with other waiting
        coroutines. Cancelling the awaiting task removes a call that has not
        started; a running call finishes on its worker and its outcome is
        dropped. (A plain function returning the coroutine: one coroutine
        frame less per call.)"""
        if not callable(fn):
            # At once, not from a worker once the call got there (after
            # waiting for room, perhaps for good).
            raise TypeError(f"fn must be a callable, got {describe(fn)}")
        run_in = _run_in
        if run_in is None:
            run_in = _load_run_in()
        return run_in(self, fn, args, kwargs)  # type: ignore[no-any-return]

    def try_submit(
        self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
    ) -> Future[_T]:
        """Like ``submit``, but raise :class:`QueueFull` instead of waiting
        when the bounded queue is full."""
        return self._submit(fn, args, kwargs, block=False)

    def submit_tracked(
        self,
        fn: Callable[..., _T],
        /,
        *args: Any,
        on_wait: Callable[[int], object] | None = None,
        on_start: Callable[[], object] | None = None,
        **kwargs: Any,
    ) -> Future[_T]:
        """Like ``submit``, with queue notices: ``on_wait(position)`` when the
        call cannot start at once (its 1-based position), then as it moves up:
        each position from 10 down, above that the round ones it reaches (20,
        50, 100, 200, 500, ...; every change for every waiting call would be
        N*N/2 notices for N calls); ``on_start()`` on the worker just before
        the call begins. Notices arrive in order, positions only go down, none
        after the start; keep them quick. ``position(future)`` is exact."""
        for name, callback in (("on_wait", on_wait), ("on_start", on_start)):
            # Checked here: later, each notice would fail (logged) on some thread.
            if callback is not None and not callable(callback):
                raise TypeError(f"{name} must be a callable or None, got {describe(callback)}")
        return self._submit(fn, args, kwargs, block=True, tracker=_Tracker(on_wait, on_start))

    def map(
        self,
        fn: Callable[..., _T],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
        buffersize: int | None = None,
    ) -> Iterator[_T]:
        """Like the stdlib's ``map`` (``chunksize`` is accepted and ignored,
        as there), with the submissions made in one tight loop.

        ``buffersize`` (the standard library's, from Python 3.14; accepted
        here on every version): at most that many calls are submitted ahead
        of the result being read, and the iterables are read as the results
        are, so an endless iterable works."""
        left = check_timeout(timeout)
        if buffersize is not None:
            # The standard library's ValueError, word for word.
            buffersize = check_count(
                buffersize, "buffersize", minimum=1, too_small="None or > 0", or_none=True
            )
        end_time = None if left is None else left + time.monotonic()
        arg_tuples = zip(*iterables)
        if self._broken or self._shutdown or _worker._interpreter_exiting:
            # As with the stdlib's map, the error comes with the first call:
            # mapping over nothing on a shut down executor is no error.
            if next(arg_tuples, None) is not None:
                self._check_open()
        if buffersize is not None:
            return _buffered_results(self, fn, arg_tuples, buffersize, end_time)
        if (
            self._propagate_context
            or self._max_queue
            # A subclass's own submit (or one patched onto the instance, as
            # mock.patch.object does) sees every call, as with the stdlib's map.
            or getattr(self.submit, "__func__", None) is not ThreadPoolExecutor.submit
        ):
            futures = _submit_each(self, fn, arg_tuples)
        else:
            futures = self._submit_all(fn, arg_tuples)

        def result_iterator() -> Iterator[_T]:
            try:
                futures.reverse()
                while futures:
                    # Popped inside the call, so the iterator keeps no
                    # reference to a result once it is yielded (bpo-14406).
                    yield _result_or_cancel(futures.pop(), end_time)
            finally:
                for future in futures:
                    future.cancel()

        return result_iterator()

    def _submit_all(
        self, fn: Callable[..., Any], arg_tuples: Iterable[tuple[Any, ...]]
    ) -> list[Future[Any]]:
        """``submit`` for many calls, without the per-call checks that cannot
        change in between (the core still refuses once shut down)."""
        core = self._core
        submit = core.submit
        futures: list[Future[Any]] = []
        append = futures.append
        # As with the stdlib's map, an error of the input (a RuntimeError
        # too) or a refusal of the pool (shut down or broken meanwhile)
        # reaches the caller, and the calls submitted so far run. Only a
        # worker thread that cannot start takes them back (see _spawn_for).
        for args in arg_tuples:
            future: Future[Any] = Future()
            future._core = core
            try:
                spawn = submit(future, fn, args)
            except RuntimeError:
                self._check_open()
                raise
            # Listed before its worker starts: if no thread can start, it
            # is cancelled (taken out of the queue) with the others.
            append(future)
            if spawn:
                try:
                    self._spawn()
                except RuntimeError:
                    for queued in futures:
                        queued.cancel()
                    raise
        return futures

    # -- workers --------------------------------------------------------

    def _spawn(self) -> None:
        """Start the worker threads the core asked for. Called when a
        submission (or resize, abandon, ...) says starts are unclaimed:
        this one's, and any an interrupt kept an earlier caller from."""
        while self._start_worker():
            pass

    def _spawn_for(self, future: Future[Any]) -> None:
        """``_spawn`` for a submission whose call (``future``'s) was just
        queued. If no thread can start ("can't start new thread") the
        caller gets the error, so the call must not run: it is taken back
        out of the queue. Left there (as the standard library leaves it) it
        would run anyway, and a caller retrying would run it twice. If a
        worker took it meanwhile, it runs: the submission stands and the
        caller gets its future, as for any accepted call. (The failed start
        gave its place back: see _start_worker.)"""
        self._spawn_or_take_back(future._seq)

    def _spawn_or_take_back(self, seq: int) -> None:
        """``_spawn_for`` by the call's sequence number (the asyncio path's
        calls have no concurrent future)."""
        try:
            self._spawn()
        except Exception:
            removed = self._core.remove(seq, refused=True)
            if removed is not None:
                _deliver_notices(removed[0])
                raise

    def _start_worker(self) -> bool:
        """Claim one worker start and start its thread; False if none is
        owed. A Ctrl-C (or any asynchronous exception) may land between any
        two bytecodes here: a start it cuts short before the thread exists
        gives its place back (the next submission starts a worker for the
        calls it was for); a thread that does exist keeps its place."""
        slot = thread = None
        try:
            slot = self._core.claim()
            if slot is None:
                return False
            # A worker waits for calls in the Rust core, blocking its OS
            # thread: as a greenlet, the process's only one (a silent hang at
            # the first result()). The standard library's workers wait on
            # patched locks and yield. Refused instead, as a failed thread
            # start: the call is taken back out.
            refuse_greenlet_thread(
                "taut's workers", "use concurrent.futures.ThreadPoolExecutor here"
            )
            exited = threading.Event()
            thread = WorkerThread(
                # Started without waiting for it to run when calls are
                # long (see taut._worker_thread._StartedEvent).
                wait_to_run=not self._core.calls_are_long(),
                # `%s`, as the stdlib names its threads: str() of the prefix.
                name=f"{self._thread_name_prefix!s}_{next(self._thread_numbers)}",
                target=_worker._worker_main,
                args=(
                    slot,
                    self._core,
                    exited,
                    self._initializer,
                    self._initargs,
                    weakref.ref(self),
                ),
                # Daemon, yet joined by the exit hook like the stdlib's
                # workers: only abandoned workers (stuck in a call that ran
                # past its deadline) are left behind at exit.
                daemon=True,
            )
            self._worker_threads[thread] = None
            if self._initializer is not None:
                self._initializing[thread] = None
            self._slots[thread] = slot
            self._exited[thread] = exited
            _worker._live_workers[thread] = (self._core, exited)
            thread.start()
        except BaseException as error:
            # The place goes back unless the thread exists (it then reports
            # in and works as usual). Should a second Ctrl-C cut this short,
            # the slot gives its place back once it is dropped.
            if slot is not None and (thread is None or not thread.made_despite(error)):
                if isinstance(error, Exception):
                    # Thread.start failed (no thread can start now): the
                    # other owed starts go too. They would fail alike, and
                    # while owed they count as workers (stats, the ceiling)
                    # and as on their way to the queued calls, so idle
                    # workers would leave those queued and every later
                    # submit would try (and fail) to start them. A later
                    # submission asks for a start again if one is needed.
                    slot.start_failed()
                else:
                    # An interrupt: the start is made good by the next
                    # submission (the owed starts stay).
                    slot.give_back()
                if thread is not None:
                    self._forget_thread(thread)
            raise
        return True

    @property
    def _threads(self) -> set[threading.Thread]:  # type: ignore[override]
        """The standard library's private, as a snapshot: code in the wild
        (and CPython's own tests) holds on to it and iterates it while
        workers exit."""
        return set(self._worker_threads)

    def _drop_thread(self, thread: threading.Thread) -> None:
        self._worker_threads.pop(thread, None)

    def _forget_thread(self, thread: threading.Thread) -> None:
        # Called by the worker itself as it leaves, or for a thread that
        # failed to start. Whatever remains to run after this is plain Python.
        self._drop_thread(thread)
        self._initializing.pop(thread, None)
        self._slots.pop(thread, None)
        self._exited.pop(thread, None)
        _worker._live_workers.pop(thread, None)

    def _drain_waiting(self, into: list[Any]) -> None:
        self._core.drain(into, waiting_only=True)

    def _fail_queued(self, error: BaseException) -> None:
        _worker._fail_queue(self._core, error)

    def _break(self, reason: str) -> None:
        """Mark the pool broken (``reason``: the standard library's words, see
        ``_worker``) and fail every queued call with ``BrokenThreadPool``."""
        with self._shutdown_lock:
            self._broken = reason
            self._core.shutdown()
        # Failed outside the lock: their done callbacks may call shutdown().
        # (Shut down, the core takes no new calls meanwhile.)
        self._fail_queued(BrokenThreadPool(reason))

    def _slot_running(self, future: _cf.Future[Any]) -> tuple[threading.Thread, WorkerSlot] | None:
        seq = getattr(future, "_seq", 0)
        if not seq or getattr(future, "_core", None) is not self._core:
            return None
        for thread, slot in list(self._slots.items()):
            if slot.current == seq:
                return thread, slot
        return None

    def abandon(self, future: _cf.Future[Any]) -> bool:
        """Give up on the worker running ``future`` (its call ran past its
        deadline): it stops counting against the ceiling, a replacement
        starts if work is waiting, and it exits once the call returns. The
        exit hook does not wait for it. False if ``future`` is not running here."""
        found = self._slot_running(future)
        if found is None:
            return False
        thread, slot = found
        abandoned, unclaimed = self._core.abandon(slot, future._seq)  # type: ignore[attr-defined]
        if abandoned:
            # Neither shutdown(wait=True) nor the exit hook waits for it; one
            # of them may be waiting already (a call abandoned while the
            # interpreter exits): its event says "no need to wait" now.
            self._drop_thread(thread)
            exited = self._exited.pop(thread, None)
            _worker._live_workers.pop(thread, None)
            if exited is not None:
                exited.set()
        if unclaimed:
            try:
                self._spawn()
            except RuntimeError:
                # No new thread at interpreter shutdown (CPython 3.12+). With
                # no worker thread left, the waiting calls would never run:
                # fail them, so that whoever waits for them is woken.
                if not self._worker_threads:
                    self._fail_queued(
                        RuntimeError("cannot start a worker thread at interpreter shutdown")
                    )
        return bool(abandoned)

    def interrupt(self, future: _cf.Future[Any], exc_type: type[BaseException]) -> bool:
        """Raise ``exc_type`` inside the call running ``future``, at its next
        bytecode boundary (not inside a blocking C call; a broad ``except``
        in the call can swallow it). False if ``future`` is not running here."""
        if not (isinstance(exc_type, type) and issubclass(exc_type, BaseException)):
            raise TypeError(f"exc_type must be an exception class, got {describe(exc_type)}")
        found = self._slot_running(future)
        if found is None:
            return False
        return bool(self._core.interrupt(found[1], future._seq, exc_type))  # type: ignore[attr-defined]

    # -- run-time control -------------------------------------------------

    def resize(self, max_workers: int) -> None:
        """Change the worker ceiling now: growing starts waiting calls at
        once, shrinking lets running calls finish and retires the surplus."""
        max_workers = check_count(max_workers, "max_workers", minimum=1, too_small="greater than 0")
        unclaimed = self._core.resize(max_workers)
        self._max_workers = max_workers
        if unclaimed:
            self._spawn()

    def in_worker(self) -> bool:
        """True when called on one of this executor's worker threads."""
        return self._core.in_worker()

    def stats(self) -> PoolStats:
        """Workers, idle, running, queued and the outcome counters."""
        pool_stats = _pool_stats_class or _load_pool_stats()
        return pool_stats(*self._core.stats())

    def position(self, future: _cf.Future[Any]) -> int | None:
        """The 1-based queue position of ``future``, None once it started."""
        if getattr(future, "_core", None) is not self._core:
            return None
        seq: int = getattr(future, "_seq", 0)
        position: int | None = self._core.position(seq)
        return position

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._shutdown_lock:
            self._shutdown = True
            self._core.shutdown()
            # Queued calls still run: start the workers an interrupted
            # submit left unstarted (no later submit will).
            try:
                self._spawn()
            except RuntimeError:
                pass  # no new thread at interpreter exit: as before shutdown
        if cancel_futures:
            # Outside the lock: the cancelled calls' done callbacks may call
            # shutdown() (or submit()) again. (Shut down, the core takes no
            # new calls meanwhile.) Calls a worker is already on its way to
            # are not pending any more, to the caller: they run, as in the
            # stdlib. Not while a worker is still in its initializer: the
            # stdlib's takes no call before it returns, so every queued
            # call is cancelled (kept, they ran after the shutdown).
            drain = self._core.drain if self._initializing else self._drain_waiting
            _worker._drain_and_settle(drain, _cancel_drained)
        if wait:
            me = threading.current_thread()
            # Workers of this pool waiting here (a call or a done callback
            # that shuts its own pool down) would wait for each other for
            # good: each waits only for those that came after it. Added
            # before the snapshot, so of any two the later one sees the first.
            waiting = self._workers_in_shutdown
            if me in self._exited:
                waiting[me] = None
            try:
                skip = set(waiting)
                skip.add(me)
                # Our own exit events, not Thread.join(): see _worker._live_workers.
                for thread, exited in list(self._exited.items()):
                    if thread not in skip:
                        exited.wait()
                        self._exited.pop(thread, None)
            finally:
                waiting.pop(me, None)

    def _reset_after_fork(self) -> None:
        """In a forked child only this thread exists: the parent's workers
        and queue are gone. Queued calls are cancelled and running ones
        failed (waiters woken: nothing would ever complete them here), and
        the executor starts fresh workers on demand."""
        old = self._core
        # The calls the parent's workers were running: in the child they
        # never finish (their threads are not here), except the one this
        # thread forked inside of, which goes on here.
        me = threading.current_thread()
        orphaned = [
            slot.running_future for thread, slot in self._slots.items() if thread is not me
        ]
        # Before the slots go: one whose thread never reported in would give
        # its start back to the old pool, whose lock may be held for good.
        old.orphan()
        self._shutdown_lock = threading.Lock()
        self._room_lock = threading.Lock()
        self._workers_waiting_for_room = 0
        self._worker_threads = {}
        self._slots = {}
        self._exited = {}
        self._workers_in_shutdown = {}
        self._initializing = {}
        self._core = PoolCore(self._max_workers, self._max_queue, self._idle_timeout)
        self._work_queue = WorkQueue(self._core)  # type: ignore[assignment]
        self._idle_semaphore = IdleSemaphore(self._core)  # type: ignore[assignment]
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, PoolCore.shutdown, self._core)
        queued = old.drain_after_fork()
        for future, *_ in queued or ():
            if not isinstance(future, Future):
                continue  # the parent's event loop does not run in the child
            if future.cancel():
                future.set_running_or_notify_cancel()
        for future in orphaned:
            if future is None or future.done():
                continue
            try:
                future.set_exception(
                    RuntimeError(
                        "this call was running on a worker thread of the parent process "
                        "when it forked: it does not run in this child process"
                    )
                )
            except _base.InvalidStateError:
                pass  # completed meanwhile (by its own callbacks, say)


def _after_fork_in_child() -> None:
    global _default_lock
    # A thread that no longer exists may have held these at fork time.
    _future._state_lock = FutureStateLock()
    _default_lock = threading.Lock()
    _worker._live_workers.clear()
    for executor in list(_live_executors.values()):
        executor._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_default: ThreadPoolExecutor | None = None
_default_lock = threading.Lock()


def default_executor() -> ThreadPoolExecutor:
    """The shared process-wide pool used by taut's bounded runs and gathers
    (context propagation on, idle workers retire after 60 s). One shut down
    by its user (``with taut.default_executor() as ex:`` shuts it down on
    exit) is replaced here by a fresh one: the rest of the process (its
    ``to_thread``, bounded runs and gathers) must not lose its pool to that.
    Not at interpreter exit, when every pool is shut down for good."""
    global _default
    executor = _default
    if executor is None or _replaceable(executor):
        with _default_lock:
            executor = _default
            if executor is None or _replaceable(executor):
                executor = _default = ThreadPoolExecutor(
                    thread_name_prefix="taut-default",
                    idle_timeout=60.0,
                    propagate_context=True,
                )
    return executor


def _replaceable(executor: ThreadPoolExecutor) -> bool:
    """Whether the default pool was shut down by its user (see default_executor)."""
    return executor._shutdown and not _worker._interpreter_exiting
