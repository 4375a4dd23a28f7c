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
  instead, so one worker cannot deadlock.
* **Journal slots are reserved in input order** (one ``reserve`` call) before
  any call starts. Terminal records replay without running; pending ones run.
* **Outcomes come back in input order.** Ordinary exceptions become ``error``
  outcomes. ``BaseException``\\ s that are not ``Exception``\\ s (cancellation,
  ``KeyboardInterrupt``, ``SystemExit``) propagate out of the gather, after the
  rest of the batch has been fenced and cancelled, and are never cached.
* **At the deadline** calls that finished keep their outcome, calls that
  started become ``timeout`` (cancelled where the executor can: a taut
  executor abandons the worker, so a replacement may start, and with
  ``interrupt=True`` also raises :class:`TimeoutError` in it; a remote executor's
  future is cancelled), calls that never started become ``not_started``: they
  are fenced first (a worker that picks one up later returns without running
  it), then their futures are cancelled.
* **Caching.** ``ok``, ``error`` and ``timeout`` outcomes are cached on the
  handle: a repeated await or gather reuses them without running again.
  ``not_started`` and ``cancelled`` outcomes and propagating cancellations are
  not cached: the handle can be run again later.

Default call ids are ``"module.qualname#index"``: the function's dotted name
and the handle's position in the gather that first runs it. That is what makes
a rerun of the same program match its journal: the same code gathers the same
functions in the same order, independent of object identities, process ids or
timing. A handle's id is fixed the first time it is gathered (or awaited, which
uses index 0); pass ``call_id=`` for ids that must survive reordering.

With an executor whose workers live in other processes (e.g. Dask), the gather
cannot see when a call starts; it then treats every submitted, unfinished call
as started at the deadline (``timeout``, so a journaled call is not run twice),
and cancels its remote future. In-process executors (thread pools, an
in-process Dask cluster) report starts exactly.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextvars
import functools
import inspect
import itertools
import math
import os
import pickle
import threading
import time
import weakref
from collections import deque
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Callable, Generic, Literal, Protocol, TypeVar, cast

__all__ = [
    "Call",
    "GatherRejected",
    "Outcome",
    "OutcomeStatus",
    "Scheduler",
    "agather",
    "call",
    "gather",
]

T = TypeVar("T")

STATUSES = ("ok", "error", "timeout", "not_started", "cancelled")
_CACHED_STATUSES = frozenset({"ok", "error", "timeout"})

# A single wait never exceeds this many seconds: a huge remaining time must not
# reach threading's OS wait (OverflowError: timestamp out of range for time_t).
_WAIT_SLICE = 3600.0


class GatherRejected(ValueError):
    """A gather (or await) refused its handles before anything ran: duplicate,
    foreign, nested or already running handles, or a journal shared with the
    enclosing gather."""


OutcomeStatus = Literal["ok", "error", "timeout", "not_started", "cancelled"]
"""How a gathered call ended: the values of :attr:`Outcome.status`."""


@dataclass(frozen=True)
class Outcome:
    """The result of one gathered call.

    ``status`` is ``'ok'`` (``value`` holds the return value), ``'error'``
    (``error`` holds the exception), ``'timeout'`` (the call started but did not
    finish by the deadline; ``error`` is a :class:`TimeoutError`),
    ``'not_started'`` (the deadline came first; the call never ran) or
    ``'cancelled'`` (the executor cancelled the call's future, e.g. on
    shutdown). ``started`` says whether the call's body began to run,
    ``elapsed_s`` how long it ran (up to the deadline for a timeout).
    ``replayed`` marks an outcome read back from a journal instead of run.
    """

    call_id: str
    status: OutcomeStatus
    value: Any = None
    error: BaseException | None = None
    started: bool = False
    elapsed_s: float = 0.0
    replayed: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def unwrap(self) -> Any:
        """The value of an ``ok`` outcome; otherwise raise its error (a
        :class:`TimeoutError` for ``timeout``, :class:`concurrent.futures.CancelledError`
        for ``not_started``/``cancelled``)."""
        if self.status == "ok":
            return self.value
        if self.error is not None:
            raise self.error
        raise cf.CancelledError(f"call {self.call_id!r} {self.status.replace('_', ' ')}")


def _timeout_error(call_id: str, timeout: float | None, elapsed: float) -> BaseException:
    label = f"call {call_id!r} (gather deadline)"
    try:
        from taut.deadline import DeadlineExpired  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # built without the deadline layer
        after = f" after {float(timeout)}s" if timeout is not None else ""
        return TimeoutError(f"deadline expired{after}: {label}")
    return cast(BaseException, DeadlineExpired(label, timeout, elapsed))


def _interrupt_type() -> type[BaseException]:
    try:
        from taut.deadline import DeadlineExpired  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return TimeoutError
    return cast("type[BaseException]", DeadlineExpired)


# --------------------------------------------------------------------------
# Handles


_COLD, _RUNNING, _DONE = 0, 1, 2
_STATE_LOCK = threading.Lock()


