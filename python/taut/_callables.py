"""What calling a callable gives, decided in one place for the layers that
must tell (a handle, a tool, a bounded run)."""

from __future__ import annotations

import inspect
from collections.abc import Coroutine
from types import CoroutineType, FunctionType, MethodType
from typing import Any, TypeVar, cast

from taut._checks import describe

T = TypeVar("T")


# Code flags of a function whose call makes something that runs later.
_RUNS_LATER = inspect.CO_COROUTINE | inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR


def plainly_returns(fn: object) -> bool:
    """Fast path for the common case, checked on every bounded call: a plain
    Python function (or a method of one) whose code is neither async nor a
    generator, and which carries no attributes (so no coroutine marker and no
    ``__wrapped__``). Anything else takes inspect's full answer."""
    if type(fn) is MethodType:
        fn = fn.__func__
    return type(fn) is FunctionType and not fn.__code__.co_flags & _RUNS_LATER and not fn.__dict__


def _what_runs(fn: object) -> tuple[object, ...]:
    """What calling ``fn`` runs: ``fn``, and an object's own ``__call__``.
    Not a class's: calling a class makes an instance, whatever the
    instances' ``__call__`` would make."""
    if isinstance(fn, type):
        return (fn,)
    return (fn, getattr(fn, "__call__", None))  # noqa: B004 - callable objects


def is_coroutine_function(fn: object) -> bool:
    """Whether calling ``fn`` makes a coroutine: inspect sees through
    ``functools.partial``; an object's ``async def __call__`` counts too."""
    if plainly_returns(fn):
        return False
    for f in _what_runs(fn):
        if inspect.iscoroutinefunction(f):
            return True
    return False


def generator_kind(fn: object) -> str:
    """``"a generator"`` or ``"an async generator"`` if calling ``fn`` makes
    one, else ``""``: its body then runs only as it is iterated, later and
    elsewhere. inspect sees through ``functools.partial``; an object's
    ``__call__`` counts too."""
    if plainly_returns(fn):
        return ""
    for f in _what_runs(fn):
        if inspect.isasyncgenfunction(f):
            return "an async generator"
        if inspect.isgeneratorfunction(f):
            return "a generator"
    return ""


def is_coroutine_value(value: object) -> bool:
    """A coroutine object, native or compiled (Cython). CoroutineType first,
    one C-level check; the ABC only for a value with a send method, so a
    plain value (on every call's path) never pays for its subclass check."""
    return isinstance(value, CoroutineType) or (
        hasattr(type(value), "send") and isinstance(value, Coroutine)
    )


def not_a_coroutine(value: T, fn: object) -> T:
    """``value``, what calling the plain function ``fn`` returned, unless it
    is a coroutine: nothing would ever await it (its body never runs, and
    Python warns "never awaited" later), so it is closed and refused."""
    if is_coroutine_value(value):
        made = getattr(value, "__qualname__", type(value).__name__)
        cast("Coroutine[Any, Any, Any]", value).close()
        raise TypeError(
            f"{_name(fn)} returned a coroutine (from {made}) instead of its result: nothing "
            f"awaits it, so its body would never run; pass the async function itself "
            f"(with its arguments), not a function that calls it"
        )
    return value


def _name(fn: object) -> str:
    name = getattr(fn, "__qualname__", None)
    return f"function {name}" if isinstance(name, str) else describe(fn)
