"""Calls that run in another process: their deadline and their start.

**The deadline travels as a remaining duration.** Hosts' clocks disagree, so a
call never carries a point in time: each time it is pickled (at the caller,
and again at every hop, e.g. a Dask scheduler that unpickles and re-pickles
tasks) it carries the seconds left *at that moment*, and where it is
unpickled it becomes a deadline on that process's own monotonic clock. Only
the time on the wire is not counted, so a remote deadline is later than the
caller's by that transit (milliseconds); the caller enforces its own deadline
regardless. Between processes of one machine (one monotonic clock, as a
``ProcessPoolExecutor`` has) nothing is lost: the time a call waited pickled,
in the pool's queue, counts too, and the deadline is the caller's own. In
the remote process the call runs inside a ``taut.fail_at`` scope:
``taut.remaining()`` works there, scopes nest under it, and with
``interrupt=True`` the call is interrupted at the deadline. A call that
arrives after its deadline never begins; one that ends at or after it comes
back as a timeout (:class:`~taut.gather.tasks.Overran`), whatever it returned
or raised, however soon the caller sees it.

**Honest starts on Dask.** A caller cannot see when a call begins in another
process. On a Dask executor each call of a batch with a deadline announces
its start (a Dask ``Event`` per call) *before* it checks the batch's fence (a
Dask ``Event`` per batch) and never begins if the fence is up. At the deadline
the caller raises the fence *before* it reads the announcements. So a call
that had not announced when the caller looked never begins: it is
``not_started`` and may be retried safely; every other unfinished call is
``timeout``; so is every call whose announcement the scheduler does not tell
within :attr:`DaskStarts.PATIENCE` (a frozen or cut-off scheduler must not hold
the gather past its deadline). On other multi-process executors (no shared
events) every submitted, unfinished call counts as started (``timeout``),
except one that a ``ProcessPoolExecutor`` still gives back (cancels) at the
deadline, or one not yet pickled then (it would arrive past its deadline):
it never reached a worker and is ``not_started``. So too when a process
pool breaks (a call ends its worker with ``os._exit``) and fails every call
it holds: each call it sent to a worker process counts as started.

**The outcome travels back pickled by taut** (:class:`Shipped`). A return
value or exception that cannot make the trip fails only its own call, with an
error that says so: left to the executor, one that does not pickle where the
call ran hangs a Dask gather until its deadline (for good without one), and
one that does not unpickle where the caller is (an exception whose
``__init__`` takes more than its ``args``) breaks a whole
``ProcessPoolExecutor``, failing every call of the batch. A ``SystemExit``
raised by pickling or unpickling (a ``__reduce__`` or ``__setstate__`` that
calls ``sys.exit``) counts as such a failure, of the call's outcome or of its
arguments: escaping, it would end the gather with ``SystemExit``, break the
pool, or kill the pool's feeder thread and hang the gather. Only
``KeyboardInterrupt`` and the like go on propagating.
"""

from __future__ import annotations

import asyncio
import functools
import os
import pickle
import time
import uuid
from typing import Any, cast

from taut import _lazy_import
from taut._callables import is_coroutine_function, not_a_coroutine
from taut._checks import describe
from taut.deadline import fail_at

# What pickling and unpickling user objects may raise that only fails the call
# whose objects they are: a SystemExit there is a hostile __reduce__ or
# __setstate__, never a request to end this process (it would end the pool's
# worker, or the caller's gather, or the pool's feeder or manager thread).
PICKLING_FAILURES = (Exception, SystemExit)

__all__ = [
    "PICKLING_FAILURES",
    "DaskStarts",
    "Shipped",
    "Terms",
    "arrived",
    "dask_client",
    "dumps",
    "run_remote",
]


def dumps(data: object) -> bytes:
    """``data`` pickled, by cloudpickle if plain pickle refuses (a lambda, a
    class defined in ``__main__``); plain pickle's error if both refuse."""
    try:
        return pickle.dumps(data)
    except Exception as exc:
        error = exc
    try:
        cloudpickle = _lazy_import.load("cloudpickle")  # counted: fork-safe
        return cast(bytes, cloudpickle.dumps(data))
    except Exception:  # cloudpickle is optional, and its error says no more
        raise error from None