def _default_id(fn: Callable[..., Any]) -> str:
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None) or type(target).__module__
    return f"{module}.{qualname}"


def _contains_handle(value: Any) -> bool:
    if isinstance(value, Call):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(isinstance(v, Call) for v in value)
    if isinstance(value, Mapping):
        return any(isinstance(v, Call) for v in value.values())
    return False


def _nested_argument(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
    for i, a in enumerate(args):
        if _contains_handle(a):
            return f"positional argument {i}"
    for k, v in kwargs.items():
        if _contains_handle(v):
            return f"keyword argument {k!r}"
    return None


class Call(Generic[T]):
    """A cold handle for ``fn(*args, **kwargs)``: nothing runs until it is
    awaited (:meth:`result`, ``await handle``) or gathered.

    Made by :func:`taut.call` or :meth:`Scheduler.call`, never directly.
    """

    __slots__ = (
        "__weakref__",
        "_args",
        "_call_id",
        "_event",
        "_explicit_id",
        "_fn",
        "_is_coroutine",
        "_kwargs",
        "_outcome",
        "_owner",
        "_pid",
        "_scheduler",
        "_state",
    )

    def __init__(
        self,
        scheduler: Scheduler,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        call_id: str | None,
    ) -> None:
        self._scheduler = scheduler
        self._fn = fn
        self._args = args
        self._kwargs = kwargs
        self._explicit_id = call_id is not None
        self._call_id = call_id
        self._is_coroutine = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - async __call__ objects
        )
        self._pid = os.getpid()
        self._state = _COLD
        self._outcome: Outcome | None = None
        self._owner: object | None = None
        self._event: threading.Event | None = None

    # -- public surface ---------------------------------------------------

    @property
    def call_id(self) -> str | None:
        """The explicit id, or the default id once the handle has run
        (``None`` before: the default depends on the gather position)."""
        return self._call_id

    @property
    def fn(self) -> Callable[..., Any]:
        return self._fn

    @property
    def is_coroutine(self) -> bool:
        """True if ``fn`` is a coroutine function (awaited on the event loop)."""
        return self._is_coroutine

    @property
    def scheduler(self) -> Scheduler:
        return self._scheduler

    def done(self) -> bool:
        """True once a cached outcome exists (``ok``, ``error`` or ``timeout``)."""
        return self._state == _DONE

    def outcome(self) -> Outcome | None:
        """The cached outcome, or ``None`` if the handle has none yet."""
        return self._outcome if self._state == _DONE else None

    def result(self) -> T:
        """Run the call on this thread (once) and return its value.

        A cached outcome is reused: the value is returned again, the error
        raised again. No timeout and no parallelism limit apply - only a gather
        applies those. A coroutine function is run with :func:`asyncio.run`; use
        ``await handle`` inside an event loop. If another thread is running the
        handle, this waits for it.
        """
        return cast(T, self._scheduler._await_sync(self))

    def __await__(self) -> Generator[Any, None, T]:
        return self._scheduler._await_async(self).__await__()

    def __repr__(self) -> str:
        state = {_COLD: "cold", _RUNNING: "running", _DONE: "done"}[self._state]
        name = self._call_id or _default_id(self._fn)
        return f"<taut.Call {name} {state}>"

    # -- state transitions (all under _STATE_LOCK) ------------------------

    def _fix_id(self, index: int) -> str:
        if self._call_id is None:
            self._call_id = f"{_default_id(self._fn)}#{index}"
        return self._call_id

    def _release(self, outcome: Outcome | None) -> None:
        """Leave the running state: cache a terminal outcome, or go cold again."""
        with _STATE_LOCK:
            if outcome is not None and outcome.status in _CACHED_STATUSES:
                self._state = _DONE
                self._outcome = outcome
            else:
                self._state = _COLD
            self._owner = None
            event, self._event = self._event, None
        if event is not None:
            event.set()


# --------------------------------------------------------------------------
# What runs on a worker: a picklable task looked up in a process-local table


_frames: contextvars.ContextVar[tuple[_Frame, ...]] = contextvars.ContextVar(
    "taut_gather_frames", default=()
)


@dataclass(frozen=True)
class _Frame:
    """One enclosing call: the batch running it, and the thread it runs on."""

    batch: _Batch
    handle: Call[Any]
    thread: int | None  # None when it runs as an asyncio task


_task_counter = itertools.count()
_TASKS: dict[str, _Task] = {}
_TASKS_LOCK = threading.Lock()


class _Batch:
    """Shared state of one gather: the fence that stops unstarted calls."""

    __slots__ = ("deadline", "executor", "fence", "fenced", "handles", "journal", "local")

    def __init__(self, executor: Any, journal: Any, handles: Sequence[Call[Any]]) -> None:
        self.executor = executor
        self.journal = journal
        self.handles = frozenset(id(h) for h in handles)
        self.fence = threading.Lock()
        self.fenced = False
        # The batch deadline (time.monotonic()); no call may begin at or after it,
        # even if the gather thread has not woken up yet to raise the fence.
        self.deadline: float | None = None
        # Set once a task of this batch came back to this process through
        # pickling (an in-process Dask cluster): its starts are observable.
        self.local = False


