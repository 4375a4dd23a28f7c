"""What a gather hands out and takes in: cold call handles (:class:`Call`), the
:class:`Outcome` of one call, :class:`GatherRejected`, and the rules that name
calls and find handles nested in arguments."""

from __future__ import annotations

import concurrent.futures as cf
import functools
import os
import threading
from collections.abc import Awaitable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, Literal, TypeVar, cast

from taut._callables import is_coroutine_function
from taut._checks import describe
from taut._fork_locks import fork_safe_lock
from taut.deadline import DeadlineExpired
from taut.journal import TERMINAL_STATUSES
from taut.journal.codec import stand_in_for

if TYPE_CHECKING:
    from taut.gather import Scheduler

__all__ = ["STATUSES", "Call", "GatherRejected", "Outcome", "OutcomeStatus"]

T = TypeVar("T")

STATUSES = ("ok", "error", "timeout", "not_started", "cancelled")


class GatherRejected(ValueError):
    """A gather (or await) refused its handles before anything ran: duplicate,
    foreign, nested or already running handles, or a journal shared with the
    enclosing gather."""


OutcomeStatus = Literal["ok", "error", "timeout", "not_started", "cancelled"]
"""How a gathered call ended: the values of :attr:`Outcome.status`."""


@dataclass(frozen=True)
class Outcome:
    """The result of one gathered call."""

    call_id: str
    status: OutcomeStatus
    """``'ok'`` (``value`` holds the return value), ``'error'`` (``error`` holds
    the exception), ``'timeout'`` (the call started but did not finish by the
    deadline; ``error`` is a :class:`TimeoutError`), ``'not_started'`` (the
    deadline came first; the call never ran) or ``'cancelled'`` (the executor
    cancelled the call's future, e.g. on shutdown, or refused the call because
    it was shut down while the batch ran)."""
    value: Any = None
    error: BaseException | None = None
    started: bool = False
    """Whether the call's body began to run."""
    elapsed_s: float = 0.0
    """How long it ran (up to the deadline for a timeout)."""
    replayed: bool = False
    """Read back from a journal instead of run."""

    def __post_init__(self) -> None:
        # Any other status would pass for a cancelled call: not ok, not
        # cacheable, and unwrap() raising CancelledError.
        if self.status not in STATUSES:
            rule = "status must be one of " + ", ".join(repr(s) for s in STATUSES)
            wrong = TypeError if not isinstance(self.status, str) else ValueError
            raise wrong(f"{rule}, got {describe(self.status)}")
        if self.status == "timeout" and not isinstance(self.error, TimeoutError):
            # A timeout is a TimeoutError however the outcome was made: by
            # hand with no error, or replayed with a stand-in that was not
            # one (a record written before JournaledTimeoutError existed).
            error = (
                DeadlineExpired(f"call {self.call_id!r} timed out")
                if self.error is None
                else stand_in_for(self.error, timeout=True)
            )
            object.__setattr__(self, "error", error)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def cacheable(self) -> bool:
        """True for the terminal statuses a handle caches and a journal keeps."""
        return self.status in TERMINAL_STATUSES

    def unwrap(self) -> Any:
        """The value of an ``ok`` outcome; otherwise raise its error (always a
        :class:`TimeoutError` for ``timeout``: :class:`taut.DeadlineExpired`,
        or a :class:`taut.JournaledTimeoutError` keeping the stored type,
        message and traceback text; :class:`concurrent.futures.CancelledError`
        for ``not_started``/``cancelled``; a ``RuntimeError`` for an ``error``
        outcome made without its error)."""
        if self.status == "ok":
            return self.value
        if self.error is not None:
            try:
                raise self.error
            finally:
                # The error's traceback holds this frame, which holds the
                # outcome holding the error: without this the cycle kept the
                # failed call's frames (their locals) alive until the
                # collector ran, as Future.result() does.
                del self
        if self.status == "error":
            # Made by hand without its error: a failure all the same, never
            # to be taken for a cancellation.
            raise RuntimeError(f"call {self.call_id!r} failed, and its outcome holds no error")
        raise cf.CancelledError(f"call {self.call_id!r} {self.status.replace('_', ' ')}")


# --------------------------------------------------------------------------
# Call ids and nesting


def default_id(fn: Callable[..., Any]) -> str:
    """The dotted name of ``fn`` (through ``functools.partial``): the stem of a
    default call id, which the gather completes with ``#position``."""
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


