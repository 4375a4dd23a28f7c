"""taut's process-wide counters: :func:`stats` and :class:`TautStats`."""

from __future__ import annotations

import dataclasses

from taut import _expect_binding
from taut._fork_locks import fork_safe_lock
from taut._pool_stats import PoolStats
from taut.executor import default_executor

__all__ = ["TautStats", "counters", "stats"]


@dataclasses.dataclass(frozen=True)
class TautStats:
    """Process-wide counters of the bounded runs, and the default executor's stats."""

    bounded_calls: int
    """Calls of ``run_bounded_sync`` and ``run_bounded_async``."""
    timeouts: int
    """Of those, the ones that returned ``timed_out=True``."""
    abandoned_threads: int
    """Late workers left to finish on their own (each replaced in its pool)."""
    interrupted_threads: int
    """Late workers into which ``DeadlineExpired`` was raised (``interrupt=True``)."""
    abandoned_tasks: int
    """Tasks that did not finish when cancelled at their deadline (they shield
    themselves from cancellation); their outcome is consumed when they end."""
    blocked_loop_reports: int
    """Times an event loop was found blocked past the grace period."""
    executor: PoolStats
    """``taut.executor.default_executor().stats()``."""


class _Counters:
    __slots__ = (
        "abandoned_tasks",
        "abandoned_threads",
        "blocked_loop_reports",
        "bounded_calls",
        "interrupted_threads",
        "lock",
        "timeouts",
    )

    def __init__(self) -> None:
        # `x += 1` on an attribute is not atomic across threads, so updates take
        # this lock; it is uncontended and never held while calling out. One
        # lock for the whole process: a forked child must get it free (a
        # thread of the parent counting at the fork does not exist there).
        self.lock = fork_safe_lock()
        self.bounded_calls = 0
        self.timeouts = 0
        self.abandoned_threads = 0
        self.interrupted_threads = 0
        self.abandoned_tasks = 0
        self.blocked_loop_reports = 0

    def add(self, name: str, n: int = 1) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + n)


counters = _Counters()


def stats() -> TautStats:
    """A snapshot of taut's process-wide counters and of the default executor."""
    with counters.lock:
        snapshot = (
            counters.bounded_calls,
            counters.timeouts,
            counters.abandoned_threads,
            counters.interrupted_threads,
            counters.abandoned_tasks,
            counters.blocked_loop_reports,
        )
    return TautStats(*snapshot, executor=default_executor().stats())


# Last: the import system binds this module on the package once it is
# loaded; taut.stats stays the function (see taut._Package).
_expect_binding("stats")
