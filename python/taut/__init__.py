"""taut: deadlines that really fire and worker pools that stay bounded.

A Rust core (``taut._core``) provides a bounded FIFO worker pool, one monotonic
deadline timer thread per process and platform-safe timeout clamping; this
package adds a thin Python layer on top of them.
"""

from __future__ import annotations

from taut import _timer  # noqa: F401  (fork and exit hooks of the timer thread)
from taut._asyncio import to_thread
from taut._core import __version__
from taut.bounded import run_bounded_async, run_bounded_sync
from taut.config import (
    ConfigWarning,
    TautConfig,
    concurrent_batch_timeout,
    load_config,
    resolve_timeout,
    sequential_call_timeout,
    tool_workers,
)
from taut.constraints import Budget, PlanningConstraints
from taut.deadline import (
    MAX_TIMEOUT,
    BoundedResult,
    DeadlineExpired,
    DeadlineScope,
    clamp_timeout,
    fail_after,
    fail_at,
    move_on_after,
    move_on_at,
    remaining,
)
from taut.executor import (
    Future,
    PoolStats,
    QueueFull,
    ThreadPoolExecutor,
    default_executor,
)
from taut.gather import (
    Call,
    GatherRejected,
    Outcome,
    OutcomeStatus,
    Scheduler,
    agather,
    call,
    gather,
)
from taut.journal import (
    InMemoryJournal,
    Journal,
    JournalBusy,
    JournaledError,
    JournalError,
    JournalRecord,
    PostgresJournal,
    Reservation,
    SqliteJournal,
)
from taut.process import ProcessResult, kill_process_tree, run_process
from taut.stats import TautStats, stats
from taut.tools import QueueNotice, ToolCall, ToolResult, ToolRunner, ToolStatus

__all__ = [
    "MAX_TIMEOUT",
    "BoundedResult",
    "Budget",
    "Call",
    "ConfigWarning",
    "DeadlineExpired",
    "DeadlineScope",
    "Future",
    "GatherRejected",
    "InMemoryJournal",
    "Journal",
    "JournalBusy",
    "JournalError",
    "JournalRecord",
    "JournaledError",
    "Outcome",
    "OutcomeStatus",
    "PlanningConstraints",
    "PoolStats",
    "PostgresJournal",
    "ProcessResult",
    "QueueFull",
    "QueueNotice",
    "Reservation",
    "Scheduler",
    "SqliteJournal",
    "TautConfig",
    "TautStats",
    "ThreadPoolExecutor",
    "ToolCall",
    "ToolResult",
    "ToolRunner",
    "ToolStatus",
    "__version__",
    "agather",
    "call",
    "clamp_timeout",
    "concurrent_batch_timeout",
    "default_executor",
    "fail_after",
    "fail_at",
    "gather",
    "kill_process_tree",
    "load_config",
    "move_on_after",
    "move_on_at",
    "remaining",
    "resolve_timeout",
    "run_bounded_async",
    "run_bounded_sync",
    "run_process",
    "sequential_call_timeout",
    "stats",
    "to_thread",
    "tool_workers",
]
