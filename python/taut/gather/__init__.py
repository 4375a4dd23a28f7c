"""Gathered calls: cold handles (``taut.call``), batches with ordered outcomes
(``taut.gather`` / ``taut.agather``) and the scheduler both share.

One scheduler serves a single await of a handle and a gathered batch, so the
two behave the same except where the contract says otherwise: only a gather
applies a parallelism limit and a deadline.

Semantics, in the order a gather applies them:

* **Validation before anything runs.** Objects that are not taut handles are
  rejected (``TypeError``); duplicates (the same handle twice, or two handles
  with the same explicit call id), *foreign* handles (made by another
  :class:`Scheduler`, or in another process - e.g. before a ``fork``),
  *nested* handles (a handle among the arguments of another handle, directly
  or one container deep) and handles that are running right now are rejected
  with :class:`GatherRejected`. A gather started from inside a call of a running
  gather may not gather handles of that enclosing batch, nor use the same
  journal (its slots would interleave with the outer batch's depending on
  thread timing); any other nested gather is allowed - that is how a tool
  starts a sub-agent - and when it would wait for workers of the executor
  whose worker it is running on, it runs its calls inline on its own thread
  instead, so one worker cannot deadlock. Nor can a shared ``limiter``: a
  nested batch with the limiter of the enclosing batch runs its calls one at
  a time under the slot the enclosing call holds when it runs them inline on
  that call's thread, or when it is an ``agather`` inside that call (its
  coroutine, or a loop the call runs on its thread).
* **Journal slots are reserved in input order** (one ``reserve`` call) before
  any call starts. Terminal records replay without running; pending ones run.
* **Outcomes come back in input order.** Ordinary exceptions become ``error``
  outcomes. ``BaseException``\\ s that are not ``Exception``\\ s (cancellation,
  ``KeyboardInterrupt``, ``SystemExit``) propagate out of the gather, after the
  rest of the batch has been fenced and cancelled, and are never cached; calls
  that had already finished keep their outcome, on the handle and in the journal.
* **A failure after which the batch cannot go on** - a journal that fails to
  record an outcome (a value its codec cannot store, a file locked by another
  process, a lease taken over), a limiter whose ``acquire`` raises (a shared
  limiter that lost its connection) or returns anything but a bool
  (``TypeError``) - stops the batch from starting more calls; the calls
  already running are still settled and recorded, then the first failure is
  raised. Outcomes stay cached on their handles, and the calls never started
  go cold: gathering the same handles again once the journal or the limiter
  works writes the cached outcomes without running those calls again, and
  runs the rest.
* **An executor that refuses a call** with ``RuntimeError`` other than a
  shutdown (``can't start new thread`` from a pool with no worker ceiling)
  while calls are running: the refused call goes back to the head of the
  queue and is tried again when one of them finishes (its worker is free
  then); it is never also run from where the executor left it. The refusal
  is raised only when nothing runs any more, after the running calls are
  settled and recorded. A pool shut down while the batch runs cancels the
  calls it refuses (``cancelled``).
* **At the deadline** calls that finished keep their outcome, calls that
  started become ``timeout`` (cancelled where the executor can: a taut
  executor abandons the worker, so a replacement may start, and with
  ``interrupt=True`` also raises :class:`TimeoutError` in it; a remote executor's
  future is cancelled), calls that never started become ``not_started``: they
  are fenced first (a worker that picks one up later returns without running
  it), then their futures are cancelled. A call counts as finished by when
  it finished, not by when the batch saw it: a coroutine that blocked the
  event loop past the deadline (sync I/O in ``async def``), or a pool call
  that finished meanwhile, is ``timeout``, as a call run inline is; one done
  before the deadline and seen late keeps its outcome.
* **Caching.** ``ok``, ``error`` and ``timeout`` outcomes are cached on the
  handle: a repeated await or gather reuses them without running again.
  ``not_started`` and ``cancelled`` outcomes and propagating cancellations are
  not cached: the handle can be run again later.
* **Shared awaits.** Several tasks or threads may await one handle: the
  first runs it, the others wait for its outcome. A call that has started
  keeps its handle running until it ends, even when the await that started
  it is cancelled or interrupted: then its outcome is journaled, cached and
  every other awaiter gets it (only once it is recorded), so it never runs
  twice. Only a call that
  provably never started goes cold at once (its fence is up, so a worker
  that takes it up later returns without running it). A coroutine runs on
  the loop as a task: cancelled with its only awaiter (a cancellation is not
  cached: the handle goes cold), left to finish when another awaiter waits
  for it. A call on the awaiting thread (``result()``, or an ``await``
  inside a worker of its executor) is ended by whatever interrupts that
  thread; it goes cold unless it had already returned or raised.
* **A handle is one run in one process.** Copying, deep-copying or pickling
  a handle raises ``TypeError`` (a copy would run the call again, or claim a
  run it does not own); make a new handle for another run.

Default call ids are ``"module.qualname#index"``: the function's dotted name
and the handle's position in the gather that first runs it. That is what makes
a rerun of the same program match its journal: the same code gathers the same
functions in the same order, independent of object identities, process ids or
timing. A handle's id is fixed the first time it is gathered (or awaited, which
uses index 0); pass ``call_id=`` for ids that must survive reordering.

A call on a local executor (not a coroutine awaited by ``agather``) runs
inside a scope ending at the batch's deadline: ``taut.remaining()`` tells its
time left, and scopes and gathers nested in it end by it (a gather in any
deadline scope ends by the scope, whatever its own timeout). With an executor
whose workers live in other processes, a call carries the batch's remaining
time (never a clock reading) and runs there inside a deadline scope
(``taut.remaining()`` works, ``interrupt=True`` interrupts it); it never
begins after its deadline, and one that ends at or after it is ``timeout``,
told there by the clock its deadline is on. On Dask each call announces its
start before it checks the batch's fence, so at the deadline a call is
``not_started`` only when it provably never began and never will; every
other submitted, unfinished call is ``timeout`` (so a journaled call is not
run twice) and its remote future is cancelled. A scheduler that does not
answer within a few seconds of the deadline is not waited for: its calls
count as started. On a ``ProcessPoolExecutor`` a call the pool still gives back at the deadline is
``not_started``; other multi-process executors count every submitted,
unfinished call as started, except one not yet pickled (it can no longer
begin anywhere). In-process executors (thread pools, an in-process Dask
cluster, any executor that runs a call without pickling it, such as a
wrapper around a thread pool) report starts exactly. See
:mod:`taut.gather.remote`.

``limiter=`` puts a ceiling shared beyond one pool in front of the calls (a
``threading.BoundedSemaphore``, a fleet's ``distributed.Semaphore``): a call
takes a slot within the deadline or is ``not_started``. A ``release()`` that
raises is logged and the batch goes on (:mod:`taut.gather.limits`).

Layout: :mod:`taut.gather.handles` (handles, outcomes, call ids),
:mod:`taut.gather.tasks` (what travels to an executor),
:mod:`taut.gather.remote` (deadlines and starts in other processes),
:mod:`taut.gather.limits` (limiter slots),
:mod:`taut.gather.run` (one batch from validation to settling),
:mod:`taut.gather.drive` (the shared step and its sync and async drivers),
:mod:`taut.gather.validate` (what a batch refuses before anything runs),
:mod:`taut.gather.executors` (handing calls to an executor) and this
module (the scheduler and the module-level ``call``/``gather``/``agather``).

The name ``taut.gather`` is both this package and, as an attribute of
``taut``, the function :func:`gather`: ``taut.gather(...)`` runs a batch,
and ``from taut.gather import Scheduler`` (or
``importlib.import_module("taut.gather")``) reaches the package.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import itertools
import logging
import threading
from collections.abc import Iterable
from typing import Any, Callable, cast

from taut import _expect_binding
from taut._asyncio import submit_when_room
from taut._checks import describe, plain_str
from taut.executor import QueueFull, ThreadPoolExecutor, default_executor
from taut.gather.drive import SLOT_POLL, run_async, run_sync
from taut.gather.executors import Submit, in_worker_of, take_back
from taut.gather.handles import (
    DONE,
    RUNNING,
    STATE_LOCK,
    STATUSES,
    Call,
    GatherRejected,
    Outcome,
    OutcomeStatus,
    default_id,
    nested_argument,
)
from taut.gather.remote import arrived
from taut.gather.run import Entry, Run, _silence
from taut.gather.tasks import ENDED, Captured, Submission, Task
from taut.gather.validate import check_executor, check_journal
from taut.journal import Journal

__all__ = [
    "STATUSES",
    "Call",
    "GatherRejected",
    "Outcome",
    "OutcomeStatus",
    "Scheduler",
    "Submission",
    "agather",
    "call",
    "default_scheduler",
    "gather",
]

_scheduler_ids = itertools.count(1)
_log = logging.getLogger("taut.gather")


class Scheduler:
    """Makes handles and runs them: single awaits and gathers share it.

    Handles belong to the scheduler that made them; another scheduler's gather
    rejects them as foreign. That keeps, say, two agent runs with their own
    journals from mixing their calls. ``executor`` (any
    :class:`concurrent.futures.Executor`), ``journal`` and ``interrupt`` are the
    defaults of this scheduler's gathers; ``None`` means taut's default pool and
    no journal.
    """

    def __init__(
        self,
        *,
        executor: cf.Executor | None = None,
        journal: Journal | None = None,
        interrupt: bool = False,
        name: str | None = None,
    ) -> None:
        self._executor = check_executor(executor)
        self.journal = check_journal(journal)
        if not isinstance(interrupt, bool):
            raise TypeError(f"interrupt must be a bool, got {describe(interrupt)}")
        self.interrupt = interrupt
        self.name = name or f"scheduler-{next(_scheduler_ids)}"

    def __repr__(self) -> str:
        return f"<taut.Scheduler {self.name}>"

    @property
    def executor(self) -> cf.Executor:
        return self._executor if self._executor is not None else default_executor()

    def call(
        self, fn: Callable[..., Any], /, *args: Any, call_id: str | None = None, **kwargs: Any
    ) -> Call[Any]:
        """A cold handle for ``fn(*args, **kwargs)`` owned by this scheduler."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {describe(fn)}")
        if call_id is not None:
            # Plain text, as ToolCall keeps it: no method of a str subclass
            # runs later (in a journal, a message), and '' is the wrong value.
            text = plain_str(call_id)
            if text is None:
                raise TypeError(f"call_id must be a non-empty str or None, got {describe(call_id)}")
            call_id = text
            if not call_id:
                raise ValueError(
                    f"call_id must be a non-empty str or None, got {describe(call_id)}"
                )
        nested = nested_argument(args, kwargs)
        if nested is not None:
            raise GatherRejected(
                f"{nested} of taut.call({default_id(fn)}) is a taut handle; nested "
                "handles are not supported: await or gather the inner handle first"
            )
        return Call(self, fn, args, dict(kwargs), call_id)

    def gather(
        self,
        handles: Iterable[Call[Any]],
        *,
        timeout: float | None = None,
        max_parallel: int | None = None,
        executor: cf.Executor | None = None,
        journal: Journal | None = None,
        interrupt: bool | None = None,
        submit: Submit | None = None,
        limiter: Any = None,
        on_slot_wait: Callable[[int], object] | None = None,
    ) -> list[Outcome]:
        """Run ``handles`` and return one :class:`Outcome` each, in input order.

        ``timeout`` (seconds, ``None`` = no deadline) bounds the whole batch;
        ``max_parallel`` bounds how many calls run at once; ``executor`` is any
        :class:`concurrent.futures.Executor` (default: this scheduler's, else
        taut's shared pool); ``journal`` makes the calls durable;
        ``interrupt=True`` also raises :class:`TimeoutError` in a taut worker
        whose call timed out. ``limiter`` (anything with ``acquire(timeout=...)``
        and ``release()``: a ``threading.BoundedSemaphore``, a
        ``distributed.Semaphore`` shared by a fleet) gives each call a slot
        before it starts, within the deadline (:mod:`taut.gather.limits`).
        ``submit``, for layers built on a gather (a tool
        batch tracks queue positions with it), replaces ``executor.submit``:
        it is called as ``submit(executor, submission)`` with a
        :class:`Submission` and returns the call's future; ``on_slot_wait(index)``
        is told once per call that has to wait for a limiter slot. See the
        module documentation for the full contract.
        """
        run = Run(
            self,
            handles,
            timeout=timeout,
            max_parallel=max_parallel,
            executor=executor,
            journal=journal,
            interrupt=self.interrupt if interrupt is None else interrupt,
            submit=submit,
            limiter=limiter,
            on_slot_wait=on_slot_wait,
        )
        # A call run inline keeps this frame through its traceback: it must
        # not hold the batch once it returns (see taut.gather.drive).
        del handles
        try:
            return run_sync(run)
        finally:
            del run

    async def agather(
        self,
        handles: Iterable[Call[Any]],
        *,
        timeout: float | None = None,
        max_parallel: int | None = None,
        executor: cf.Executor | None = None,
        journal: Journal | None = None,
        interrupt: bool | None = None,
        limiter: Any = None,
    ) -> list[Outcome]:
        """The async twin of :meth:`gather`: coroutine functions run as tasks on
        the running loop, sync functions on ``executor``."""
        run = Run(
            self,
            handles,
            timeout=timeout,
            max_parallel=max_parallel,
            executor=executor,
            journal=journal,
            interrupt=self.interrupt if interrupt is None else interrupt,
            limiter=limiter,
        )
        # A call run inline keeps this frame through its traceback: it must
        # not hold the batch once it returns (see taut.gather.drive).
        del handles
        try:
            return await run_async(run)
        finally:
            del run

    # -- single awaits -----------------------------------------------------

    def _single(self, handle: Call[Any]) -> Run | Outcome:
        """Claim ``handle`` for a single await: its cached outcome, or a run."""
        while True:
            run = Run(self, [handle], interrupt=self.interrupt, what="await")
            with STATE_LOCK:
                state, event = handle._state, handle._event
                # A run clears the event under this lock before setting it:
                # running with no unset event means no run will ever release
                # the handle, and waiting would spin.
                orphaned = state == RUNNING and (event is None or event.is_set())
            if orphaned:
                raise RuntimeError(
                    f"{handle!r} is marked running, but no run holds it (was its state "
                    "copied from another handle?); make a new handle with taut.call"
                )
            if state == DONE:
                return cast(Outcome, handle._outcome)
            if state == RUNNING:
                raise _Busy(cast(threading.Event, event))
            try:
                run.claim()
            except GatherRejected:
                continue  # lost a race with another runner; look again
            e = run.entries[0]
            if e.outcome is not None:
                return e.outcome
            # A durable single await reserves its slot before it runs, like a
            # gather: a terminal record replays, and complete() has a slot.
            run.reserve_or_release()
            if e.outcome is not None:
                return e.outcome
            return run

    def _await_sync(self, handle: Call[Any]) -> Outcome:
        # The outcome, not its value: the handle unwraps it, so that no frame
        # here holds it while its error passes through (see Outcome.unwrap).
        while True:
            try:
                got = self._single(handle)
            except _Busy as busy:
                _wait_released(handle, busy.event)
                continue
            if isinstance(got, Outcome):
                return got
            e = got.entries[0]
            task = got.new_task(e)
            if handle._is_coroutine:
                try:
                    asyncio.get_running_loop()
                except RuntimeError:
                    pass
                else:
                    got.release_all()
                    raise RuntimeError(
                        f"{e.call_id} is a coroutine function and this thread runs an "
                        "event loop: use 'await handle' instead of handle.result()"
                    )
            captured: Captured | None = None
            try:
                captured = task.run()
                outcome = got.outcome_from(e, captured, None)
            except BaseException:
                # The call runs on this thread: whatever interrupted this
                # await also ended the call, unless it had already returned.
                _keep_or_release(got, e, captured)
                raise
            got.finish(e, outcome)
            got.raise_if_halted()
            # A call run inline (task.run() above) has this frame as its
            # caller, which a failed call's traceback keeps: the frame must not
            # hold what holds the error then (see Outcome.unwrap).
            del handle, got, e, task, captured
            try:
                return outcome
            finally:
                del outcome

    async def _await_async(self, handle: Call[Any]) -> Outcome:
        while True:
            try:
                got = self._single(handle)
            except _Busy as busy:
                # Wait on this loop, not on a thread of its default executor:
                # many awaits of a handle that runs long would take every such
                # thread (and asyncio.to_thread with them).
                await _released(handle, busy.event)
                continue
            if isinstance(got, Outcome):
                return got
            e = got.entries[0]
            task = got.new_task(e)
            captured: Captured | None = None
            running: asyncio.Task[Captured] | cf.Future[Any] | None = None
            try:
                if handle._is_coroutine:
                    # A task of its own: cancelling this awaiter must not
                    # cancel a coroutine that other awaiters wait for.
                    coroutine = asyncio.get_running_loop().create_task(task.arun())
                    running = coroutine
                    await asyncio.wait([coroutine])
                    captured = coroutine.result()
                elif in_worker_of(got.executor):
                    captured = task.run()
                else:
                    future = await _submit_when_room(got.executor, task)
                    running = e.future = future
                    waiting = asyncio.wrap_future(future)
                    _silence(waiting)  # read by nobody once this awaiter leaves
                    # Shielded: asyncio would cancel the call with this
                    # awaiter, which on Dask succeeds on a call running in
                    # another process. _let_go decides what may be cancelled.
                    captured = arrived(await asyncio.shield(waiting))
                outcome = got.outcome_from(e, captured, None)
            except BaseException:
                await _let_go(got, e, captured, running)
                raise
            got.finish(e, outcome)
            got.raise_if_halted()
            del handle, got, e, task, captured, running  # as in _await_sync
            try:
                return outcome
            finally:
                del outcome


