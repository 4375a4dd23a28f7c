"""taut's lazy imports (its own modules and the third-party ones it imports
on first use: PyYAML, pydantic's parts, tomllib, psycopg, ...), made safe
against ``fork()``.

``import taut`` loads the agent layer (deadline scopes, gathers, tool
batches, ...) on first use, and that first use may be on any thread. While a
module is being imported, its import locks are held by the importing thread.
A ``fork()`` from another thread at that moment (multiprocessing's default
start method on Linux before 3.14) copies those locks, held, into a child
that does not have the thread that would release them: the child's first use
of the same name waits for ever.

So every lazy load of taut's goes through :func:`load` (or :func:`load_from`,
for a name a package itself imports on first access, as pydantic does), which
counts the loads in flight, and a before-fork hook waits until no other
thread is in the middle of one. Before-fork hooks run last-registered first, and some
take locks an import may need (``logging``'s, taken by every
``getLogger``): the hook is registered at the first load, after those of the
standard library modules taut imports, so that it runs before them. The
wait is bounded: an import that cannot finish (it waits for a lock that a
hook registered later, or the forking thread itself, holds) must not hang
the parent too.
"""

from __future__ import annotations

import importlib
import os
import threading
import types

TYPE_CHECKING = False  # typing's, without importing typing (see taut/__init__)
if TYPE_CHECKING:
    from typing import Any, Callable

__all__ = ["load", "load_from"]

# How long a fork waits for other threads' loads to finish before it goes
# ahead anyway. A load takes milliseconds to a second or two on a busy
# machine (pydantic); one still running after this is stuck.
_FORK_WAIT_S = 10.0

_loads = threading.Condition(threading.Lock())
# Thread ident -> how many loads that thread has in flight (nested loads).
_in_flight: dict[int, int] = {}
_hook_registered = False


def load(name: str) -> types.ModuleType:
    """``importlib.import_module(name)``, counted for the before-fork hook."""
    module: types.ModuleType = _counted(importlib.import_module, name)
    return module


def load_from(name: str, attribute: str) -> Any:
    """``from name import attribute``, counted for the before-fork hook: the
    attribute is read inside the count, since a package may import it only
    then (pydantic's ``TypeAdapter``, ``ValidationError``)."""
    return _counted(lambda: getattr(importlib.import_module(name), attribute))


def _counted(importer: Callable[..., Any], *args: Any) -> Any:
    global _hook_registered
    me = threading.get_ident()
    with _loads:
        _in_flight[me] = _in_flight.get(me, 0) + 1
        if not _hook_registered and hasattr(os, "register_at_fork"):
            _hook_registered = True
            os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
    try:
        return importer(*args)
    finally:
        with _loads:
            left = _in_flight.get(me, 1) - 1
            if left:
                _in_flight[me] = left
            else:
                _in_flight.pop(me, None)
                _loads.notify_all()


def _others_loading() -> bool:
    return any(ident != threading.get_ident() for ident in _in_flight)


def _before_fork() -> None:
    # The condition's lock is released while waiting: the loading threads
    # need it (and the GIL) to say they are done.
    with _loads:
        _loads.wait_for(lambda: not _others_loading(), timeout=_FORK_WAIT_S)


def _after_fork_in_child() -> None:
    global _loads
    # Only the forking thread exists here (its own loads, if it forked in the
    # middle of one, still count); the lock may have been copied held.
    _loads = threading.Condition(threading.Lock())
    mine = _in_flight.get(threading.get_ident())
    _in_flight.clear()
    if mine:
        _in_flight[threading.get_ident()] = mine
