"""Deadlines for Python code: ``DeadlineExpired``, ``BoundedResult``, the
timeout gate ``clamp_timeout`` and the deadline scopes ``fail_after``,
``move_on_after``, ``fail_at`` and ``move_on_at``.

Every scope arms one ``taut._core.Deadline`` on the process's Rust timer
thread, so expiry is noticed on time without the GIL and without an event
loop:

- ``with`` scopes: ``scope.expired`` is a cheap flag for cooperative code.
  ``fail_*`` scopes raise ``DeadlineExpired`` on exit if the deadline passed.
  With ``interrupt=True`` the deadline also interrupts the block:

  * on the main thread (POSIX), the timer's callback thread sends ``SIGURG``
    to it, so a blocking call (``time.sleep``, ``socket.recv``, ``select``,
    ``subprocess.wait``, ``lock.acquire``) returns with EINTR and taut's
    handler raises ``DeadlineExpired`` there; pure-Python code is interrupted
    the same way. A ``SIGURG`` handler the user had is kept, receives the
    ``SIGURG`` taut did not send, and is put back when the last such scope
    closes (see ``taut._signal_interrupt``);
  * on other threads, and where ``signal.pthread_kill`` is missing (Windows)
    or a ``SIGURG`` handler was installed from C, the timer has
    ``DeadlineExpired`` raised at the block's next bytecode boundary: pure
    Python code only; a blocking C call finishes first.

  Either way a bare ``except:`` in the block can swallow the interrupt (the
  exit still raises for ``fail_*`` scopes).
- Inside a running asyncio task, ``async with`` and a plain ``with`` (anyio's
  form) behave alike: at expiry the timer thread wakes the running loop
  through ``taut._loop_waker`` (no GIL needed to wake it), and the loop cancels
  the task as ``asyncio.timeout`` does; ``fail_*`` scopes turn that
  cancellation into ``DeadlineExpired`` (a foreign exception raised while the
  cancellation unwinds gets the ``DeadlineExpired``, caused by the
  ``CancelledError``, in its ``__context__`` chain, as with
  ``asyncio.timeout`` on CPython 3.12+). A cancellation from outside that
  arrives with the expiry wins (``CancelledError`` propagates), told apart by
  the task's cancellation count (``Task.uncancel``, CPython 3.11+); before
  3.11 asyncio keeps no such count, and such a cancellation may be taken for
  the scope's own (swallowed by ``move_on_*``, turned into
  ``DeadlineExpired`` by ``fail_*``). This fires even when asyncio's own
  timers are starved; a loop blocked by synchronous code is
  ``run_bounded_async``'s concern. A plain ``with`` with ``interrupt=True``
  is for synchronous code and keeps the thread interrupt even in a task: it
  can rescue a loop blocked by that code. Should such a block ``await``, the
  interrupt lands only while the block's frame runs (never in the loop or
  another task), and while it is suspended the task is cancelled as above.

A deadline already past at entry is expired at once: ``expired``, the exit
decision and the first ``await`` of a task all compare the clock with the
deadline rather than wait for the timer thread.

Scopes nest: each links to the scope it was entered in, kept in a
``contextvars.ContextVar``, so ``remaining()`` (the earliest deadline of all
enclosing scopes) works in nested code and in worker threads that run in a
copy of the caller's context; such a worker stays bounded by the caller's
deadline even after the caller's scope has closed (``remaining()`` says 0
once it passed, never "unbounded"). Exiting a scope while a scope entered
inside it is still open raises ``RuntimeError`` (as trio does) and closes the
inner one, which then bounds nothing any more. Exiting a scope on another
thread than the one that entered it raises ``RuntimeError`` too, changing
nothing: the entering thread's context cannot be changed from there.

Testing without waiting: scopes read time through a module-level clock,
``time.monotonic`` by default. ``set_clock(fake)`` swaps it (and returns the
previous clock); see ``taut.deadline._clock``.

The modules: ``_errors`` (what a deadline reports), ``_clock``, ``_context``
(the chain of entered scopes), ``_scope`` (``DeadlineScope``), ``_tasks`` (a
scope inside an asyncio task), ``_lost_interrupts`` (an interrupt that a
finalizer dropped is raised again); the four factories are here (``fail_after``
and ``move_on_after`` written in Rust, in ``taut._core``).
"""

from __future__ import annotations

from taut._checks import check_deadline
from taut._core import MAX_TIMEOUT, clamp_timeout

# The relative factories are Rust functions (rust/py_scope.rs): a gateway
# makes a scope per request, and a Python factory's frame cost about a
# sixteenth of the whole scope.
from taut._core import fail_after as fail_after
from taut._core import move_on_after as move_on_after
from taut.deadline import _clock, _context, _errors, _scope
from taut.deadline._clock import set_clock as set_clock
from taut.deadline._context import remaining as remaining
from taut.deadline._errors import BoundedResult as BoundedResult
from taut.deadline._errors import DeadlineExpired as DeadlineExpired
from taut.deadline._scope import DeadlineScope as DeadlineScope

__all__ = ["MAX_TIMEOUT", "clamp_timeout", "fail_after", "fail_at", "move_on_after", "move_on_at"]
# The rest: each module names its public names once, in its own __all__.
__all__ += _errors.__all__
__all__ += _scope.__all__
__all__ += _context.__all__
__all__ += _clock.__all__


def fail_at(
    deadline: object, label: str = "operation", *, interrupt: bool = False
) -> DeadlineScope:
    """``fail_after`` with an absolute ``time.monotonic()`` deadline (checked
    like a timeout; beyond the float range only its sign matters)."""
    return DeadlineScope(None, check_deadline(deadline, "deadline"), True, label, interrupt)


def move_on_at(
    deadline: object, label: str = "operation", *, interrupt: bool = False
) -> DeadlineScope:
    """``move_on_after`` with an absolute ``time.monotonic()`` deadline."""
    return DeadlineScope(None, check_deadline(deadline, "deadline"), False, label, interrupt)
