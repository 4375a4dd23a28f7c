"""One run of a batch: validate -> claim -> reserve journal slots -> run -> settle.

The sync and the async gather share one step (:meth:`Run._steps`): it fills
free slots with calls, settles the calls that finished and, at the deadline,
expires the rest; it yields whenever it must wait, and a thin driver for each
world does the waiting (``concurrent.futures.wait`` or ``asyncio.wait``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import os
import threading
import time
from collections import deque
from collections.abc import Generator, Hashable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Optional, cast

from taut._checks import check_max_parallel, check_timeout
from taut.deadline import DeadlineExpired, move_on_at
from taut.gather.handles import (
    DONE,
    RUNNING,
    STATE_LOCK,
    Call,
    GatherRejected,
    Outcome,
    OutcomeStatus,
    default_id,
    nested_argument,
)
from taut.gather.limits import Slots, check_limiter
from taut.gather.remote import DaskStarts, dask_client
from taut.gather.slots import reserve_slots
from taut.gather.tasks import (
    Batch,
    Captured,
    Escaped,
    Fenced,
    Raised,
    Returned,
    Submission,
    Task,
    enclosing_frames,
)
from taut.journal import Journal

if TYPE_CHECKING:
    from taut.gather import Scheduler

__all__ = ["Entry", "Run", "Submit", "in_worker_of"]

# A single wait never exceeds this many seconds: a huge remaining time must not
# reach threading's OS wait (OverflowError: timestamp out of range for time_t).
_WAIT_SLICE = 3600.0
# How often a batch short of limiter slots asks again while calls are in flight.
_SLOT_POLL = 0.02

# How a batch hands one call to its executor; the default submits the task's
# runnable, a tool batch also tracks queue positions.
Submit = Callable[[Any, Submission], "cf.Future[Any]"]


def _plain_submit(executor: Any, job: Submission) -> cf.Future[Any]:
    return cast("cf.Future[Any]", executor.submit(job.runnable()))


def _timeout_error(call_id: str, timeout: float | None, elapsed: float) -> BaseException:
    return DeadlineExpired(f"call {call_id!r} (gather deadline)", timeout, elapsed)


# --------------------------------------------------------------------------
# Executors: adapters for what only some executors can do


def in_worker_of(executor: Any) -> bool:
    """True if this thread is a worker of ``executor`` (so waiting for its
    workers could wait for ourselves)."""
    probe = getattr(executor, "in_worker", None)
    if callable(probe):
        try:
            if probe():
                return True
        except Exception:  # a foreign executor's probe must not break the gather
            pass
    here = threading.get_ident()
    return any(f.batch.executor is executor and f.thread == here for f in enclosing_frames())


def _stop_started(executor: Any, future: cf.Future[Any], interrupt: bool) -> None:
    """Cut a started call loose at the deadline, as far as the executor allows."""
    abandon = getattr(executor, "abandon", None)
    if callable(abandon):
        abandon(future)
        if interrupt:
            stopper = getattr(executor, "interrupt", None)
            if callable(stopper):
                stopper(future, DeadlineExpired)
    else:
        # Remote executors (Dask) cancel the remote task through their future;
        # a stdlib thread cannot be stopped and is left to finish unobserved.
        future.cancel()


def _silence(af: asyncio.Future[Any]) -> None:
    """Retrieve a left-behind future's exception so asyncio does not log it."""

    def _drop(f: asyncio.Future[Any]) -> None:
        if not f.cancelled():
            f.exception()

    af.add_done_callback(_drop)


# --------------------------------------------------------------------------
# One run


@dataclass
class Entry:
    index: int
    handle: Call[Any]
    call_id: str
    position: int | None = None  # journal slot
    outcome: Outcome | None = None
    task: Task | None = None
    future: cf.Future[Any] | None = None  # on the executor
    afuture: asyncio.Future[Any] | None = None  # what an async gather awaits
    claimed: bool = False


@dataclass
class _Wait:
    """What the shared step waits for next: any of ``pending``, at most ``timeout``."""

    pending: list[Any]
    timeout: float | None


# What starts one call: the key the driver waits on, or None if it already ran.
_Start = Callable[[Entry], Any]
# What waits for the first of some futures to finish (or the timeout): the done ones.
_WaitHere = Callable[[list[Any], Optional[float]], set[Any]]


