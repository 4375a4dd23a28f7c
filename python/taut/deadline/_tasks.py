"""A deadline scope inside an asyncio task: finding the task, and turning the
task's cancellation at expiry into the scope's outcome on exit.

At expiry the timer thread wakes the task's loop (``taut._loop_waker``) and
the scope cancels the task, as ``asyncio.timeout`` does. On exit, a
cancellation the scope asked for becomes ``DeadlineExpired`` (``fail_*``) or
is swallowed (``move_on_*``); a cancellation someone else asked for too wins.
"""

from __future__ import annotations

import asyncio
import builtins
import sys
from typing import TYPE_CHECKING, Any, Callable, cast

from taut.deadline._errors import DeadlineExpired, ScopeInterrupt

if TYPE_CHECKING:
    from taut.deadline._scope import DeadlineScope

__all__ = ["HAS_CANCELLING", "exit_task", "get_running_loop", "running_task", "task_of"]

# Task.cancelling()/uncancel(): CPython 3.11+.
HAS_CANCELLING = sys.version_info >= (3, 11)

get_running_loop: Callable[[], asyncio.AbstractEventLoop | None] = asyncio._get_running_loop

# The running task of a running loop, without a Python frame: before 3.12
# asyncio.current_task is a Python function that looks the running loop up
# again (a getpid() system call each time) and then reads this dictionary;
# from 3.12 on it is a C function.
task_of: Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None]
if sys.version_info < (3, 12) and isinstance(getattr(asyncio.tasks, "_current_tasks", None), dict):
    task_of = asyncio.tasks._current_tasks.get  # type: ignore[attr-defined]
else:  # pragma: no cover - depends on the interpreter
    task_of = asyncio.current_task

# BaseExceptionGroup on Python 3.11+.
_EXCEPTION_GROUP: type[BaseException] | None = getattr(builtins, "BaseExceptionGroup", None)


def running_task() -> tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]] | None:
    """The running loop and task of this thread, if code runs inside a task."""
    loop = get_running_loop()
    if loop is None:
        return None
    task = task_of(loop)
    return None if task is None else (loop, task)


def _insert_expiry(exc: BaseException, error: DeadlineExpired) -> None:
    """Put ``error`` (caused by the CancelledError) between ``exc`` and the
    first CancelledError of its ``__context__`` chain, as ``asyncio.timeout``
    does on CPython 3.12+, so a traceback says the cancellation was a timeout."""
    seen: set[int] = set()
    while exc.__context__ is not None and id(exc) not in seen:
        seen.add(id(exc))
        context = exc.__context__
        if isinstance(context, asyncio.CancelledError):
            error.__cause__ = context
            error.__context__ = context
            exc.__context__ = error
            return
        exc = context


def exit_task(
    scope: DeadlineScope, exc_type: type[BaseException] | None, exc: BaseException | None
) -> bool:
    """The exit of a scope entered in a task, when it is not simply in time:
    what ``__exit__``/``__aexit__`` return (True swallows ``exc``)."""
    misnested: RuntimeError | None = None
    try:
        expired = scope._leave()
    except RuntimeError as e:
        misnested, expired = e, bool(scope._expired)
    ours = scope._cancel_requested
    if ours and HAS_CANCELLING:
        task = scope._task
        assert task is not None
        if task.uncancel() > scope._cancelling:  # type: ignore[attr-defined,unused-ignore]
            # Someone else cancelled the task too: theirs wins.
            ours = False
    if misnested is not None:
        raise misnested
    if exc_type is not None and issubclass(exc_type, ScopeInterrupt):
        # An interrupt=True scope's interrupt ended its synchronous code.
        if not expired or not scope._claims_interrupt():
            return False
        if not scope._raise:
            return True
        raise scope._error() from None
    if ours and exc_type is not None:
        if issubclass(exc_type, asyncio.CancelledError):
            if not scope._raise:
                return True
            raise scope._error() from exc
        if exc is not None and not isinstance(exc, DeadlineExpired):
            # A foreign exception raised while the cancellation unwound.
            _insert_expiry(exc, scope._error())
            if _EXCEPTION_GROUP is not None and isinstance(exc, _EXCEPTION_GROUP):
                for inner in cast(Any, exc).exceptions:
                    _insert_expiry(inner, scope._error())
        return False
    if expired and scope._raise and exc_type is None:
        raise scope._error()
    return False