_FENCED = ("fenced",)


class _Task:
    """One call of one batch, as submitted to an executor.

    Only a token travels to the executor (see :class:`_TaskRef`): in this
    process the token finds this object, its fence and its live arguments (an
    in-process Dask cluster pickles tasks too, and a closure over a
    ``threading.Event`` must stay the same event); in another process the
    pickled payload is used and no fence is possible.
    """

    __slots__ = (
        "batch",
        "entry",
        "finished_at",
        "handle",
        "on_start",
        "payload",
        "started_at",
        "token",
    )

    def __init__(self, batch: _Batch, handle: Call[Any], entry: _Entry) -> None:
        self.batch = batch
        self.handle = handle
        self.entry = entry
        self.token = f"taut-call-{os.getpid()}-{next(_task_counter)}"
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.payload: bytes | None = None
        self.on_start: Callable[[], None] | None = None

    def begin(self) -> bool:
        """Pass the fence and mark the start, atomically; False if fenced or
        the batch deadline has passed (which raises the fence for the rest)."""
        with self.batch.fence:
            if self.batch.fenced:
                return False
            now = time.monotonic()
            deadline = self.batch.deadline
            if deadline is not None and now >= deadline:
                self.batch.fenced = True
                return False
            self.started_at = now
        if self.on_start is not None:
            self.on_start()
        return True

    def run(self) -> tuple[Any, ...]:
        if not self.begin():
            return _FENCED
        frame = _Frame(self.batch, self.handle, threading.get_ident())
        token = _frames.set((*_frames.get(), frame))
        try:
            h = self.handle
            if h._is_coroutine:
                # A coroutine gathered by the sync gather runs on its own loop
                # on the worker thread.
                result = asyncio.run(h._fn(*h._args, **h._kwargs))
            else:
                result = h._fn(*h._args, **h._kwargs)
            return ("ok", result)
        except Exception as exc:
            return ("error", exc)
        except BaseException as exc:  # cancellation and the like: propagate via the gather
            return ("fatal", exc)
        finally:
            self.finished_at = time.monotonic()
            _frames.reset(token)

    async def arun(self) -> tuple[Any, ...]:
        if not self.begin():
            return _FENCED
        frame = _Frame(self.batch, self.handle, None)
        token = _frames.set((*_frames.get(), frame))
        try:
            h = self.handle
            return ("ok", await h._fn(*h._args, **h._kwargs))
        except Exception as exc:
            return ("error", exc)
        except BaseException as exc:
            return ("fatal", exc)
        finally:
            self.finished_at = time.monotonic()
            _frames.reset(token)

    def ref(self) -> _TaskRef:
        with _TASKS_LOCK:
            _TASKS[self.token] = self
        return _TaskRef(self.token, self)

    def forget(self) -> None:
        with _TASKS_LOCK:
            _TASKS.pop(self.token, None)

    def elapsed(self, now: float | None = None) -> float:
        if self.started_at is None:
            return 0.0
        end = self.finished_at if self.finished_at is not None else now
        return max(0.0, (end if end is not None else time.monotonic()) - self.started_at)


def _run_remote(payload: bytes | None) -> tuple[Any, ...]:
    if payload is None:
        raise RuntimeError(
            "this taut call ran in another process, but its function or arguments "
            "could not be pickled; use picklable (module-level) functions with a "
            "multi-process executor"
        )
    fn, args, kwargs = pickle.loads(payload)
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as exc:
        return ("error", exc)


def _restore_ref(token: str, pid: int, payload: bytes | None) -> _TaskRef:
    with _TASKS_LOCK:
        task = _TASKS.get(token) if pid == os.getpid() else None
    if task is not None:
        task.batch.local = True
    return _TaskRef(token, task, payload)


def _dumps_payload(handle: Call[Any]) -> bytes | None:
    data = (handle._fn, handle._args, handle._kwargs)
    try:
        return pickle.dumps(data)
    except Exception:
        pass
    try:
        import cloudpickle  # type: ignore[import-not-found,import-untyped,unused-ignore]

        return cast(bytes, cloudpickle.dumps(data))
    except Exception:
        return None


class _TaskRef:
    """What an executor receives: callable, picklable, cheap to tokenize."""

    __slots__ = ("_payload", "_payload_done", "task", "token")

    def __init__(self, token: str, task: _Task | None, payload: bytes | None = None) -> None:
        self.token = token
        self.task = task
        self._payload = payload
        self._payload_done = payload is not None

    def __call__(self) -> tuple[Any, ...]:
        if self.task is not None:
            return self.task.run()
        return _run_remote(self._payload)

    def __reduce__(self) -> tuple[Any, ...]:
        if not self._payload_done and self.task is not None:
            self._payload = _dumps_payload(self.task.handle)
            self._payload_done = True
        return (_restore_ref, (self.token, os.getpid(), self._payload))

    @property
    def __name__(self) -> str:
        # Dask names task keys after this.
        task = self.task
        return "taut-call" if task is None else f"taut-call-{task.entry.call_id}"

    def __dask_tokenize__(self) -> str:
        # Dask deduplicates equal tasks by token; every call is distinct.
        return self.token


