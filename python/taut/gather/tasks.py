"""How one gathered call travels to an executor and back.

A :class:`Task` is one call of one batch. Only a small picklable
:class:`TaskRef` is submitted: in this process its token finds the task (its
fence and its live arguments) in a process-local registry; in another process
(a Dask worker) the pickled function and arguments are used instead, with the
batch's remaining time and, on Dask, its fence (see :mod:`taut.gather.remote`).
What a task reports back is one of the named results
:class:`Returned`, :class:`Raised`, :class:`Escaped` or :data:`FENCED`.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol, Union, cast

from taut._callables import not_a_coroutine
from taut._checks import describe
from taut._fork_locks import fork_safe_lock
from taut.deadline import move_on_after
from taut.gather.handles import Call
from taut.gather.limits import Slots
from taut.gather.remote import PICKLING_FAILURES, DaskStarts, Terms, dumps, run_remote

if TYPE_CHECKING:
    from taut.gather.run import Entry

__all__ = [
    "ENDED",
    "FENCED",
    "Batch",
    "Captured",
    "Escaped",
    "Fenced",
    "Overran",
    "Raised",
    "Returned",
    "Submission",
    "Task",
    "TaskRef",
    "enclosing_frames",
]


# --------------------------------------------------------------------------
# What a task reports back (picklable: it may come from another process)


@dataclass(frozen=True)
class Returned:
    """The call returned ``value``."""

    value: Any


@dataclass(frozen=True)
class Raised:
    """The call raised an ordinary exception: a failed outcome, cached."""

    error: Exception


@dataclass(frozen=True)
class Escaped:
    """The call raised a ``BaseException`` that is not an ``Exception``
    (cancellation, ``KeyboardInterrupt``, ``SystemExit``): it propagates out of
    the gather and is never cached."""

    error: BaseException


class Fenced:
    """The call never ran: the batch's fence was up (or its deadline passed)
    when a worker picked it up. Compare with ``isinstance``: a copy may come
    back through pickling."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "FENCED"


FENCED = Fenced()


@dataclass(frozen=True)
class Overran:
    """The call ran in another process and ended at or after its deadline
    (raising that deadline's ``DeadlineExpired``, most often): a timeout,
    whatever it returned or raised, as on a local pool (``Run._finished_late``).
    That process judges it by its own clock, the one the call's deadline is
    on; the caller may see this before its own deadline handling runs.
    ``elapsed`` is how long the call ran until its deadline, by that clock."""

    elapsed: float


Captured = Union[Returned, Raised, Escaped, Fenced, Overran]

# What a call that ran to its end reports: an outcome to keep (cached,
# journaled), never a reason to run the call again.
ENDED = (Returned, Raised, Overran)


# --------------------------------------------------------------------------
# Batches and the calls enclosing this one


@dataclass(frozen=True)
class Frame:
    """One enclosing call: the batch running it, and the thread it runs on."""

    batch: Batch
    handle: Call[Any]
    thread: int | None  # None when it runs as an asyncio task
    # With a limiter: the slot this call holds, as a limiter of one slot for
    # async batches nested in the call (taut.gather.drive). Their calls take
    # it in turn, so however many such batches the call runs at once (tasks
    # of its own), one inner call at a time runs under its slot.
    held: Slots | None = None


_frames: contextvars.ContextVar[tuple[Frame, ...]] = contextvars.ContextVar(
    "taut_gather_frames", default=()
)


def enclosing_frames() -> tuple[Frame, ...]:
    """The gathered calls this code runs inside, outermost first."""
    return _frames.get()