class Terms:
    """What travels with a remote call besides the call itself."""

    __slots__ = ("deadline", "fence", "interrupt", "label", "start")

    def __init__(
        self,
        deadline: float | None,
        fence: str | None,
        start: str | None,
        interrupt: bool,
        label: str,
    ) -> None:
        self.deadline = deadline  # time.monotonic() of the process holding this object
        self.fence = fence  # Dask Event raised at the batch deadline
        self.start = start  # Dask Event this call sets before it begins
        self.interrupt = interrupt
        self.label = label

    def __reduce__(self) -> tuple[Any, ...]:
        now = time.monotonic()
        remaining = None if self.deadline is None else self.deadline - now
        sent = (remaining, self.fence, self.start, self.interrupt, self.label)
        return (_arrive, (*sent, _clock_id(), now))

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


def _arrive(
    remaining: float | None,
    fence: str | None,
    start: str | None,
    interrupt: bool,
    label: str,
    clock: str | None = None,
    sent_at: float | None = None,
) -> Terms:
    deadline = None if remaining is None else time.monotonic() + remaining
    if deadline is not None and sent_at is not None and clock is not None and clock == _clock_id():
        # The clock it was pickled by: the time it waited pickled counts (a
        # process pool pickles a call when it queues it, long before a worker
        # unpickles it). Never later than counting from arrival.
        deadline = min(deadline, sent_at + cast(float, remaining))
    return Terms(deadline, fence, start, interrupt, label)