# --------------------------------------------------------------------------
# Executors: adapters for what only some executors can do


def _default_executor() -> cf.Executor:
    from taut.executor import default_executor

    return default_executor()


def _in_worker_of(executor: Any) -> bool:
    """True if this thread is a worker of ``executor`` (so waiting for its
    workers could wait for ourselves)."""
    probe = getattr(executor, "in_worker", None)
    if callable(probe):
        try:
            if probe():
                return True
        except Exception:
            pass
    here = threading.get_ident()
    return any(f.batch.executor is executor and f.thread == here for f in _frames.get())


def _stop_started(executor: Any, future: cf.Future[Any], interrupt: bool) -> None:
    """Cut a started call loose at the deadline, as far as the executor allows."""
    abandon = getattr(executor, "abandon", None)
    if callable(abandon):
        abandon(future)
        if interrupt:
            stopper = getattr(executor, "interrupt", None)
            if callable(stopper):
                stopper(future, _interrupt_type())
    else:
        # Remote executors (Dask) cancel the remote task through their future;
        # a stdlib thread cannot be stopped and is left to finish unobserved.
        future.cancel()


def _check_timeout(timeout: Any) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(
            f"timeout must be a number of seconds or None, got {timeout!r} "
            f"({type(timeout).__name__})"
        )
    value = float(timeout)
    if math.isnan(value) or value < 0:
        raise ValueError(f"timeout must be a non-negative number of seconds, got {timeout!r}")
    return None if math.isinf(value) else value


def _check_max_parallel(max_parallel: Any) -> int | None:
    if max_parallel is None:
        return None
    if isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1:
        raise ValueError(
            f"max_parallel must be an int >= 1 or None, got {max_parallel!r} "
            f"({type(max_parallel).__name__})"
        )
    return max_parallel


# --------------------------------------------------------------------------
# Journal positions

# The journal's cursor is per journal object and starts at 0 (COMMON.md); a
# journal that exposes it as ``cursor`` is asked, otherwise the slots reserved
# through gathers are counted here.
_cursors: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_cursors_by_id: dict[int, int] = {}


def _journal_cursor(journal: Any) -> int:
    cursor = getattr(journal, "cursor", None)
    value = cursor() if callable(cursor) else cursor
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return _cursors.get(journal, 0)
    except TypeError:  # not weak-referenceable
        return _cursors_by_id.get(id(journal), 0)


def _advance_cursor(journal: Any, base: int, count: int) -> None:
    try:
        _cursors[journal] = base + count
    except TypeError:
        _cursors_by_id[id(journal)] = base + count


# --------------------------------------------------------------------------
# One gather


class _JournalLike(Protocol):
    def reserve(self, call_ids: Sequence[str]) -> list[Any]: ...

    def complete(
        self,
        position: int,
        call_id: str,
        status: str,
        value: object,
        error: BaseException | None,
    ) -> None: ...


Submit = Callable[[Any, "_Task"], "cf.Future[Any]"]


def _plain_submit(executor: Any, task: _Task) -> cf.Future[Any]:
    return cast("cf.Future[Any]", executor.submit(task.ref()))


@dataclass
class _Entry:
    index: int
    handle: Call[Any]
    call_id: str
    position: int | None = None  # journal slot
    outcome: Outcome | None = None
    task: _Task | None = None
    future: cf.Future[Any] | None = None
    afuture: asyncio.Future[Any] | None = None
    claimed: bool = False