def _keep_or_release(run: Run, e: Entry, captured: Captured | None) -> None:
    """An await is leaving by an exception: a call that returned or raised
    keeps its outcome (cached, journaled: nobody runs it again, as a gather
    keeps its finished calls); any other goes cold."""
    if isinstance(captured, ENDED):
        run.finish(e, run.outcome_from(e, captured, None))
    else:
        run.release_all()


async def _let_go(
    run: Run,
    e: Entry,
    captured: Captured | None,
    running: asyncio.Task[Captured] | cf.Future[Any] | None,
) -> None:
    """The async await of ``e`` is leaving by an exception (cancelled, most
    often) while its call may still run. A call that has started keeps its
    handle running until it ends, then its outcome is cached and journaled
    and every other awaiter gets it: a call never runs twice at once, nor
    again after it finished. Only a call that provably never started goes
    cold at once. A coroutine runs on this loop as a task: cancelled with
    its only awaiter (its cleanup done before that awaiter leaves, as when
    it is awaited directly; a cancellation is never cached, so the handle
    goes cold), left to finish when other awaiters wait for it."""
    if running is None or isinstance(captured, ENDED):
        _keep_or_release(run, e, captured)
    elif isinstance(running, asyncio.Task):
        _settle_when_done(run, e, running)
        if not running.done() and not e.handle._has_waiters():
            running.cancel()
            await asyncio.wait([running])
    elif _never_started(run, e, running):
        run.release_all()
    else:
        _settle_when_done(run, e, running)