class Batch:
    """Shared state of one gather: the fence that stops unstarted calls."""

    __slots__ = (
        "dask",
        "deadline",
        "executor",
        "fence",
        "fenced",
        "handles",
        "interrupt",
        "journal",
        "limiter",
        "local",
        "prove_before_start",
        "start_refused",
    )

    def __init__(self, executor: Any, journal: Any, handles: list[Call[Any]]) -> None:
        self.executor = executor
        self.journal = journal
        self.handles = frozenset(id(h) for h in handles)
        self.fence = threading.Lock()
        self.fenced = False
        # The batch deadline (time.monotonic()); no call may begin at or after it,
        # even if the gather thread has not woken up yet to raise the fence.
        self.deadline: float | None = None
        # Set once a task of this batch came back to this process through
        # pickling and ran here (an in-process Dask cluster): its starts are
        # observable.
        self.local = False
        self.interrupt = False  # interrupt calls in other processes at the deadline
        # On a Dask executor with a deadline: the start announcements (remote.py).
        self.dask: DaskStarts | None = None
        # The batch's limiter, if any: a batch nested in one of its calls runs
        # under the slot that call holds (taut.gather.drive).
        self.limiter: Any = None
        # Why a call of this batch was refused its start by the journal (the
        # run was taken over while this runner stood still): the batch halts
        # with it (Run.outcome_from).
        self.start_refused: Exception | None = None
        # The journal's check before a call begins (taut's journals only),
        # looked up once here, not at every call's start.
        self.prove_before_start: Callable[[], None] | None = getattr(
            journal, "_prove_lease_before_start", None
        )

    def prove_lease(self) -> bool:
        """Whether the batch's journal still lets a call begin: a taut
        journal whose lease is overdue proves it first (one renewal). A
        refusal fences the batch; the error is kept for the gather to raise."""
        prove = self.prove_before_start
        if prove is None:
            return True  # no journal, or one that is not taut's
        try:
            prove()
        except Exception as exc:
            with self.fence:
                if self.start_refused is None:
                    self.start_refused = exc
                self.fenced = True
            return False
        return True

    def raise_fence(self) -> None:
        with self.fence:
            self.fenced = True


# --------------------------------------------------------------------------
# Tasks