class _Run:
    """The lifecycle of one gather: validate -> claim -> reserve -> run -> settle."""

    def __init__(
        self,
        scheduler: Scheduler,
        handles: Iterable[Any],
        timeout: Any,
        max_parallel: Any,
        executor: Any,
        journal: Any,
        interrupt: bool,
        submit: Submit | None,
        what: str = "gather",
    ) -> None:
        self.timeout = _check_timeout(timeout)
        self.max_parallel = _check_max_parallel(max_parallel)
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
        self.batch = _Batch(self.executor, self.journal, self.handles)
        self.entries = [
            _Entry(i, h, h._call_id or f"{_default_id(h._fn)}#{i}")
            for i, h in enumerate(self.handles)
        ]
        self.deadline: float | None = None

    # -- validation ------------------------------------------------------

    def _validate(self) -> None:
        seen: dict[int, int] = {}
        ids: dict[str, int] = {}
        pid = os.getpid()
        enclosing = _frames.get()
        enclosing_handles = {id(f.handle) for f in enclosing}
        for i, h in enumerate(self.handles):
            where = f"handles[{i}]"
            if not isinstance(h, Call):
                raise TypeError(
                    f"{where} is not a taut call handle, got {h!r} ({type(h).__name__}); "
                    "make one with taut.call(fn, *args)"
                )
            name = h._call_id or _default_id(h._fn)
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
            nested = _nested_argument(h._args, h._kwargs)
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
        with _STATE_LOCK:
            for e in self.entries:
                h = e.handle
                if h._state == _RUNNING:
                    raise GatherRejected(
                        f"handles[{e.index}] ({e.call_id}) is already running in another "
                        "await or gather; gather it after it finishes"
                    )
            for e in self.entries:
                h = e.handle
                h._fix_id(e.index)
                e.call_id = cast(str, h._call_id)
                if h._state == _DONE:
                    cached = cast(Outcome, h._outcome)
                    e.outcome = (
                        cached
                        if cached.call_id == e.call_id
                        else replace(cached, call_id=e.call_id)
                    )
                else:
                    h._state = _RUNNING
                    h._owner = self.batch
                    h._event = threading.Event()
                    e.claimed = True

    def reserve(self) -> None:
        if self.journal is None:
            return
        base = _journal_cursor(self.journal)
        records = self.journal.reserve([e.call_id for e in self.entries])
        if len(records) != len(self.entries):
            raise RuntimeError(
                f"journal.reserve returned {len(records)} records for {len(self.entries)} call ids"
            )
        _advance_cursor(self.journal, base, len(self.entries))
        for e, rec in zip(self.entries, records):
            e.position = rec.position if rec is not None else base + e.index
        for e, rec in zip(self.entries, records):
            if rec is None:
                if e.outcome is not None:
                    self.journal_write(e, e.outcome)
                continue
            if e.outcome is not None:
                continue  # a cached outcome wins over the journal's copy
            e.outcome = Outcome(
                e.call_id,
                rec.status,
                rec.value,
                rec.error,
                started=True,
                elapsed_s=0.0,
                replayed=True,
            )
            if e.claimed:
                e.claimed = False
                e.handle._release(e.outcome)

    def journal_write(self, e: _Entry, outcome: Outcome) -> None:
        if self.journal is None or outcome.status not in _CACHED_STATUSES:
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

    # -- settling --------------------------------------------------------

    def finish(self, e: _Entry, outcome: Outcome, *, journal: bool = True) -> None:
        e.outcome = outcome
        if e.task is not None:
            e.task.forget()
        if e.claimed:
            e.claimed = False
            e.handle._release(outcome)
        if journal:
            self.journal_write(e, outcome)

    def outcome_from(self, e: _Entry, captured: Any, exc: BaseException | None) -> Outcome:
        task = cast(_Task, e.task)
        if exc is not None:
            if not isinstance(exc, Exception):
                raise exc
            # The executor itself failed around the call (a broken pool, a
            # lost Dask worker, an unpicklable argument).
            return Outcome(
                e.call_id, "error", None, exc, task.started_at is not None, task.elapsed()
            )
        if captured is _FENCED or captured == _FENCED:
            return Outcome(e.call_id, "not_started")
        kind = captured[0]
        started = True
        if kind == "ok":
            return Outcome(e.call_id, "ok", captured[1], None, started, task.elapsed())
        if kind == "error":
            return Outcome(e.call_id, "error", None, captured[1], started, task.elapsed())
        raise cast(BaseException, captured[1])  # 'fatal': never cached

    def settle_future(self, e: _Entry, future: cf.Future[Any]) -> None:
        if future.cancelled():
            task = cast(_Task, e.task)
            self.finish(
                e,
                Outcome(e.call_id, "cancelled", None, None, task.started_at is not None),
            )
            return
        exc = future.exception()
        captured = None if exc is not None else future.result()
        self.finish(e, self.outcome_from(e, captured, exc))

    def fence(self) -> None:
        with self.batch.fence:
            self.batch.fenced = True

    def expire(self, e: _Entry, now: float) -> None:
        """Settle an unfinished entry at the deadline."""
        task = e.task
        if task is None:
            self.finish(e, Outcome(e.call_id, "not_started"))
            return
        future = e.future
        if future is not None and future.done() and not future.cancelled():
            self.settle_future(e, future)
            return
        started = task.started_at is not None
        observable = (
            (
                e.afuture is not None and future is None  # an asyncio task on this loop
            )
            or isinstance(self.executor, cf.ThreadPoolExecutor)
            or self.batch.local
        )
        if not started and not observable:
            started = True  # cannot see starts in other processes: assume the worst
        if started:
            if future is not None:
                _stop_started(self.executor, future, self.interrupt)
            elif e.afuture is not None:
                e.afuture.cancel()
            elapsed = max(0.0, now - task.started_at) if task.started_at is not None else 0.0
            self.finish(
                e,
                Outcome(
                    e.call_id,
                    "timeout",
                    None,
                    _timeout_error(e.call_id, self.timeout, elapsed),
                    True,
                    elapsed,
                ),
            )
        else:
            if future is not None:
                future.cancel()
            if e.afuture is not None:
                e.afuture.cancel()
            self.finish(e, Outcome(e.call_id, "not_started"))

    def abort(self, in_flight: Iterable[_Entry]) -> None:
        """A BaseException is propagating: fence, cancel, keep finished work."""
        self.fence()
        for e in in_flight:
            f = e.future
            if f is not None and f.done() and not f.cancelled() and f.exception() is None:
                captured = f.result()
                if isinstance(captured, tuple) and captured and captured[0] in ("ok", "error"):
                    try:
                        self.finish(e, self.outcome_from(e, captured, None), journal=False)
                    except BaseException:
                        pass
                    continue
            if f is not None:
                if e.task is not None and e.task.started_at is not None:
                    _stop_started(self.executor, f, self.interrupt)
                else:
                    f.cancel()
            if e.afuture is not None and not e.afuture.done():
                e.afuture.cancel()
            if e.task is not None:
                e.task.forget()
        self.release_all()

    def results(self) -> list[Outcome]:
        return [cast(Outcome, e.outcome) for e in self.entries]

    # -- the sync run ----------------------------------------------------

    def _begin(self) -> list[_Entry]:
        """Claim the handles, reserve journal slots, start the clock: the
        calls still to run (replayed ones already have their outcome)."""
        self.claim()
        try:
            self.reserve()
        except BaseException:
            self.release_all()
            raise
        if self.timeout is not None:
            self.deadline = time.monotonic() + self.timeout
            self.batch.deadline = self.deadline
        return [e for e in self.entries if e.outcome is None]

    def run_sync(self) -> list[Outcome]:
        todo = self._begin()
        if not todo:
            return self.results()
        if _in_worker_of(self.executor):
            self._run_inline(todo)
        else:
            self._run_pooled(todo)
        return self.results()

    def _new_task(self, e: _Entry) -> _Task:
        e.task = _Task(self.batch, e.handle, e)
        return e.task

    def _run_inline(self, todo: list[_Entry]) -> None:
        """Run on this thread, in order, checking the deadline between calls."""
        for pos, e in enumerate(todo):
            if self.deadline is not None and time.monotonic() >= self.deadline:
                self.fence()
                for rest in todo[pos:]:
                    self.finish(rest, Outcome(rest.call_id, "not_started"))
                return
            task = self._new_task(e)
            try:
                self.finish(e, self._run_inline_one(e, task))
            except BaseException:
                self.abort(todo[pos:])
                raise

    def _run_inline_one(self, e: _Entry, task: _Task) -> Outcome:
        """Run one call on this thread. Nothing else can watch the deadline
        meanwhile, so a call still running at the deadline becomes a timeout
        when it returns, as it would on a pool; with ``interrupt=True`` a
        deadline scope stops it on time."""
        captured: Any = None
        if self.interrupt and self.deadline is not None:
            from taut.deadline import move_on_at  # type: ignore[import-not-found,unused-ignore]

            with move_on_at(self.deadline, f"call {e.call_id!r} (gather deadline)", interrupt=True):
                captured = task.run()
        else:
            captured = task.run()
        if isinstance(captured, tuple) and captured and captured[0] == "fatal":
            return self.outcome_from(e, captured, None)  # raises: never cached
        deadline = self.deadline
        started = task.started_at
        if deadline is not None and started is not None:
            finished = task.finished_at
            if captured is None or finished is None or finished > deadline:
                elapsed = max(0.0, deadline - started)
                error = _timeout_error(e.call_id, self.timeout, elapsed)
                return Outcome(e.call_id, "timeout", None, error, True, elapsed)
        return self.outcome_from(e, captured, None)

    def _run_pooled(self, todo: list[_Entry]) -> None:
        queue = deque(todo)
        in_flight: dict[cf.Future[Any], _Entry] = {}
        limit = self.max_parallel or len(todo)
        try:
            while queue or in_flight:
                if self.deadline is not None and time.monotonic() >= self.deadline:
                    break  # submit nothing after the deadline
                while queue and len(in_flight) < limit:
                    e = queue.popleft()
                    task = self._new_task(e)
                    e.future = self.submit(self.executor, task)
                    in_flight[e.future] = e
                wait_for: float | None = None
                if self.deadline is not None:
                    wait_for = self.deadline - time.monotonic()
                    if wait_for <= 0:
                        break
                    wait_for = min(wait_for, _WAIT_SLICE)
                done, _ = cf.wait(in_flight, timeout=wait_for, return_when=cf.FIRST_COMPLETED)
                for f in done:
                    self.settle_future(in_flight.pop(f), f)
            else:
                return
            self._expire_all(list(in_flight.values()), list(queue))
        except BaseException:
            self.abort([*in_flight.values(), *queue])
            raise

    def _expire_all(self, in_flight: list[_Entry], queued: list[_Entry]) -> None:
        # Fence first: a worker that picks a queued call up from now on finds
        # the fence and returns without running it.
        self.fence()
        now = time.monotonic()
        for e in in_flight:
            self.expire(e, now)
        for e in queued:
            self.finish(e, Outcome(e.call_id, "not_started"))

    # -- the async run ---------------------------------------------------

    async def run_async(self) -> list[Outcome]:
        todo = self._begin()
        if not todo:
            return self.results()
        loop = asyncio.get_running_loop()
        inline_sync = _in_worker_of(self.executor)
        queue = deque(todo)
        in_flight: dict[asyncio.Future[Any], _Entry] = {}
        limit = self.max_parallel or len(todo)
        try:
            while queue or in_flight:
                if self.deadline is not None and time.monotonic() >= self.deadline:
                    break  # start nothing after the deadline
                while queue and len(in_flight) < limit:
                    e = queue.popleft()
                    task = self._new_task(e)
                    if e.handle._is_coroutine:
                        af: asyncio.Future[Any] = loop.create_task(task.arun())
                    elif inline_sync:
                        self.finish(e, self._run_inline_one(e, task))
                        continue
                    else:
                        e.future = self.submit(self.executor, task)
                        af = asyncio.wrap_future(e.future)
                    e.afuture = af
                    in_flight[af] = e
                if not in_flight:
                    continue  # everything so far ran inline
                wait_for: float | None = None
                if self.deadline is not None:
                    wait_for = self.deadline - time.monotonic()
                    if wait_for <= 0:
                        break
                    wait_for = min(wait_for, _WAIT_SLICE)
                done, _ = await asyncio.wait(
                    set(in_flight), timeout=wait_for, return_when=asyncio.FIRST_COMPLETED
                )
                for af in done:
                    e = in_flight.pop(af)
                    self._settle_async(e, af)
            else:
                return self.results()
            self.fence()
            now = time.monotonic()
            for af, e in list(in_flight.items()):
                if af.done() and not af.cancelled():
                    self._settle_async(e, af)
                else:
                    _silence(af)
                    self.expire(e, now)
            for e in queue:
                self.finish(e, Outcome(e.call_id, "not_started"))
            return self.results()
        except BaseException:
            for af in in_flight:
                _silence(af)
            self.abort([*in_flight.values(), *queue])
            raise

    def _settle_async(self, e: _Entry, af: asyncio.Future[Any]) -> None:
        if e.future is not None:
            self.settle_future(e, e.future)
            return
        if af.cancelled():
            task = cast(_Task, e.task)
            self.finish(e, Outcome(e.call_id, "cancelled", None, None, task.started_at is not None))
            return
        exc = af.exception()
        self.finish(e, self.outcome_from(e, None if exc else af.result(), exc))


