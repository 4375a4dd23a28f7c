"""taut: deadlines that really fire and worker pools that stay bounded.

A Rust core (``taut._core``) provides a bounded FIFO worker pool, one monotonic
deadline timer thread per process and platform-safe timeout clamping; this
package adds a thin Python layer on top of them.

``import taut`` loads only the core and the executor: a gateway that imports
taut for its ``ThreadPoolExecutor`` pays less than for ``import asyncio``. Every
other public name (deadline scopes, bounded runs, gathers, journals, process
trees, configuration, planning constraints, tool batches) is loaded from its
module on first use, through the module ``__getattr__`` below; pydantic, PyYAML
and psutil are imported only by the code that needs them.
"""

from __future__ import annotations

import sys
import types

from taut import (
    _fork_locks,  # first: its fork hooks run before the others
    _lazy_import,
    _timer,  # noqa: F401  (fork and exit hooks of the timer thread)
)
from taut._core import __version__
from taut.executor import (
    Future,
    QueueFull,
    ThreadPoolExecutor,
    default_executor,
)

# `import taut` imports no `typing`: with what it pulls in beyond
# concurrent.futures, it made `import taut` a sixth slower (README). So this
# module and every module it loads has a TYPE_CHECKING of its own (type
# checkers take any module-level name TYPE_CHECKING as theirs) and imports
# from `typing` only what type checkers read; PoolStats, a typing.NamedTuple,
# loads on first use (tests/test_import.py checks). One consequence:
# typing.get_type_hints() cannot resolve the annotations of taut's own
# functions (Any, Callable); users' annotations naming taut's types resolve.
TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ loads these
    from typing import Any

    from taut._asyncio import to_thread
    from taut._pool_stats import PoolStats
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
        JournaledTimeoutError,
        JournalError,
        JournalRecord,
        PostgresJournal,
        Reservation,
        SqliteJournal,
    )
    from taut.process import ProcessResult, kill_process_tree, run_process
    from taut.stats import TautStats, stats
    from taut.tools import QueueNotice, ToolCall, ToolResult, ToolRunner, ToolStatus

# Each lazily loaded module and the public names it defines (separated by
# spaces). Keep in step with the TYPE_CHECKING imports above
# (tests/test_import.py checks both ways).
_LAZY_MODULES: dict[str, str] = {
    "taut._pool_stats": "PoolStats",
    "taut._asyncio": "to_thread",
    "taut.bounded": "run_bounded_async run_bounded_sync",
    "taut.config": (
        "ConfigWarning TautConfig concurrent_batch_timeout load_config resolve_timeout"
        " sequential_call_timeout tool_workers"
    ),
    "taut.constraints": "Budget PlanningConstraints",
    "taut.deadline": (
        "MAX_TIMEOUT BoundedResult DeadlineExpired DeadlineScope clamp_timeout fail_after fail_at"
        " move_on_after move_on_at remaining"
    ),
    "taut.gather": "Call GatherRejected Outcome OutcomeStatus Scheduler agather call gather",
    "taut.journal": (
        "InMemoryJournal Journal JournalBusy JournalError JournalRecord JournaledError"
        " JournaledTimeoutError PostgresJournal Reservation SqliteJournal"
    ),
    "taut.process": "ProcessResult kill_process_tree run_process",
    "taut.stats": "TautStats stats",
    "taut.tools": "QueueNotice ToolCall ToolResult ToolRunner ToolStatus",
}
_LAZY: dict[str, str] = {
    name: module for module, names in _LAZY_MODULES.items() for name in names.split()
}

# Public names that are also submodules: as an attribute of ``taut`` the name
# means the function (``taut.gather(...)``, ``taut.stats()``), the module is
# reached with ``from taut.gather import ...``.
_FUNCTIONS_OVER_MODULES = frozenset({"gather", "stats"})


class _Package(types.ModuleType):
    """The ``taut`` module's type while ``taut.gather`` or ``taut.stats`` is
    first imported: keeps the function of that name from being replaced by
    its submodule.

    The import system binds every submodule on its package once it is loaded;
    ``from taut.gather import Scheduler`` before the first ``taut.gather`` would
    otherwise leave ``taut.gather`` pointing at the module for good.

    Only meanwhile: an attribute of a module subclass takes a longer path
    than one of a plain module. Measured on CPython 3.13, ``taut.fail_after``
    cost about 570 instructions as a ``_Package`` and 390 as a plain module,
    against a whole ``async with fail_after(...)`` of some 14,000. (Neither
    gets CPython 3.12+'s few-instruction module lookup: a module with a
    ``__getattr__``, the lazy loading below, is never specialized; code on
    a hot path binds the name once, ``from taut import fail_after``.)
    """

    def __setattr__(self, name: str, value: object) -> None:
        if name in _FUNCTIONS_OVER_MODULES and isinstance(value, types.ModuleType):
            _bound(name)
            return
        super().__setattr__(name, value)


_binding_lock = _fork_locks.fork_safe_lock()
_unbound: set[str] = set()  # such submodules loading, not yet bound on taut


def _expect_binding(name: str) -> None:
    """Called first thing by ``taut.gather`` and ``taut.stats``: until the
    import system has bound the module, ``taut`` is a ``_Package``."""
    with _binding_lock:
        _unbound.add(name)
        object.__setattr__(sys.modules[__name__], "__class__", _Package)


def _bound(name: str) -> None:
    with _binding_lock:
        _unbound.discard(name)
        if not _unbound:
            object.__setattr__(sys.modules[__name__], "__class__", types.ModuleType)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_lazy_import.load(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


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
    "JournaledTimeoutError",
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
