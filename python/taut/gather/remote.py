"""Calls that run in another process: their deadline and their start.

**The deadline travels as a remaining duration.** Hosts' clocks disagree, so a
call never carries a point in time: each time it is pickled (at the caller,
and again at every hop, e.g. a Dask scheduler that unpickles and re-pickles
tasks) it carries the seconds left *at that moment*, and where it is
unpickled it becomes a deadline on that process's own monotonic clock. Only
the time on the wire is not counted, so a remote deadline is later than the
caller's by that transit (milliseconds); the caller enforces its own deadline
regardless. In the remote process the call runs inside a ``taut.fail_at``
scope: ``taut.remaining()`` works there, scopes nest under it, and with
``interrupt=True`` the call is interrupted at the deadline. A call that
arrives after its deadline never begins.

**Honest starts on Dask.** A caller cannot see when a call begins in another
process. On a Dask executor each call of a batch with a deadline announces
its start (a Dask ``Event`` per call) *before* it checks the batch's fence (a
Dask ``Event`` per batch) and never begins if the fence is up. At the deadline
the caller raises the fence *before* it reads the announcements. So a call
that had not announced when the caller looked never begins: it is
``not_started`` and may be retried safely; every other unfinished call is
``timeout``. On other multi-process executors (no shared events) every
submitted, unfinished call counts as started (``timeout``).
"""

from __future__ import annotations

import pickle
import time
import uuid
from typing import Any

from taut import _lazy_import
from taut.deadline import fail_at

__all__ = ["DaskStarts", "Terms", "dask_client", "run_remote"]


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
        remaining = None if self.deadline is None else self.deadline - time.monotonic()
        return (_arrive, (remaining, self.fence, self.start, self.interrupt, self.label))

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


def _arrive(
    remaining: float | None, fence: str | None, start: str | None, interrupt: bool, label: str
) -> Terms:
    deadline = None if remaining is None else time.monotonic() + remaining
    return Terms(deadline, fence, start, interrupt, label)


def _event(name: str) -> Any:
    return _client_event(name, None)


def _client_event(name: str, client: Any) -> Any:
    distributed = _lazy_import.load("distributed")  # counted: fork-safe

    # Any: distributed has no type information for Event.
    event: Any = distributed.Event
    return event(name, client=client)


def run_remote(payload: bytes | None, terms: Terms | None) -> Any:
    """Run a pickled call in the process it arrived in (see the module docs)."""
    from taut.gather.tasks import FENCED, Raised, Returned

    if payload is None:
        raise RuntimeError(
            "this taut call ran in another process, but its function or arguments "
            "could not be pickled; use picklable (module-level) functions with a "
            "multi-process executor"
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
    fn, args, kwargs = pickle.loads(payload)
    try:
        if terms is not None and terms.deadline is not None:
            with fail_at(terms.deadline, terms.label, interrupt=terms.interrupt):
                return Returned(fn(*args, **kwargs))
        return Returned(fn(*args, **kwargs))
    except Exception as exc:
        return Raised(exc)


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

    def start_name(self, token: str) -> str:
        name = f"taut-start-{token}-{uuid.uuid4().hex[:8]}"
        self._announced.append(name)
        return name

    def raise_fence(self) -> None:
        try:
            _client_event(self.fence, self.client).set()
            self._fence_up = True
        except Exception:  # unreachable scheduler: every remote call counts as started
            self._fence_up = False

    def started(self, name: str) -> bool:
        """Whether the call announced its start; True whenever that cannot be
        known (no fence confirmed, the scheduler does not answer)."""
        if not self._fence_up:
            return True
        try:
            return bool(_client_event(name, self.client).is_set())
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
