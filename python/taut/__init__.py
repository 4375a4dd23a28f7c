"""taut: deadlines that really fire and worker pools that stay bounded.

A Rust core (``taut._core``) provides a bounded FIFO worker pool, one monotonic
deadline timer thread per process and platform-safe timeout clamping; this
package adds a thin Python layer on top of them.
"""

from __future__ import annotations

from taut import _timer  # noqa: F401  (fork and exit hooks of the timer thread)
from taut._core import __version__
from taut.bounded import TautStats, run_bounded_async, run_bounded_sync, stats
from taut.executor import (
    Future,
    PoolStats,
    QueueFull,
    ThreadPoolExecutor,
    default_executor,
)
from taut.process import ProcessResult, kill_process_tree, run_process

__all__ = [
    "Future",
    "PoolStats",
    "ProcessResult",
    "QueueFull",
    "TautStats",
    "ThreadPoolExecutor",
    "__version__",
    "default_executor",
    "kill_process_tree",
    "run_bounded_async",
    "run_bounded_sync",
    "run_process",
    "stats",
]
