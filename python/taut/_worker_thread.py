"""The thread class of taut's workers: a ``threading.Thread`` whose
``start()`` may return once the OS thread is made, without waiting for it
to run."""

from __future__ import annotations

import threading
import time

TYPE_CHECKING = False  # typing's, without importing typing (see taut/__init__)
if TYPE_CHECKING:
    from typing import Any


class _StartedEvent(threading.Event):
    """A worker thread's ``_started`` event, whose ``wait`` may not wait.

    ``Thread.start()`` makes the OS thread, then waits on this event until
    the new thread has run its first lines of Python. In a busy pool that
    wait is long: the new thread needs the GIL, which tens of workers are
    taking turns at, and then the starter needs it back (0.67 ms per start,
    measured with 64 workers sleeping 1 ms calls). A submitter that had to
    start 52 workers so queued nothing for 35 ms while they came up one by
    one. The worker needs nothing from that wait: it reports in to its pool
    through its slot (``WorkerSlot.take``), and the pool counts it as on its
    way to the queued calls until then.

    The wait is kept (``wait_to_run``) while a pool's calls are short or
    not known yet: there it is what keeps a burst of calls from starting a
    thread for each one (the workers already running finish short calls
    sooner than a new one could start). Without it, a burst of 1,000 no-op
    calls on a 1,000-worker pool started 343 threads and took 2.3x as long.
    """

    # Thread.start() calls wait() only once the OS thread is made.
    made = False
    # In a forked child: the thread was made in the parent and had not run
    # there yet, so it never runs here.
    forked_away = False

    def __init__(self, wait_to_run: bool) -> None:
        super().__init__()
        self._wait_to_run = wait_to_run

    def wait(self, timeout: float | None = None) -> bool:
        self.made = True
        if self._wait_to_run:
            return super().wait(timeout)
        return self.is_set()

    def wait_until_running(self, timeout: float | None) -> bool:
        """The wait ``Thread.start()`` would have made."""
        return super().wait(timeout)

    def _at_fork_reinit(self) -> None:
        # Called for every thread by threading's after-fork hook, in the
        # child only. A thread not yet running is not in the child: it must
        # not count as alive there, nor make join() wait for it for good.
        super()._at_fork_reinit()  # type: ignore[misc]
        if self.made and not self.is_set():
            self.made = False
            self.forked_away = True


_THREAD_START = threading.Thread.start.__code__
_STARTED_WAIT = _StartedEvent.wait.__code__


class WorkerThread(threading.Thread):
    """A pool's worker thread, started without waiting for it to run unless
    ``wait_to_run`` (see ``_StartedEvent``). Until it runs it answers as a
    running thread: ``is_alive()`` is true and ``join()`` waits for it (the
    standard library's would raise "cannot join thread before it is
    started"; code in the wild and CPython's own tests join
    ``executor._threads``)."""

    def __init__(self, *args: Any, wait_to_run: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._started = _StartedEvent(wait_to_run)

    def started_or_made(self) -> bool:
        """The thread runs or ran, or ``start()`` made it (and got as far as
        waiting for it, which may not wait)."""
        started = self._started
        return started.is_set() or started.made

    def made_despite(self, error: BaseException) -> bool:
        """Whether ``start()``, which raised ``error`` (or was not reached),
        made the thread: it runs, or ``Thread.start`` got as far as its
        wait for it (which comes after the thread is made, and may return at
        once), or the interrupt landed as that wait was called. An interrupt
        landing between the thread being made and that call is taken for
        "not made": such a worker finds its place given back and exits
        before taking any work (``WorkerSlot.take``)."""
        if self.started_or_made():
            return True
        tb = error.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code is _THREAD_START:
                inner = tb.tb_next
                return inner is not None and inner.tb_frame.f_code is _STARTED_WAIT
            tb = tb.tb_next
        return False

    def start(self) -> None:
        if self._started.made:
            # Thread.start() looks at the event, which is not set until
            # the thread runs: a second start before then would make a
            # second OS thread.
            raise RuntimeError("threads can only be started once")
        super().start()

    def is_alive(self) -> bool:
        started = self._started
        return (started.made and not started.is_set()) or super().is_alive()

    def join(self, timeout: float | None = None) -> None:
        started = self._started
        if started.forked_away:
            return  # made by the parent, never to run in this child
        if started.made and not started.is_set():
            if timeout is None:
                started.wait_until_running(None)
            else:
                end = time.monotonic() + timeout
                if not started.wait_until_running(timeout):
                    return
                timeout = max(0.0, end - time.monotonic())
        super().join(timeout)