def nested_argument(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
    """Which argument holds a handle (directly or one container deep), if any."""
    for i, a in enumerate(args):
        if _contains_handle(a):
            return f"positional argument {i}"
    for k, v in kwargs.items():
        if _contains_handle(v):
            return f"keyword argument {k!r}"
    return None


# --------------------------------------------------------------------------
# Handles

COLD, RUNNING, DONE = 0, 1, 2
# Guards every handle's state transitions: claiming a batch takes all its
# handles or none, which needs one lock over all of them.
STATE_LOCK = fork_safe_lock()


class Call(Generic[T]):
    """A cold handle for ``fn(*args, **kwargs)``: nothing runs until it is
    awaited (:meth:`result`, ``await handle``) or gathered.

    Made by :func:`taut.call` or :meth:`Scheduler.call`, never directly. A
    handle cannot be copied, deep-copied or pickled (``TypeError``): it is one
    run of its call in this process, and a copy would run the call again.
    """

    __slots__ = (
        "__weakref__",
        "_args",
        "_call_id",
        "_event",
        "_event_hooks",
        "_explicit_id",
        "_fn",
        "_is_coroutine",
        "_kwargs",
        "_outcome",
        "_owner",
        "_pid",
        "_scheduler",
        "_slot",
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
        self._is_coroutine = is_coroutine_function(fn)
        self._pid = os.getpid()
        self._state = COLD
        self._outcome: Outcome | None = None
        self._owner: object | None = None
        # The journal slot a batch reserved for this call (taut.gather.slots).
        self._slot: Any = None
        self._event: threading.Event | None = None
        # Called (besides setting _event) when the run holding the handle lets
        # go of it: how an async await waits without parking a thread.
        self._event_hooks: list[Callable[[], None]] | None = None  # made when needed

    # -- public surface ---------------------------------------------------

    @property
    def call_id(self) -> str | None:
        """The explicit id, or the default id once the handle has run
        (``None`` before: the default depends on the gather position)."""
        return self._call_id

    @property
    def fn(self) -> Callable[..., Any]:
        """The function the handle calls."""
        return self._fn

    def done(self) -> bool:
        """True once a cached outcome exists (``ok``, ``error`` or ``timeout``)."""
        return self._state == DONE

    def outcome(self) -> Outcome | None:
        """The cached outcome, or ``None`` if the handle has none yet."""
        return self._outcome if self._state == DONE else None

    @property
    def is_coroutine(self) -> bool:
        """True if ``fn`` is a coroutine function (awaited on the event loop)."""
        return self._is_coroutine

    def result(self) -> T:
        """Run the call on this thread (once) and return its value.

        A cached outcome is reused: the value is returned again, the error
        raised again. No timeout and no parallelism limit apply - only a gather
        applies those. A coroutine function is run with :func:`asyncio.run`; use
        ``await handle`` inside an event loop. If another thread is running the
        handle, this waits for it.
        """
        outcome = self._scheduler._await_sync(self)
        del self  # it holds the outcome: no cycle through its error (see Outcome.unwrap)
        try:
            return cast(T, outcome.unwrap())
        finally:
            del outcome

    def __await__(self) -> Generator[Any, None, T]:
        return _unwrapped(self._scheduler._await_async(self)).__await__()

    @property
    def scheduler(self) -> Scheduler:
        """The scheduler that made the handle (only its gathers accept it)."""
        return self._scheduler

    def __repr__(self) -> str:
        state = {COLD: "cold", RUNNING: "running", DONE: "done"}[self._state]
        name = self._call_id or default_id(self._fn)
        return f"<taut.Call {name} {state}>"

    def __reduce_ex__(self, protocol: object) -> Any:
        # copy.copy, copy.deepcopy and pickle all come here. A handle is one
        # run of a call in this process: a copy would either share nothing
        # with it (and run the call again: a card charged twice) or claim a
        # run it does not own (stuck "running" for good).
        raise TypeError(
            f"cannot copy or pickle a taut.Call handle ({self!r}): a handle is one run "
            "of its call in this process, and a copy would run the call again; share "
            "the handle itself, or make a new one with taut.call(fn, ...) (or the "
            "scheduler's call) for another run"
        )

    # -- state transitions (all under STATE_LOCK) -------------------------

    def _fix_id(self, index: int) -> str:
        if self._call_id is None:
            self._call_id = f"{default_id(self._fn)}#{index}"
        return self._call_id

    def _release(self, outcome: Outcome | None) -> None:
        """Leave the running state: cache a terminal outcome, or go cold again."""
        with STATE_LOCK:
            if outcome is not None and outcome.cacheable:
                self._state = DONE
                self._outcome = outcome
            else:
                self._state = COLD
            self._owner = None
            event, self._event = self._event, None
            hooks, self._event_hooks = self._event_hooks, None
        if event is not None:
            event.set()
        for hook in hooks or ():
            hook()

    def _when_released(self, event: threading.Event, hook: Callable[[], None]) -> bool:
        """Call ``hook`` once the run that set ``event`` lets go of this handle;
        False (and no call) if it already has."""
        with STATE_LOCK:
            if self._event is not event:
                return False
            if self._event_hooks is None:
                self._event_hooks = []
            self._event_hooks.append(hook)
            return True

    def _has_waiters(self) -> bool:
        """Whether an await waits for the run holding this handle."""
        with STATE_LOCK:
            return bool(self._event_hooks)

    def _forget_hook(self, hook: Callable[[], None]) -> None:
        with STATE_LOCK:
            if self._event_hooks is not None and hook in self._event_hooks:
                self._event_hooks.remove(hook)


async def _unwrapped(awaiting: Awaitable[Outcome]) -> Any:
    """The value of the outcome ``awaiting`` gives, or its error raised,
    without this frame holding the outcome meanwhile (see Call.result)."""
    outcome = await awaiting
    del awaiting
    try:
        return outcome.unwrap()
    finally:
        del outcome
