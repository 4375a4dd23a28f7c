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


def generator_kind(fn: object) -> str:
    """``"a generator"`` or ``"an async generator"`` if calling ``fn`` makes
    one, else ``""``: its body then runs only as it is iterated, later and
    elsewhere. inspect sees through ``functools.partial``; an object's
    ``__call__`` counts too."""
    for f in (fn, getattr(fn, "__call__", None)):  # noqa: B004 - generator __call__ objects
        if inspect.isasyncgenfunction(f):
            return "an async generator"
        if inspect.isgeneratorfunction(f):
            return "a generator"
    return ""
