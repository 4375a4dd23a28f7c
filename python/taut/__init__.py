"""taut: deadlines that really fire and worker pools that stay bounded.

A Rust core (``taut._core``) provides a bounded FIFO worker pool, one monotonic
deadline timer thread per process and platform-safe timeout clamping; this
package adds a thin Python layer on top of them.
"""

from __future__ import annotations

from taut import _timer  # noqa: F401  (fork and exit hooks of the timer thread)
from taut._core import __version__
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
from taut.journal import (
    InMemoryJournal,
    Journal,
    JournaledError,
    JournalError,
    JournalRecord,
    SqliteJournal,
)

__all__ = [
    "Budget",
    "ConfigWarning",
    "InMemoryJournal",
    "Journal",
    "JournalError",
    "JournalRecord",
    "JournaledError",
    "PlanningConstraints",
    "SqliteJournal",
    "TautConfig",
    "__version__",
    "concurrent_batch_timeout",
    "load_config",
    "resolve_timeout",
    "sequential_call_timeout",
    "tool_workers",
]
