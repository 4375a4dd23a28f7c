"""Which scopes bound the running code: the chain of entered scopes, kept in
a ``contextvars.ContextVar``, and what it answers (``remaining()``).

Each scope links to the scope it was entered in. A context copied into a
worker thread keeps the chain, so the worker stays bounded by the caller's
deadline even after the caller's scope has closed (``remaining()`` then says
0, not "unbounded"). Scopes abandoned by misnesting are skipped everywhere.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

from taut.deadline import _clock

if TYPE_CHECKING:
    from taut.deadline._scope import DeadlineScope

__all__ = ["remaining"]

# The innermost scope entered in the current context (None outside any scope).
innermost: contextvars.ContextVar[DeadlineScope | None] = contextvars.ContextVar(
    "taut_innermost_scope", default=None
)


def bounding_scope() -> DeadlineScope | None:
    """The innermost scope whose deadline bounds this context."""
    scope = innermost.get()
    while scope is not None and scope._abandoned:
        scope = scope._parent
    return scope


def open_scope() -> DeadlineScope | None:
    """The innermost scope of this context that is still open."""
    scope = innermost.get()
    while scope is not None and scope._closed:
        scope = scope._parent
    return scope


def remaining() -> float | None:
    """Seconds left before the earliest deadline of the enclosing scopes
    (never negative), or ``None`` outside any bounded scope."""
    at = current_deadline()
    if at is None:
        return None
    return max(0.0, at - _clock.current[0]())


def current_deadline() -> float | None:
    """The effective absolute deadline of this context (clock seconds)."""
    scope = bounding_scope()
    return None if scope is None else scope._effective
