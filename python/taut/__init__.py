"""taut: deadlines that really fire and worker pools that stay bounded.

A Rust core (``taut._core``) provides a bounded FIFO worker pool, one monotonic
deadline timer thread per process and platform-safe timeout clamping; this
package adds a thin Python layer on top of them.
"""

from __future__ import annotations

from taut._core import __version__
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
    Scheduler,
    agather,
    call,
    gather,
)
from taut.tools import QueueNotice, ToolCall, ToolResult, ToolRunner

__all__ = [
    "Call",
    "Future",
    "GatherRejected",
    "Outcome",
    "PoolStats",
    "QueueFull",
    "QueueNotice",
    "Scheduler",
    "ThreadPoolExecutor",
    "ToolCall",
    "ToolResult",
    "ToolRunner",
    "__version__",
    "agather",
    "call",
    "default_executor",
    "gather",
]