def _never_started(run: Run, e: Entry, future: cf.Future[Any]) -> bool:
    """Stop ``e``'s call if it has not started; whether it provably never will."""
    # The fence first: a worker that takes the call up from now on returns
    # without running it, so a start not seen yet can no longer happen.
    run.batch.raise_fence()
    # On Dask, cancel() succeeds on a call running on a worker too: not tried
    # there, the handle stays running until the call ends.
    if take_back(run.executor, future):
        return True
    # Starts are observable in this process only; elsewhere it may be running.
    task = e.task
    return task is not None and task.started_at is None and run.sees_start_of(task)


def _settle_when_done(run: Run, e: Entry, running: asyncio.Task[Captured] | cf.Future[Any]) -> None:
    """Settle ``e`` once its call ends, on whichever thread ends it, with
    nobody left to raise to: an outcome is cached and journaled (a journal
    failure is logged; the outcome stays cached, and gathering the handle
    again with the journal records it), anything else leaves the handle cold."""

    def settle(_: object = None) -> None:
        try:
            if running.cancelled():
                run.release_all()
                return
            exc = running.exception()
            captured = None if exc is not None else arrived(running.result())
            outcome = run.outcome_from(e, captured, exc)
        except BaseException:  # an escaped cancellation or interrupt: never cached
            run.release_all()
            return
        run.finish(e, outcome)
        if run.halted_by is not None:
            _log.error(
                "could not journal the outcome of %s after its awaiter left: %s",
                e.call_id,
                run.halted_by,
            )

    if running.done():
        settle()
    else:
        running.add_done_callback(settle)