def _silence(af: asyncio.Future[Any]) -> None:
    """Retrieve a left-behind future's exception so asyncio does not log it."""

    def _drop(f: asyncio.Future[Any]) -> None:
        if not f.cancelled():
            f.exception()

    af.add_done_callback(_drop)


# --------------------------------------------------------------------------
# The scheduler


_scheduler_ids = itertools.count(1)


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
        journal: _JournalLike | None = None,
        interrupt: bool = False,
        name: str | None = None,
    ) -> None:
        if executor is not None and not isinstance(executor, cf.Executor):
            raise TypeError(
                f"executor must be a concurrent.futures.Executor or None, got {executor!r} "
                f"({type(executor).__name__})"
            )
        self._executor = executor
        self.journal = journal
        self.interrupt = interrupt
        self.name = name or f"scheduler-{next(_scheduler_ids)}"

    def __repr__(self) -> str:
        return f"<taut.Scheduler {self.name}>"

    @property
    def executor(self) -> cf.Executor:
        return self._executor if self._executor is not None else _default_executor()

    def call(
        self, fn: Callable[..., Any], /, *args: Any, call_id: str | None = None, **kwargs: Any
    ) -> Call[Any]:
        """A cold handle for ``fn(*args, **kwargs)`` owned by this scheduler."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r} ({type(fn).__name__})")
        if call_id is not None and (not isinstance(call_id, str) or not call_id):
            raise TypeError(
                f"call_id must be a non-empty str or None, got {call_id!r} "
                f"({type(call_id).__name__})"
            )
        nested = _nested_argument(args, kwargs)
        if nested is not None:
            raise GatherRejected(
                f"{nested} of taut.call({_default_id(fn)}) is a taut handle; nested "
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
        journal: _JournalLike | None = None,
        interrupt: bool | None = None,
    ) -> list[Outcome]:
        """Run ``handles`` and return one :class:`Outcome` each, in input order."""
        run = _Run(
            self,
            handles,
            timeout,
            max_parallel,
            executor,
            journal,
            self.interrupt if interrupt is None else interrupt,
            None,
        )
        return run.run_sync()

    async def agather(
        self,
        handles: Iterable[Call[Any]],
        *,
        timeout: float | None = None,
        max_parallel: int | None = None,
        executor: cf.Executor | None = None,
        journal: _JournalLike | None = None,
        interrupt: bool | None = None,
    ) -> list[Outcome]:
        """The async twin of :meth:`gather`: coroutine functions run as tasks on
        the running loop, sync functions on ``executor``."""
        run = _Run(
            self,
            handles,
            timeout,
            max_parallel,
            executor,
            journal,
            self.interrupt if interrupt is None else interrupt,
            None,
        )
        return await run.run_async()

    # -- single awaits -----------------------------------------------------

    def _single(self, handle: Call[Any]) -> _Run | Outcome:
        """Claim ``handle`` for a single await: its cached outcome, or a run."""
        while True:
            run = _Run(self, [handle], None, None, None, None, self.interrupt, None, "await")
            with _STATE_LOCK:
                state, event = handle._state, handle._event
            if state == _DONE:
                return cast(Outcome, handle._outcome)
            if state == _RUNNING and event is not None:
                raise _Busy(event)
            try:
                run.claim()
            except GatherRejected:
                continue  # lost a race with another runner; look again
            e = run.entries[0]
            if e.outcome is not None:
                return e.outcome
            # A durable single await reserves its slot before it runs, like a
            # gather: a terminal record replays, and complete() has a slot.
            try:
                run.reserve()
            except BaseException:
                run.release_all()
                raise
            if e.outcome is not None:
                return e.outcome
            return run

    def _await_sync(self, handle: Call[Any]) -> Any:
        while True:
            try:
                got = self._single(handle)
            except _Busy as busy:
                busy.event.wait()
                continue
            if isinstance(got, Outcome):
                return got.unwrap()
            e = got.entries[0]
            task = got._new_task(e)
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
            try:
                captured = task.run()
                outcome = got.outcome_from(e, captured, None)
            except BaseException:
                got.release_all()
                raise
            got.finish(e, outcome)
            return outcome.unwrap()

    async def _await_async(self, handle: Call[Any]) -> Any:
        while True:
            try:
                got = self._single(handle)
            except _Busy as busy:
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(None, busy.event.wait)
                continue
            if isinstance(got, Outcome):
                return got.unwrap()
            e = got.entries[0]
            task = got._new_task(e)
            future: cf.Future[Any] | None = None
            try:
                if handle._is_coroutine:
                    captured = await task.arun()
                elif _in_worker_of(got.executor):
                    captured = task.run()
                else:
                    future = got.executor.submit(task.ref())
                    e.future = future
                    captured = await asyncio.wrap_future(future)
                outcome = got.outcome_from(e, captured, None)
            except BaseException:
                if future is not None and not future.done():
                    got.fence()
                    if task.started_at is None:
                        future.cancel()
                task.forget()
                got.release_all()
                raise
            got.finish(e, outcome)
            return outcome.unwrap()


class _Busy(Exception):
    def __init__(self, event: threading.Event) -> None:
        super().__init__("handle is running elsewhere")
        self.event = event


_DEFAULT = Scheduler(name="default")


def default_scheduler() -> Scheduler:
    """The process-wide scheduler behind :func:`call`, :func:`gather` and :func:`agather`."""
    return _DEFAULT


def call(
    fn: Callable[..., Any], /, *args: Any, call_id: str | None = None, **kwargs: Any
) -> Call[Any]:
    """A cold handle for ``fn(*args, **kwargs)``: nothing runs until it is
    awaited (``handle.result()``, ``await handle``) or gathered."""
    return _DEFAULT.call(fn, *args, call_id=call_id, **kwargs)


def gather(
    handles: Iterable[Call[Any]],
    *,
    timeout: float | None = None,
    max_parallel: int | None = None,
    executor: cf.Executor | None = None,
    journal: _JournalLike | None = None,
    interrupt: bool | None = None,
) -> list[Outcome]:
    """Run ``handles`` and return their outcomes in input order.

    ``timeout`` (seconds, ``None`` = no deadline) bounds the whole batch;
    ``max_parallel`` bounds how many calls run at once; ``executor`` is any
    :class:`concurrent.futures.Executor` (default: taut's shared pool);
    ``journal`` makes the calls durable; ``interrupt=True`` also raises
    :class:`TimeoutError` in a taut worker whose call timed out. See the module
    documentation for the full contract.
    """
    return _DEFAULT.gather(
        handles,
        timeout=timeout,
        max_parallel=max_parallel,
        executor=executor,
        journal=journal,
        interrupt=interrupt,
    )


async def agather(
    handles: Iterable[Call[Any]],
    *,
    timeout: float | None = None,
    max_parallel: int | None = None,
    executor: cf.Executor | None = None,
    journal: _JournalLike | None = None,
    interrupt: bool | None = None,
) -> list[Outcome]:
    """The async twin of :func:`gather`: coroutine functions are awaited as
    tasks on the running loop, sync functions run on ``executor``."""
    return await _DEFAULT.agather(
        handles,
        timeout=timeout,
        max_parallel=max_parallel,
        executor=executor,
        journal=journal,
        interrupt=interrupt,
    )
