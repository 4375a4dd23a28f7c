"""Which scopes bound the running code: the chain of entered scopes, kept in
a ``contextvars.ContextVar``, and what it answers (``remaining()``).

Each scope links to the scope it was entered in. A context copied into a
worker thread keeps the chain, so the worker stays bounded by the caller's
deadline even after the caller's scope has closed (``remaining()`` then says
0, not "unbounded"). Scopes abandoned by misnesting, or exited in another
context than the one they were entered in, are skipped everywhere.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

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
    (never negative), or ``None`` outside any bounded scope. Each scope is
    read on its own clock: one entered under ``taut.testing.scope_clock()``
    on the mock clock, a real one around it on the real clock."""
    scope = bounding_scope()
    left: float | None = None
    while scope is not None:
        at = scope._effective
        if at is not None:
            here = max(0.0, at - scope._clock())
            if left is None or here < left:
                left = here
        # On to the scopes of the next clock out (usually there are none).
        scope = scope._outer
        while scope is not None and scope._abandoned:
            scope = scope._parent
    return left