def _wait_released(handle: Call[Any], event: threading.Event) -> None:
    """Until the run holding ``handle`` lets go, counted among its waiters."""

    def waiting() -> None:
        pass  # event.wait() wakes this thread; the hook only counts it

    if not handle._when_released(event, waiting):
        return
    try:
        event.wait()
    finally:
        handle._forget_hook(waiting)


async def _submit_when_room(executor: cf.Executor, task: Task) -> cf.Future[Any]:
    """Submit ``task``; a taut pool's full bounded queue refuses at once on an
    event loop's thread (its submit never blocks the loop), so wait for room
    without blocking the loop, as a plain ``result()`` would wait."""

    def submit() -> cf.Future[Any]:
        try:
            return executor.submit(task.ref())
        except QueueFull:
            task.forget()
            raise

    if isinstance(executor, ThreadPoolExecutor):
        # In the pool's line of room, with the coroutines waiting there (FIFO).
        return await submit_when_room(executor, submit)
    while True:
        try:
            return submit()
        except QueueFull:
            # Another executor raising QueueFull (a wrapper around a taut
            # pool, say) tells nobody when there is room: ask again soon.
            await asyncio.sleep(SLOT_POLL)  # as a batch asks again


async def _released(handle: Call[Any], event: threading.Event) -> None:
    """Until the run holding ``handle`` (the one that set ``event``) lets go."""
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()

    def wake_on_loop() -> None:
        if not woken.done():
            woken.set_result(None)

    def wake() -> None:  # on whichever thread lets go of the handle
        try:
            loop.call_soon_threadsafe(wake_on_loop)
        except RuntimeError:
            pass  # the loop is closed: nobody waits any more

    if not handle._when_released(event, wake):
        return
    try:
        await woken
    finally:
        handle._forget_hook(wake)


class _Busy(Exception):
    def __init__(self, event: threading.Event) -> None:
        super().__init__("handle is running elsewhere")
        self.event = event


_DEFAULT = Scheduler(name="default")


def default_scheduler() -> Scheduler:
    """The process-wide scheduler behind :func:`call`, :func:`gather` and :func:`agather`."""
    return _DEFAULT


# The module-level functions are the default scheduler's methods.
call = _DEFAULT.call
gather = _DEFAULT.gather
agather = _DEFAULT.agather


# Last: the import system binds this module on the package once it is
# loaded; taut.gather stays the function (see taut._Package).
_expect_binding("gather")