class Submission(Protocol):
    """One call of a batch as a custom ``submit`` hook of
    :meth:`taut.Scheduler.run_batch` sees it."""

    @property
    def index(self) -> int:
        """The call's position in the batch."""
        ...

    @property
    def call_id(self) -> str: ...

    def runnable(self) -> Callable[[], object]:
        """What to hand to the executor (callable without arguments, picklable)."""
        ...

    def on_start(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` on the worker when the call really starts (never for a
        call stopped by the fence)."""
        ...


_task_counter = itertools.count()
_TASKS: dict[str, Task] = {}
_TASKS_LOCK = fork_safe_lock()

# How often this process has forked: a forked child holds a copy of every
# task, and may run one there without pickling it (Task.starts_seen_here).
_forks = 0


def _count_fork() -> None:
    global _forks
    _forks += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_parent=_count_fork)


def _run_coroutine(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """``asyncio.run(fn(*args, **kwargs))``, on this thread unless a loop runs
    here already: a sync gather nested in an async call, run inline on that
    call's thread, whose loop waits for it. asyncio.run cannot run inside a
    running loop, so the coroutine gets a thread and a loop of its own (in a
    copy of this context), and this thread waits for it."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(fn(*args, **kwargs))
    context = contextvars.copy_context()
    ended: list[Any] = []

    def run_here() -> None:
        try:
            ended.append((True, context.run(lambda: asyncio.run(fn(*args, **kwargs)))))
        except BaseException as exc:  # handed to the waiting thread as it is
            ended.append((False, exc))

    thread = threading.Thread(target=run_here, name="taut-nested-coroutine", daemon=True)
    thread.start()
    while thread.is_alive():
        # In slices: a deadline scope interrupting this thread (interrupt=True)
        # lands between two; the coroutine's thread is then left to finish.
        thread.join(_JOIN_SLICE_S)
    ok, value = ended.pop()
    if ok:
        return value
    try:
        raise value
    finally:
        del value  # the cycle through the exception's traceback


# How often a thread waiting for a nested coroutine's thread looks up.
_JOIN_SLICE_S = 0.01


class Task:
    """One call of one batch, as submitted to an executor.

    Only a token travels to the executor (see :class:`TaskRef`): in this
    process the token finds this object, its fence and its live arguments (an
    in-process Dask cluster pickles tasks too, and a closure over a
    ``threading.Event`` must stay the same event); in another process the
    pickled payload is used and no fence is possible.
    """

    __slots__ = (
        "_on_start",
        "batch",
        "call_id",
        "ended",
        "finished_at",
        "forks_at_creation",
        "handle",
        "index",
        "payload",
        "remote_start",
        "sent_away",
        "started_at",
        "token",
        "withdrawn",
    )

    def __init__(self, batch: Batch, handle: Call[Any], entry: Entry) -> None:
        self.batch = batch
        self.handle = handle
        # The entry's two fields it needs, not the entry: the entry holds the
        # task, and that cycle kept a finished batch (its outcomes, a failed
        # call's frames through its traceback) alive until the collector ran.
        self.index = entry.index
        self.call_id = entry.call_id
        self.token = f"taut-call-{os.getpid()}-{next(_task_counter)}"
        self.started_at: float | None = None
        self.finished_at: float | None = None
        # What the call returned or raised, when it ran in this process: set
        # before finished_at (see ended_here).
        self.ended: Returned | Raised | None = None
        self.payload: bytes | str | None = None
        self._on_start: Callable[[], None] | None = None
        # The Dask event this call sets before it begins in another process.
        self.remote_start: str | None = None
        self.withdrawn = False  # see withdraw()
        # Pickled at least once (TaskRef.__reduce__): it may run in another
        # process, where its start is not seen here.
        self.sent_away = False
        self.forks_at_creation = _forks

    def starts_seen_here(self) -> bool:
        """Whether this call can begin only in this process, where
        :meth:`begin` records its start: it was never pickled, and this
        process has not forked since it was made (pickling and a fork are
        the only ways to another process). Then, whatever the executor (a
        wrapper around a thread pool, say), a call with no start recorded
        has not begun, and once the fence is up it never will."""
        return not self.sent_away and self.forks_at_creation == _forks

    # -- the Submission view ------------------------------------------------

    def runnable(self) -> TaskRef:
        return self.ref()

    def on_start(self, hook: Callable[[], None]) -> None:
        self._on_start = hook

    # -- running --------------------------------------------------------------

    def begin(self) -> bool:
        """Pass the fence and mark the start, atomically; False if fenced or
        the batch deadline has passed (which raises the fence for the rest),
        or if the journal's lease is gone (:meth:`Batch.prove_lease`)."""
        if not self.batch.fenced and not self.batch.prove_lease():
            return False
        with self.batch.fence:
            if self.batch.fenced or self.withdrawn:
                return False
            now = time.monotonic()
            deadline = self.batch.deadline
            if deadline is not None and now >= deadline:
                self.batch.fenced = True
                return False
            self.started_at = now
        if self._on_start is not None:
            self._on_start()
        return True

    def withdraw(self) -> bool:
        """Its executor refused this call, which may be submitted again as a
        new task: this one never begins from now on. False if it already
        began (an executor that raised yet kept the call)."""
        with self.batch.fence:
            if self.started_at is not None:
                return False
            self.withdrawn = True
            return True

    def run(self) -> Captured:
        if not self.begin():
            return FENCED
        token = _frames.set((*_frames.get(), self._frame(threading.get_ident())))
        try:
            deadline = self.batch.deadline
            if deadline is None:
                returned = self._call()
            else:
                # As on a remote worker (taut.gather.remote): the call sees the
                # batch's deadline through taut.remaining(), and scopes and
                # gathers nested in it end by it. A scope that never raises: the
                # batch decides what a call that outlives it counts as. Relative,
                # so that a scope clock (taut.testing) measures it as it does.
                with move_on_after(deadline - time.monotonic(), self.call_id):
                    returned = self._call()
            self.ended = returned
            return returned
        except Exception as exc:
            self.ended = Raised(exc)
            return self.ended
        except BaseException as exc:  # cancellation and the like: propagate via the gather
            return Escaped(exc)
        finally:
            self.finished_at = time.monotonic()
            _frames.reset(token)
            # A failed call's exception, kept as its outcome, has this frame in
            # its traceback, and `self` reaches that outcome: a cycle that kept
            # the call's frames (their locals) alive until the collector ran.
            # The standard library's worker drops its work item the same way.
            del self

    def ended_here(self) -> Returned | Raised | None:
        """What the call returned or raised, once it has ended in this
        process, even before its executor's future says so: an executor may
        hand a result back well after the call ended (an in-process Dask
        cluster, a wrapper that delivers later)."""
        if self.finished_at is None:  # read first: ended is set before it
            return None
        return self.ended

    def _frame(self, thread: int | None) -> Frame:
        limiter = self.batch.limiter
        held = Slots(threading.BoundedSemaphore(1), None) if limiter is not None else None
        return Frame(self.batch, self.handle, thread, held)

    def _call(self) -> Returned:
        h = self.handle
        fn, args, kwargs, is_coroutine = h._fn, h._args, h._kwargs, h._is_coroutine
        del self, h  # they reach the outcome: no cycle through its traceback (see run)
        if is_coroutine:
            # A coroutine gathered by the sync gather runs on its own loop on
            # the worker thread.
            return Returned(_run_coroutine(fn, args, kwargs))
        return Returned(not_a_coroutine(fn(*args, **kwargs), fn))

    async def arun(self) -> Captured:
        if not self.begin():
            return FENCED
        token = _frames.set((*_frames.get(), self._frame(None)))
        try:
            h = self.handle
            fn, args, kwargs = h._fn, h._args, h._kwargs
            del h  # no cycle through a failed call's traceback (see run)
            return Returned(await fn(*args, **kwargs))
        except Exception as exc:
            return Raised(exc)
        except BaseException as exc:
            return Escaped(exc)
        finally:
            self.finished_at = time.monotonic()
            _frames.reset(token)
            del self  # see run

    # -- the registry ---------------------------------------------------------

    def ref(self) -> TaskRef:
        with _TASKS_LOCK:
            _TASKS[self.token] = self
        return TaskRef(self.token, self)

    def forget(self) -> None:
        with _TASKS_LOCK:
            _TASKS.pop(self.token, None)
        # Settled (or gone cold): the outcome holds what it returned, and an
        # executor that keeps its ref a while must not keep that alive too.
        self.ended = None

    def elapsed(self, now: float | None = None) -> float:
        if self.started_at is None:
            return 0.0
        end = self.finished_at if self.finished_at is not None else now
        return max(0.0, (end if end is not None else time.monotonic()) - self.started_at)


# --------------------------------------------------------------------------
# Pickling and Dask hooks


def _restore_ref(
    token: str, pid: int, payload: bytes | str | None, terms: Terms | None = None
) -> TaskRef:
    with _TASKS_LOCK:
        task = _TASKS.get(token) if pid == os.getpid() else None
    # Not yet "local": a Dask scheduler in this process unpickles tasks that its
    # workers in other processes run. Only running here makes starts observable.
    return TaskRef(token, task, payload, terms, restored=True)


def _dumps_payload(handle: Call[Any]) -> bytes | str:
    """The pickled call, or why it cannot be pickled: the call cannot travel,
    and run_remote fails it with that reason where it arrives."""
    try:
        return dumps((handle._fn, handle._args, handle._kwargs))
    except PICKLING_FAILURES as exc:
        return f"{describe(handle._fn, limit=100)} with its arguments: {exc!r}"


def _terms_for(task: Task) -> Terms | None:
    batch = task.batch
    if batch.deadline is None and not batch.interrupt:
        return None
    dask = batch.dask
    start = dask.start_name(task.token) if dask is not None else None
    task.remote_start = start
    return Terms(
        batch.deadline,
        dask.fence if dask is not None else None,
        start,
        batch.interrupt,
        f"call {task.call_id!r} (gather deadline)",
    )


class TaskRef:
    """What an executor receives: callable, picklable, cheap to tokenize."""

    __slots__ = ("_payload", "_payload_done", "_restored", "_terms", "task", "token")

    def __init__(
        self,
        token: str,
        task: Task | None,
        payload: bytes | str | None = None,
        terms: Terms | None = None,
        *,
        restored: bool = False,
    ) -> None:
        self.token = token
        self.task = task
        self._payload = payload
        self._payload_done = payload is not None
        self._terms = terms
        self._restored = restored

    def __call__(self) -> Captured:
        task = self.task
        if task is not None:
            if self._restored:
                # Came back through pickling and runs here (an in-process Dask
                # cluster): this batch's starts are observable.
                task.batch.local = True
            # This frame outlives the call in a failed call's traceback (as the
            # caller of Task.run): it must not reach the outcome (see Task.run).
            del self
            try:
                return task.run()
            finally:
                del task
        return cast(Captured, run_remote(self._payload, self._terms))

    def __reduce__(self) -> tuple[Any, ...]:
        task = self.task
        if task is not None:
            task.sent_away = True  # before the remaining time is measured (Terms)
            if not self._payload_done:
                self._payload = _dumps_payload(task.handle)
                self._payload_done = True
            if self._terms is None:
                self._terms = _terms_for(task)
        # Terms re-measure the remaining time each time they are pickled.
        return (_restore_ref, (self.token, os.getpid(), self._payload, self._terms))

    @property
    def __name__(self) -> str:
        # Dask names task keys after this.
        task = self.task
        return "taut-call" if task is None else f"taut-call-{task.call_id}"

    def __dask_tokenize__(self) -> str:
        # Dask deduplicates equal tasks by token; every call is distinct.
        return self.token