def _wait_for_futures(pending: list[Any], timeout: float | None) -> set[Any]:
    return cf.wait(pending, timeout=timeout, return_when=cf.FIRST_COMPLETED)[0]


class Run:
    """The lifecycle of one batch (a gather, a single await or a tool batch)."""

    def __init__(
        self,
        scheduler: Scheduler,
        handles: Iterable[Any],
        *,
        timeout: Any = None,
        max_parallel: Any = None,
        executor: Any = None,
        journal: Journal | None = None,
        interrupt: bool,
        submit: Submit | None = None,
        what: str = "gather",
        limiter: Any = None,
        on_slot_wait: Callable[[int], object] | None = None,
    ) -> None:
        self.timeout = check_timeout(timeout)
        checked = check_limiter(limiter)
        self.slots = Slots(checked, on_slot_wait) if checked is not None else None
        self.max_parallel = check_max_parallel(max_parallel)
        self.scheduler = scheduler
        self.executor = executor if executor is not None else scheduler.executor
        self.journal = journal if journal is not None else scheduler.journal
        self.interrupt = interrupt
        self.submit = submit or _plain_submit
        self.what = what
        if isinstance(handles, (str, bytes, Call)):
            raise TypeError(
                f"handles must be an iterable of taut.call(...) handles, got {handles!r}"
            )
        self.handles: list[Any] = list(handles)
        self._validate()
        self.batch = Batch(self.executor, self.journal, self.handles)
        self.batch.interrupt = interrupt
        self.entries = [
            Entry(i, h, h._call_id or f"{default_id(h._fn)}#{i}")
            for i, h in enumerate(self.handles)
        ]
        self.deadline: float | None = None

    # -- validation ------------------------------------------------------

    def _validate(self) -> None:
        seen: dict[int, int] = {}
        ids: dict[str, int] = {}
        pid = os.getpid()
        enclosing = enclosing_frames()
        enclosing_handles = {id(f.handle) for f in enclosing}
        for i, h in enumerate(self.handles):
            where = f"handles[{i}]"
            if not isinstance(h, Call):
                raise TypeError(
                    f"{where} is not a taut call handle, got {h!r} ({type(h).__name__}); "
                    "make one with taut.call(fn, *args)"
                )
            name = h._call_id or default_id(h._fn)
            if id(h) in seen:
                raise GatherRejected(
                    f"{where} ({name}) is the same handle as handles[{seen[id(h)]}]; "
                    "each handle may appear once in a gather"
                )
            seen[id(h)] = i
            if h._explicit_id and h._call_id is not None:
                if h._call_id in ids:
                    raise GatherRejected(
                        f"{where} has call_id {h._call_id!r}, already used by "
                        f"handles[{ids[h._call_id]}]; call ids must be unique in a gather"
                    )
                ids[h._call_id] = i
            if h._pid != pid:
                raise GatherRejected(
                    f"{where} ({name}) is foreign: it was made in process {h._pid}, "
                    f"this is process {pid}"
                )
            if h._scheduler is not self.scheduler:
                raise GatherRejected(
                    f"{where} ({name}) is foreign: it was made by {h._scheduler!r}, "
                    f"not by {self.scheduler!r} that runs this {self.what}"
                )
            nested = nested_argument(h._args, h._kwargs)
            if nested is not None:
                raise GatherRejected(
                    f"{where} ({name}) is nested: its {nested} holds a taut handle; "
                    "gather the inner handle first and pass its value"
                )
            if id(h) in enclosing_handles or any(id(h) in f.batch.handles for f in enclosing):
                raise GatherRejected(
                    f"{where} ({name}) belongs to the gather this call is running in; "
                    "a call cannot gather or await handles of its own batch"
                )
        if self.journal is not None and any(f.batch.journal is self.journal for f in enclosing):
            raise GatherRejected(
                "journal is the journal of the enclosing gather; a nested gather needs "
                "its own journal (its slots would interleave with the outer batch's)"
            )

    # -- claim / reserve -------------------------------------------------

    def claim(self) -> None:
        """Take every cold handle for this run, or none of them."""
        with STATE_LOCK:
            for e in self.entries:
                if e.handle._state == RUNNING:
                    raise GatherRejected(
                        f"handles[{e.index}] ({e.call_id}) is already running in another "
                        "await or gather; gather it after it finishes"
                    )
            for e in self.entries:
                h = e.handle
                e.call_id = h._fix_id(e.index)
                if h._state == DONE:
                    cached = cast(Outcome, h._outcome)
                    e.outcome = (
                        cached
                        if cached.call_id == e.call_id
                        else replace(cached, call_id=e.call_id)
                    )
                else:
                    h._state = RUNNING
                    h._owner = self.batch
                    h._event = threading.Event()
                    e.claimed = True

    def reserve(self) -> None:
        """Reserve the journal slots of every entry, in input order, before
        anything runs; terminal records replay (a cached outcome wins)."""
        if self.journal is None:
            return
        slots = reserve_slots(self.journal, [e.call_id for e in self.entries])
        for e, (position, _) in zip(self.entries, slots):
            e.position = position
        for e, (_, rec) in zip(self.entries, slots):
            if rec is None:
                if e.outcome is not None:
                    self.journal_write(e, e.outcome)
                continue
            if e.outcome is not None:
                continue
            # A journal keeps terminal statuses only ('ok', 'error', 'timeout').
            status = cast(OutcomeStatus, rec.status)
            e.outcome = Outcome(
                e.call_id, status, rec.value, rec.error, started=True, replayed=True
            )
            if e.claimed:
                e.claimed = False
                e.handle._release(e.outcome)

    def reserve_or_release(self) -> None:
        """:meth:`reserve`; if that fails, every claimed handle goes cold again."""
        try:
            self.reserve()
        except BaseException:
            self.release_all()
            raise

    def journal_write(self, e: Entry, outcome: Outcome) -> None:
        if self.journal is None or not outcome.cacheable:
            return
        position = e.position if e.position is not None else e.index
        self.journal.complete(position, e.call_id, outcome.status, outcome.value, outcome.error)

    def release_all(self) -> None:
        """On a propagating exception: every claimed handle goes cold again."""
        for e in self.entries:
            if e.task is not None:
                e.task.forget()
            if e.claimed:
                e.claimed = False
                e.handle._release(None)

    def begin(self) -> list[Entry]:
        """Claim the handles, reserve journal slots, start the clock: the
        calls still to run (replayed ones already have their outcome)."""
        self.claim()
        self.reserve_or_release()
        if self.timeout is not None:
            self.deadline = time.monotonic() + self.timeout
            self.batch.deadline = self.deadline
            client = dask_client(self.executor)
            if client is not None:
                self.batch.dask = DaskStarts(client)
        return [e for e in self.entries if e.outcome is None]

    def results(self) -> list[Outcome]:
        return [cast(Outcome, e.outcome) for e in self.entries]

    def new_task(self, e: Entry) -> Task:
        e.task = Task(self.batch, e.handle, e)
        return e.task

    # -- settling --------------------------------------------------------

    def finish(self, e: Entry, outcome: Outcome, *, journal: bool = True) -> None:
        e.outcome = outcome
        if e.task is not None:
            e.task.forget()
        if e.claimed:
            e.claimed = False
            e.handle._release(outcome)
        if journal:
            self.journal_write(e, outcome)

    def outcome_from(
        self, e: Entry, captured: Captured | None, exc: BaseException | None
    ) -> Outcome:
        """The outcome of what a task reported (or of the executor's own failure
        ``exc``); an escaping ``BaseException`` is raised, never cached."""
        task = cast(Task, e.task)
        if exc is not None:
            if not isinstance(exc, Exception):
                raise exc
            # The executor itself failed around the call (a broken pool, a
            # lost Dask worker, an unpicklable argument).
            return Outcome(
                e.call_id, "error", None, exc, task.started_at is not None, task.elapsed()
            )
        if isinstance(captured, Fenced):
            return Outcome(e.call_id, "not_started")
        if isinstance(captured, Returned):
            return Outcome(e.call_id, "ok", captured.value, None, True, task.elapsed())
        if isinstance(captured, Raised):
            return Outcome(e.call_id, "error", None, captured.error, True, task.elapsed())
        raise cast(Escaped, captured).error

    def _cancelled(self, e: Entry) -> Outcome:
        started = e.task is not None and e.task.started_at is not None
        return Outcome(e.call_id, "cancelled", None, None, started)

    def settle(self, e: Entry) -> None:
        """Record the outcome of a call whose future (or asyncio task) is done."""
        future: Any = e.future if e.future is not None else e.afuture
        if future.cancelled():
            self.finish(e, self._cancelled(e))
            return
        exc = future.exception()
        self.finish(e, self.outcome_from(e, None if exc is not None else future.result(), exc))

    def _done(self, e: Entry) -> bool:
        future: Any = e.future if e.future is not None else e.afuture
        return future is not None and future.done() and not future.cancelled()

    def expire(self, e: Entry, now: float) -> None:
        """Settle an unfinished entry at the deadline."""
        task = e.task
        if task is None:
            self.finish(e, Outcome(e.call_id, "not_started"))
            return
        if e.afuture is not None:
            _silence(e.afuture)
        if self._done(e):
            self.settle(e)
            return
        future = e.future
        started = task.started_at is not None
        observable = (
            (e.afuture is not None and future is None)  # an asyncio task on this loop
            or isinstance(self.executor, cf.ThreadPoolExecutor)
            or self.batch.local
        )
        if not started and not observable:
            started = self._started_elsewhere(task)
        if started:
            if future is not None:
                _stop_started(self.executor, future, self.interrupt)
            elif e.afuture is not None:
                e.afuture.cancel()
            elapsed = max(0.0, now - task.started_at) if task.started_at is not None else 0.0
            error = _timeout_error(e.call_id, self.timeout, elapsed)
            self.finish(e, Outcome(e.call_id, "timeout", None, error, True, elapsed))
        else:
            if future is not None:
                future.cancel()
            if e.afuture is not None:
                e.afuture.cancel()
            self.finish(e, Outcome(e.call_id, "not_started"))

    def _started_elsewhere(self, task: Task) -> bool:
        """Whether a call in another process may have begun (taut.gather.remote)."""
        dask = self.batch.dask
        return dask is None or task.remote_start is None or dask.started(task.remote_start)

    def _raise_fences(self) -> None:
        """Fence the batch here and, on Dask, in every other process."""
        self.batch.raise_fence()
        if self.batch.dask is not None and not self.batch.local:
            self.batch.dask.raise_fence()

    def abort(self, unfinished: Iterable[Entry]) -> None:
        """A BaseException is propagating: fence, cancel, keep finished work."""
        self.batch.raise_fence()
        for e in unfinished:
            f = e.future
            if f is not None and f.done() and not f.cancelled() and f.exception() is None:
                captured = f.result()
                if isinstance(captured, (Returned, Raised)):
                    try:
                        self.finish(e, self.outcome_from(e, captured, None), journal=False)
                    except BaseException:
                        pass  # the propagating exception matters more
                    continue
            if f is not None:
                if e.task is not None and e.task.started_at is not None:
                    _stop_started(self.executor, f, self.interrupt)
                else:
                    f.cancel()
            if e.afuture is not None:
                _silence(e.afuture)
                if not e.afuture.done():
                    e.afuture.cancel()
            if e.task is not None:
                e.task.forget()
        self.release_all()

    # -- the shared step ---------------------------------------------------

    def _past_deadline(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def _steps(
        self, todo: list[Entry], start: _Start, wait: _WaitHere | None = None
    ) -> Generator[_Wait, set[Any], None]:
        """Fill free slots, wait, settle what finished; at the deadline fence
        the batch and expire the rest. With ``wait`` this waits itself and
        never yields (the sync driver); otherwise it yields what to wait for and
        its driver sends back the done keys, or throws what interrupted it."""
        queue = deque(todo)
        in_flight: dict[Hashable, Entry] = {}
        limit = self.max_parallel or len(todo)
        slots = self.slots
        try:
            while queue or in_flight:
                short_of_slots = False
                while queue and len(in_flight) < limit and not self._past_deadline():
                    e = queue[0]
                    if slots is not None and not slots.take(
                        e.index, self.deadline, may_block=wait is not None and not in_flight
                    ):
                        short_of_slots = True
                        break
                    queue.popleft()
                    try:
                        key = start(e)
                    except BaseException:
                        if slots is not None:
                            slots.release()
                        queue.appendleft(e)  # aborted with the rest
                        raise
                    if key is not None:
                        in_flight[key] = e
                        if slots is not None:
                            slots.release_when_done(e.future if e.future is not None else key)
                    elif slots is not None:
                        slots.release()  # it ran inline and is done
                wait_for: float | None = None
                if self.deadline is not None:
                    wait_for = self.deadline - time.monotonic()
                    if wait_for <= 0:
                        break  # start nothing after the deadline
                    wait_for = min(wait_for, _WAIT_SLICE)
                if short_of_slots:  # come back soon to ask the limiter again
                    wait_for = _SLOT_POLL if wait_for is None else min(wait_for, _SLOT_POLL)
                if not in_flight:
                    if short_of_slots and wait is None:
                        yield _Wait([], wait_for)  # the async driver sleeps
                    continue  # everything so far ran inline, or ask for a slot again
                if wait is not None:
                    done = wait(list(in_flight), wait_for)
                else:
                    done = yield _Wait(list(in_flight), wait_for)
                for key in done:
                    self.settle(in_flight.pop(key))
            else:
                return
            # Fence first: a worker that picks a queued call up from now on
            # finds the fence and returns without running it.
            self._raise_fences()
            now = time.monotonic()
            for e in in_flight.values():
                self.expire(e, now)
            for e in queue:
                self.finish(e, Outcome(e.call_id, "not_started"))
        except BaseException:
            self.abort([*in_flight.values(), *queue])
            raise

    # -- starting one call ---------------------------------------------------

    def _start_pooled(self, e: Entry) -> cf.Future[Any]:
        e.future = self.submit(self.executor, self.new_task(e))
        return e.future

    def _start_inline(self, e: Entry) -> None:
        self.finish(e, self.run_inline(e, self.new_task(e)))

    def run_inline(self, e: Entry, task: Task) -> Outcome:
        """Run one call on this thread. Nothing else can watch the deadline
        meanwhile, so a call still running at the deadline becomes a timeout
        when it returns, as it would on a pool; with ``interrupt=True`` a
        deadline scope stops it on time."""
        captured: Captured | None = None
        if self.interrupt and self.deadline is not None:
            with move_on_at(self.deadline, f"call {e.call_id!r} (gather deadline)", interrupt=True):
                captured = task.run()
        else:
            captured = task.run()
        if isinstance(captured, Escaped):
            raise captured.error  # never cached
        deadline = self.deadline
        started = task.started_at
        if deadline is not None and started is not None:
            finished = task.finished_at
            if captured is None or finished is None or finished > deadline:
                elapsed = max(0.0, deadline - started)
                error = _timeout_error(e.call_id, self.timeout, elapsed)
                return Outcome(e.call_id, "timeout", None, error, True, elapsed)
        return self.outcome_from(e, captured, None)

    # -- the two drivers -----------------------------------------------------

    def run_sync(self) -> list[Outcome]:
        todo = self.begin()
        if todo:
            start = self._start_inline if in_worker_of(self.executor) else self._start_pooled
            try:
                next(self._steps(todo, start, _wait_for_futures), None)
            finally:
                if self.batch.dask is not None:
                    self.batch.dask.cleanup()
        return self.results()

    async def run_async(self) -> list[Outcome]:
        todo = self.begin()
        if todo:
            loop = asyncio.get_running_loop()
            inline_sync = in_worker_of(self.executor)

            def start(e: Entry) -> asyncio.Future[Any] | None:
                task = self.new_task(e)
                if e.handle._is_coroutine:
                    e.afuture = loop.create_task(task.arun())
                elif inline_sync:
                    self.finish(e, self.run_inline(e, task))
                    return None
                else:
                    e.future = self.submit(self.executor, task)
                    e.afuture = asyncio.wrap_future(e.future)
                return e.afuture

            steps = self._steps(todo, start)
            try:
                wait = next(steps)
                while True:
                    try:
                        if not wait.pending:  # waiting for a limiter slot
                            await asyncio.sleep(wait.timeout or 0)
                            done: set[Any] = set()
                        else:
                            done, _ = await asyncio.wait(
                                wait.pending,
                                timeout=wait.timeout,
                                return_when=asyncio.FIRST_COMPLETED,
                            )
                    except BaseException as exc:  # cancelled: the step aborts the batch
                        wait = steps.throw(exc)
                    else:
                        wait = steps.send(done)
            except StopIteration:
                pass
            finally:
                if self.batch.dask is not None:
                    self.batch.dask.cleanup()
        return self.results()
