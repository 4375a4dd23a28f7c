"""What calling a callable gives, decided in one place for the layers that
must tell (a handle, a tool, a bounded run)."""

from __future__ import annotations

import inspect


def is_coroutine_function(fn: object) -> bool:
    """Whether calling ``fn`` makes a coroutine: inspect sees through
    ``functools.partial``; an object's ``async def __call__`` counts too."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - async __call__ objects
    )