@functools.cache
def _clock_id() -> str | None:
    """Names the monotonic clock every process of this machine reads (Linux:
    the kernel's boot id and the time namespace, which may offset it); None
    where that cannot be told, and then arrival counts from unpickling."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            boot_id = boot.read().strip()
    except OSError:
        return None
    try:
        namespace = os.stat("/proc/self/ns/time").st_ino
    except OSError:  # a kernel before time namespaces (5.6): one clock
        namespace = 0
    return f"{boot_id}:{namespace}" if boot_id else None


def _event(name: str) -> Any:
    return _client_event(name, None)


def _client_event(name: str, client: Any) -> Any:
    distributed = _lazy_import.load("distributed")  # counted: fork-safe

    # Any: distributed has no type information for Event.
    event: Any = distributed.Event
    return event(name, client=client)


def run_remote(payload: bytes | str | None, terms: Terms | None) -> Any:
    """Run a pickled call in the process it arrived in (see the module docs);
    ``payload`` is text (why) or None when the call could not be pickled."""
    from taut.gather.tasks import FENCED, Overran, Raised, Returned

    if not isinstance(payload, bytes):
        why = f" ({payload})" if payload else ""
        raise RuntimeError(
            "this taut call was sent to another process, but its function or arguments "
            f"could not be pickled{why}; use picklable (module-level) functions and "
            "arguments with a multi-process executor"
        )
    if terms is not None:
        if terms.expired():
            return FENCED
        if terms.start is not None and terms.fence is not None:
            announced = _event(terms.start)
            announced.set()  # first announce, then look at the fence (module docs)
            if _event(terms.fence).is_set() or terms.expired():
                # Not running after all. The caller saw the announcement (a
                # timeout, as it must assume) or will not see it (not_started,
                # which is true): either way the event is no longer needed.
                announced.clear()
                return FENCED
    try:
        fn, args, kwargs = pickle.loads(payload)
    except PICKLING_FAILURES as exc:
        raise RuntimeError(
            "this taut call's function or arguments could not be unpickled in the "
            f"process it was sent to: {exc!r}"
        ) from None
    deadline = terms.deadline if terms is not None else None
    began = time.monotonic()
    try:
        if terms is not None and deadline is not None:
            with fail_at(deadline, terms.label, interrupt=terms.interrupt):
                captured: Returned | Raised = Returned(_call(fn, args, kwargs))
        else:
            captured = Returned(_call(fn, args, kwargs))
    except Exception as exc:
        captured = Raised(exc)
    if deadline is not None and time.monotonic() >= deadline:
        # Ended at or past its deadline: a timeout (see Overran), told here by
        # the clock that deadline is on, not by when the caller gets to look.
        return Overran(max(0.0, deadline - began))
    # Pickled outside the deadline scope: an interrupt landing in pickle.dumps
    # would be taken for a value that cannot be pickled.
    return _ship(captured)


def _call(fn: Any, args: Any, kwargs: Any) -> Any:
    # An async function runs on a loop of its own, as on a local worker
    # (taut.gather.tasks): its coroutine object cannot travel back unawaited.
    if is_coroutine_function(fn):
        return asyncio.run(fn(*args, **kwargs))
    return not_a_coroutine(fn(*args, **kwargs), fn)


class Shipped:
    """An outcome pickled where the call ran; unpickling it where the caller
    is runs :func:`_land`, which turns a failure into the call's own error
    instead of the executor's (see the module docs)."""

    __slots__ = ("data", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.what = what  # names the value in the caller's error, if it must

    def __reduce__(self) -> tuple[Any, ...]:
        return (_land, (self.data, self.what))


def _what(captured: Any, *, in_full: bool = False) -> str:
    from taut.gather.tasks import Raised

    if isinstance(captured, Raised):
        return f"the exception {describe(captured.error, limit=200)} raised by this call"
    if in_full:
        return f"the return value {describe(captured.value, limit=200)} of this call"
    # Only the type while all is well: a large value's repr would cost every call.
    kind = type(captured.value)
    return f"the return value of this call (a {kind.__module__}.{kind.__qualname__})"


def _ship(captured: Any) -> Shipped:
    from taut.gather.tasks import Raised

    try:
        return Shipped(dumps(captured), _what(captured))
    except PICKLING_FAILURES as exc:
        what = _what(captured, in_full=True)
        error = RuntimeError(
            f"{what} could not be pickled to go back to the caller: {exc!r}; calls "
            "that run in another process must return and raise picklable objects"
        )
        return Shipped(pickle.dumps(Raised(error)), what)


def _land(data: bytes, what: str) -> Any:
    from taut.gather.tasks import Raised

    try:
        return pickle.loads(data)
    except PICKLING_FAILURES as exc:
        return Raised(
            RuntimeError(
                f"{what} came back from the process it ran in but could not be "
                f"unpickled here: {exc!r}"
            )
        )


def arrived(result: Any) -> Any:
    """What a task reported, unpacked if it ran here without being pickled."""
    if isinstance(result, Shipped):
        return _land(result.data, result.what)
    return result


def dask_client(executor: Any) -> Any:
    """The Dask client behind ``client.get_executor()``, or None."""
    if type(executor).__name__ == "ClientExecutor" and type(executor).__module__.startswith(
        "distributed"
    ):
        return getattr(executor, "_client", None)
    return None


class DaskStarts:
    """The caller's side of the start protocol for one batch on one client."""

    # A remote call that was cut loose may still look at the fence until its own
    # deadline (the caller's plus the transit); the fence event is dropped this
    # long after the caller's deadline.
    FENCE_GRACE = 60.0

    def __init__(self, client: Any) -> None:
        self.client = client
        self.fence = f"taut-fence-{uuid.uuid4().hex}"
        self._announced: list[str] = []
        self._fence_up = False  # raised, as far as the scheduler confirmed
        self._answer_by = 0.0  # time.monotonic() by which the scheduler must answer

    def start_name(self, token: str) -> str:
        name = f"taut-start-{token}-{uuid.uuid4().hex[:8]}"
        self._announced.append(name)
        return name

    # At the deadline the caller asks the scheduler (raise the fence, read the
    # announcements). Dask waits for its answers without end, and a scheduler
    # that does not answer (frozen, cut off) would hold the gather past its
    # deadline for good: all of a batch's questions share these seconds, and
    # what is not answered by then counts as started.
    PATIENCE = 2.0

    def _ask(self, question: str, name: str) -> Any:
        left = self._answer_by - time.monotonic()
        if left <= 0:
            raise TimeoutError("the scheduler did not answer in time")
        ask = getattr(self.client.scheduler, question)
        return self.client.sync(ask, name=name, callback_timeout=left)

    def raise_fence(self) -> None:
        self._answer_by = time.monotonic() + self.PATIENCE
        try:
            self._ask("event_set", self.fence)
            self._fence_up = True
        except Exception:  # unreachable scheduler: every remote call counts as started
            self._fence_up = False

    def started(self, name: str) -> bool:
        """Whether the call announced its start; True whenever that cannot be
        known (no fence confirmed, the scheduler does not answer in time)."""
        if not self._fence_up:
            return True
        try:
            return bool(self._ask("event_is_set", name))
        except Exception:
            return True

    def cleanup(self) -> None:
        """Drop this batch's events on the scheduler, off the caller's path."""
        names, self._announced = self._announced, []
        client, fence, fenced = self.client, self.fence, self._fence_up

        async def clear(names: list[str]) -> None:
            for name in names:
                try:
                    await client.scheduler.event_clear(name=name)
                except Exception:
                    return  # the client or scheduler is gone: so are the events

        try:
            loop = client.loop
            if names:
                loop.add_callback(clear, names)
            if fenced:
                loop.call_later(self.FENCE_GRACE, lambda: loop.add_callback(clear, [fence]))
        except Exception:
            pass  # a closed client: nothing left to clean
