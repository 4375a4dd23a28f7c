"""A limiter in front of a batch's calls: a ceiling shared beyond one pool.

``gather(..., limiter=...)`` accepts any object with ``acquire(timeout=...) ->
bool`` and ``release()``: a ``threading.BoundedSemaphore`` for one process, a
``distributed.Semaphore(max_leases=N, name=...)`` for a whole fleet (Dask
releases the leases of a holder that dies). Each call takes one slot before it
is handed to the executor and gives it back when its future completes. A call
waits for its slot *within the batch deadline*: one that has no slot when the
deadline comes is ``not_started`` and never runs.

A batch nested in a call and run inline on the call's thread (a sub-agent's
tool batch on the same pool) runs under the slot that call holds: waiting for
another one could wait for itself. So does an ``agather`` nested in a call's
coroutine (in tasks the coroutine starts too), or in a loop a sync call runs
on its thread: its calls, coroutines or sync calls wherever they run, take
that held slot in turn, one at a time. A sync batch nested in a call whose
calls go to another pool takes slots of its own; when the enclosing calls
hold every slot while they wait for it, it gets none before its deadline.

A slot is given back when the call's future completes, or when the batch
gives up on the call, whichever comes first. A call cut loose at the deadline
(``timeout``) may still be running (a Dask task whose future was cancelled, an
abandoned thread of a taut pool, a thread of a standard pool that cannot be
stopped); its slot is free from then on, so more than N calls may run for as
long as it does: a hung tool must not take a fleet's slot for good. A Dask
limiter is released from a small thread of its own: a future's callbacks may
run on the Dask client's event loop, where its blocking ``release()`` must not
run.

A ``release()`` that raises (a shared limiter that lost its connection) is
logged (logger ``taut.gather``) and the batch goes on: every call is still
settled and every handle let go; the limiter may count that slot as taken.
An ``acquire`` that raises, or returns anything but a bool (``TypeError``),
halts the batch (``Run.halt``): nothing more starts, the calls already running
are settled and recorded, then the failure is raised; the calls never started
go cold and can be gathered again.

``acquire`` must honour its ``timeout``: the batch calls it with ``0`` unless
it has nothing else to watch, and ``agather`` always with ``0``, on the event
loop's thread. One that blocks anyway holds up the batch past its deadline
(and the whole loop): that is the limiter's bug, and taut cannot stop it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable

# describe()/shown(): a limiter's own __repr__ may raise, which must not
# replace the error that names it.
from taut._checks import describe, shown
from taut._fork_locks import fork_safe_lock

__all__ = ["Slots", "check_limiter"]

_log = logging.getLogger("taut.gather")

# A huge remaining time must never reach an OS wait in one piece.
_WAIT_SLICE = 3600.0


def check_limiter(limiter: object) -> Any:
    if limiter is None:
        return None
    for name in ("acquire", "release"):
        if not callable(getattr(limiter, name, None)):
            raise TypeError(
                f"limiter must have acquire(timeout=...) and release() (a "
                f"threading.BoundedSemaphore, a distributed.Semaphore), got "
                f"{describe(limiter)} without {name}()"
            )
    return limiter


class Slots:
    """The slots one batch holds from its limiter."""

    def __init__(self, limiter: Any, on_wait: Callable[[int], object] | None) -> None:
        self.limiter = limiter
        self._on_wait = on_wait
        self._waited: set[int] = set()

    def take(self, index: int, deadline: float | None, *, may_block: bool) -> bool:
        """One slot for call ``index``. Waits only when the batch has nothing
        else to watch (``may_block``), and never past ``deadline``
        (``time.monotonic()``) nor longer than one wait slice."""
        timeout = 0.0
        if may_block:
            timeout = _WAIT_SLICE
            if deadline is not None:
                timeout = min(max(deadline - time.monotonic(), 0.0), _WAIT_SLICE)
        got = self.limiter.acquire(timeout=timeout)
        if got is True:
            return True
        if got is not False:
            # None (an acquire that returns nothing), a coroutine (an async
            # limiter): reading it as "no slot" would wait for a slot that
            # never comes; as "a slot" might run past the ceiling.
            raise TypeError(
                "limiter.acquire(timeout=...) must return a bool (True: a slot was "
                f"taken), got {describe(got)} from {shown(self.limiter)}"
            )
        if index not in self._waited:
            self._waited.add(index)
            if self._on_wait is not None:
                self._on_wait(index)
        return False

    def release_when_done(self, future: Any) -> Callable[[], None]:
        """Give the slot back when ``future`` completes; the function returned
        gives it back now, for a call the batch gives up on before that (cut
        loose at the deadline, still running on an abandoned thread). Once
        either way."""
        held = [True]

        def give_back(_future: object = None) -> None:
            try:
                held.pop()  # atomic: only the first caller gets past it
            except IndexError:
                return
            self.release()

        future.add_done_callback(give_back)
        return give_back

    def release(self) -> None:
        """Give one slot back. Never raises: it runs while a batch settles a
        call (at the deadline, on abort, in a future's callback), and a
        failure there would leave the call's handle "running" for good."""
        try:
            if type(self.limiter).__module__.startswith("distributed"):
                _release_soon(self.limiter)  # blocking RPC: never on the client's loop
            else:
                self.limiter.release()
        except Exception:
            _log.exception("limiter %r: release() failed; its slot may stay taken", self.limiter)


_releases: queue.SimpleQueue[Any] = queue.SimpleQueue()
_releaser: threading.Thread | None = None
_releaser_lock = fork_safe_lock()


def _release_soon(limiter: Any) -> None:
    global _releaser
    _releases.put(limiter)
    with _releaser_lock:
        if _releaser is None or not _releaser.is_alive():
            _releaser = threading.Thread(
                target=_release_forever, name="taut-limiter-release", daemon=True
            )
            _releaser.start()


def _release_forever() -> None:
    while True:
        limiter = _releases.get()
        try:
            limiter.release()
        except Exception:  # a lease Dask already dropped (its holder went away)
            pass
        # Not kept (with its client) while this thread waits for the next.
        del limiter
