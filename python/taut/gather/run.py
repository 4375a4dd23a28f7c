"""One run of a batch: validate -> claim -> reserve journal slots -> run -> settle.

:class:`Run` holds a batch's state and what happens to one call: claiming its
handle, its journal slot, settling, expiring at the deadline, aborting. Running
the batch (the shared step and its sync and async drivers) is
:mod:`taut.gather.drive`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, cast

from taut._checks import check_max_parallel, check_timeout, describe, earliest
from taut.deadline import DeadlineExpired
from taut.deadline import remaining as scope_remaining
from taut.gather.executors import (
    Submit,
    is_shut_down,
    plain_submit,
    stop_started,
    take_back,
)
from taut.gather.handles import (
    DONE,
    RUNNING,
    STATE_LOCK,
    Call,
    GatherRejected,
    Outcome,
    OutcomeStatus,
    default_id,
)
from taut.gather.limits import Slots, check_limiter
from taut.gather.remote import DaskStarts, arrived, dask_client
from taut.gather.slots import held_slots, hold, reserve_slots
from taut.gather.tasks import (
    ENDED,
    Batch,
    Captured,
    Escaped,
    Fenced,
    Overran,
    Raised,
    Returned,
    Task,
)
from taut.gather.validate import check_executor, check_handles, check_journal
from taut.journal import Journal

if TYPE_CHECKING:
    from taut.gather import Scheduler

__all__ = ["Entry", "Run", "timeout_error"]


def timeout_error(call_id: str, timeout: float | None, elapsed: float) -> BaseException:
    return DeadlineExpired(f"call {call_id!r} (gather deadline)", timeout, elapsed)


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
    # Gives the call's limiter slot back (once), when the batch is done with it.
    give_back_slot: Callable[[], None] | None = None


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
        check_executor(executor)
        if not isinstance(interrupt, bool):  # "no" would be taken as True
            raise TypeError(f"interrupt must be a bool or None, got {describe(interrupt)}")
        for name, hook in (("submit", submit), ("on_slot_wait", on_slot_wait)):
            if hook is not None and not callable(hook):
                raise TypeError(f"{name} must be a callable or None, got {describe(hook)}")
        self.executor = executor if executor is not None else scheduler.executor
        self.journal = check_journal(journal) if journal is not None else scheduler.journal
        self.interrupt = interrupt
        self.submit = submit or plain_submit
        self.what = what
        if isinstance(handles, (str, bytes, Call)) or not hasattr(handles, "__iter__"):
            raise TypeError(
                f"handles must be an iterable of taut.call(...) handles, got {describe(handles)}"
            )
        self.handles: list[Any] = list(handles)
        check_handles(self.handles, self.scheduler, self.journal, self.what)
        self.batch = Batch(self.executor, self.journal, self.handles)
        self.batch.interrupt = interrupt
        self.batch.limiter = checked
        self.entries = [
            Entry(i, h, h._call_id or f"{default_id(h._fn)}#{i}")
            for i, h in enumerate(self.handles)
        ]
        self.deadline: float | None = None
        self.executor_was_open = True
        # The first failure after which the batch cannot go on (a journal
        # that cannot record an outcome, a limiter that cannot hand out a
        # slot): see halt().
        self.halted_by: Exception | None = None

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
        held = held_slots(self.journal, [e.handle for e in self.entries])
        if held is not None:
            # Gathered again on the same journal object: the slots reserved
            # the first time (see taut.gather.slots).
            for e, slot in zip(self.entries, held):
                e.position = slot.position
                if e.outcome is not None and not slot.recorded:
                    self.journal_write(e, e.outcome)
            return
        slots = reserve_slots(self.journal, [e.call_id for e in self.entries])
        for e, (position, rec) in zip(self.entries, slots):
            e.position = position
            hold(e.handle, self.journal, position, recorded=rec is not None)
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
        hold(e.handle, self.journal, position, recorded=True)

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
        # A pool shut down before the batch began is the caller's mistake (the
        # first submit says so); one shut down while the batch runs cancels
        # the calls it refuses from then on (drive.steps).
        self.executor_was_open = not is_shut_down(self.executor)
        self.claim()
        self.reserve_or_release()
        # A batch in a deadline scope ends by it, as a tool batch does (a
        # gathered call runs in one ending at its batch's deadline): waiting
        # past it would hold the call's worker, and report calls that ended
        # after that deadline as done on time.
        self.timeout = earliest(self.timeout, scope_remaining())
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
        """Settle ``e``: its outcome, its handle and its journal slot.

        A journal that fails to record the outcome (a value its codec cannot
        store, a locked or vanished file, a lease taken over) does not raise
        here: raising would abort the batch and cut loose the calls still
        running, whose side effects would then happen unrecorded and run again
        on every resume. The failure is kept; the batch starts nothing more,
        settles and records what is running, then
        raises it (:meth:`halt`). The outcome stays cached on the handle, so
        gathering the same handles again once the journal works writes it
        without running the call again."""
        e.outcome = outcome
        if e.give_back_slot is not None:
            e.give_back_slot()  # a call cut loose at the deadline may still run
        if e.task is not None:
            e.task.forget()
        try:
            if journal:
                try:
                    self.journal_write(e, outcome)
                except Exception as exc:
                    self.halt(exc)
        finally:
            # Only now: the release wakes whoever else awaits the handle, and
            # they must find the outcome durable (one returning and the
            # process crashing right after must not run the call again on
            # resume).
            if e.claimed:
                e.claimed = False
                e.handle._release(outcome)

    def halt(self, failure: Exception) -> None:
        """The batch cannot go on (``failure``): it starts nothing more, but
        still settles and records the calls already running, then raises the
        first such failure (:meth:`raise_if_halted`). Raising at once would
        cut those calls loose: their work would be lost, and on resume they
        would run again."""
        if self.halted_by is None:
            self.halted_by = failure
            # Calls already handed to the executor and waiting in its queue
            # (every call, without max_parallel) must not begin either: the
            # fence makes a worker that takes one up return it unrun
            # (not_started, never journaled, its handle cold again). Without
            # it a runner whose lease was taken over ran all its queued calls
            # next to the new owner. Only this process's fence: on Dask, a
            # remote fence is a round trip to a scheduler that may be what
            # failed (the limiter), so remote calls already sent still run.
            self.batch.raise_fence()

    def raise_if_halted(self) -> None:
        """Raise the failure that halted the batch, if there was one."""
        failure = self.halted_by
        if failure is not None:
            raise failure

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
                e.call_id, "error", None, exc, self._may_have_started(task, exc), task.elapsed()
            )
        if isinstance(captured, Fenced):
            refused = self.batch.start_refused
            if refused is not None:
                self.halt(refused)  # raised once the calls running are settled
            return Outcome(e.call_id, "not_started")
        if isinstance(captured, Returned):
            return Outcome(e.call_id, "ok", captured.value, None, True, task.elapsed())
        if isinstance(captured, Raised):
            return Outcome(e.call_id, "error", None, captured.error, True, task.elapsed())
        if isinstance(captured, Overran):
            error = timeout_error(e.call_id, self.timeout, captured.elapsed)
            return Outcome(e.call_id, "timeout", None, error, True, captured.elapsed)
        raise cast(Escaped, captured).error

    def _may_have_started(self, task: Task, exc: Exception) -> bool:
        """Whether a call its executor failed around may have begun. A pool
        that broke (a worker ended by ``os._exit`` or a crash) fails every
        call it holds, the one that ended the worker with the rest: whichever
        was sent to another process may have begun there, as at a deadline
        (taut.gather.remote); one never sent never began."""
        if task.started_at is not None:
            return True
        broke = isinstance(exc, cf.BrokenExecutor)
        return broke and task.sent_away and not self.sees_start_of(task)

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
        captured = None if exc is not None else arrived(future.result())
        self.finish(e, self._ended(e, captured, exc))

    def _ended(self, e: Entry, captured: Captured | None, exc: BaseException | None) -> Outcome:
        """The outcome of a call whose future is done: :meth:`outcome_from`,
        except that one which finished after the deadline is a timeout
        (:meth:`_finished_late`), whichever path of the batch settles it."""
        if isinstance(captured, (Returned, Raised)):
            late = self._finished_late(e)
            if late is not None:
                return late
        return self.outcome_from(e, captured, exc)

    def _finished_late(self, e: Entry) -> Outcome | None:
        """The ``timeout`` of a call that finished after the batch deadline.

        The batch may see a finished call only well after it finished: a
        coroutine of ``agather`` that blocks the event loop holds up the
        batch's own wait too. Judged by when the call finished (its task
        records that, in this process), never by when the batch looked, so a
        call done before the deadline keeps its outcome however late it is
        seen, and the rule is the one an inline call follows (run_inline).
        A call that ran in another process has no finishing time here (its
        clock is not ours): that process tells instead (``Overran``)."""
        task, deadline = e.task, self.deadline
        if deadline is None or task is None or task.started_at is None:
            return None
        finished = task.finished_at
        if finished is None or finished <= deadline:
            return None
        elapsed = max(0.0, deadline - task.started_at)
        error = timeout_error(e.call_id, self.timeout, elapsed)
        return Outcome(e.call_id, "timeout", None, error, True, elapsed)

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
        ended = task.ended_here()
        if ended is not None:
            # It returned or raised in this process; only its result has not
            # come back through the executor yet. Judged by when it ended.
            self.finish(e, self._ended(e, ended, None))
            return
        future = e.future
        started = task.started_at is not None
        observable = (
            e.afuture is not None and future is None  # an asyncio task on this loop
        ) or self.sees_start_of(task)
        if not started and not observable:
            if future is not None and take_back(self.executor, future):
                # Still waiting in a process pool: taken back, it never begins
                # (a journal must not keep it as a final timeout).
                self.finish(e, Outcome(e.call_id, "not_started"))
                return
            started = self._started_elsewhere(task)
        if started:
            if future is not None:
                stop_started(self.executor, future, self.interrupt)
            elif e.afuture is not None:
                e.afuture.cancel()
            elapsed = max(0.0, now - task.started_at) if task.started_at is not None else 0.0
            error = timeout_error(e.call_id, self.timeout, elapsed)
            self.finish(e, Outcome(e.call_id, "timeout", None, error, True, elapsed))
        else:
            if future is not None:
                future.cancel()
            if e.afuture is not None:
                e.afuture.cancel()
            self.finish(e, Outcome(e.call_id, "not_started"))

    def sees_start_of(self, task: Task) -> bool:
        """Whether ``task``'s call can begin only in this process, where its
        start is recorded: on a thread pool, an in-process Dask cluster, or
        any executor that never pickled it (a wrapper around a thread pool,
        say). Then a call with no start recorded has not begun, and once the
        fence is up it never will."""
        local = isinstance(self.executor, cf.ThreadPoolExecutor) or self.batch.local
        return local or task.starts_seen_here()

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
        """A BaseException is propagating: fence, cancel, keep finished work.

        A call that finished before the batch could settle it (on the
        executor, or a coroutine on the loop) keeps its outcome on its handle
        and in the journal, as if the batch had settled it a moment earlier:
        a durable call that ran must never run again on resume."""
        self.batch.raise_fence()
        try:
            for e in unfinished:
                self._cut_loose(e)
        finally:
            # Whatever failed there (an executor refusing to cancel, say), no
            # handle may stay "running": its waiters would wait for good.
            self.release_all()

    def _cut_loose(self, e: Entry) -> None:
        """Abort one unfinished call: keep its outcome if it finished, else
        stop or cancel it and give its limiter slot back."""
        if e.outcome is not None:
            return  # settled already (expire() raised partway): written once
        f = e.future
        done: Any = f if f is not None else e.afuture
        captured: Captured | None = None
        if done is not None and done.done() and not done.cancelled() and done.exception() is None:
            captured = arrived(done.result())
        elif e.task is not None:
            captured = e.task.ended_here()  # ended here, its result not back yet
        if isinstance(captured, ENDED):
            try:
                # Judged as settle() judges it: a call that finished after
                # the deadline is a timeout even when the batch is aborted
                # (cancelled) before its deadline handling ran.
                self.finish(e, self._ended(e, captured, None))
            except BaseException:
                pass  # the propagating exception matters more
            return
        if f is not None:
            if e.task is not None and e.task.started_at is not None:
                stop_started(self.executor, f, self.interrupt)
            else:
                f.cancel()
        if e.afuture is not None:
            _silence(e.afuture)
            if not e.afuture.done():
                e.afuture.cancel()
        if e.task is not None:
            e.task.forget()
        if e.give_back_slot is not None:
            e.give_back_slot()
