"""Interrupting blocking calls on the main thread at a deadline.

An asynchronous exception (``PyThreadState_SetAsyncExc``) waits for the next
bytecode boundary, so it never ends a ``time.sleep``, a blocking
``socket.recv``, ``select`` or ``subprocess.wait``. A signal does: on POSIX
the system call returns ``EINTR``, CPython runs the Python signal handler
before retrying it (PEP 475), and when that handler raises, the blocking call
raises. Python signal handlers run only on the main thread, so this works
there and only there; other threads keep the asynchronous exception (pure
Python code only), as do platforms without ``signal.pthread_kill`` (Windows).

How: while at least one ``interrupt=True`` scope is open on the main thread,
``SIGNAL`` (``SIGURG``) has taut's handler; the user's handler is kept and put
back when the last such scope closes. At expiry the timer thread sends
``SIGNAL`` to the main thread itself (``Deadline.signal_main_thread``: no GIL
needed, so pure Python code that holds the GIL is interrupted within the
timer's own lateness, not after the switch interval), and taut's Python
callback thread sends it with ``signal.pthread_kill`` once it has the GIL;
the handler raises the scope's interrupt exception. ``SIGURG`` because its
default action is to ignore it: a signal that arrives after the user's
handler is back does no harm, and nothing in the standard library uses it. A
``SIGURG`` that taut did not send is passed on to the user's handler; one
the timer thread sent is sent or dropped by the time the scope's
``cancel()`` returns, and taken by taut's handler before the user's is back.

The signal is sent again (after 1 ms, backing off to 50 ms) until the
interrupt has been raised or the scope closed: a signal that lands between
the GIL's release and the start of the system call interrupts nothing. The
handler never raises inside taut's own scope entry/exit code (that code
decides from the clock anyway, and an exception there would leave the scope
half-closed); the next signal lands once control is back in the user's code.
"""

from __future__ import annotations

import functools
import signal
import threading
from types import CodeType, FrameType
from typing import Any, Callable, Protocol

from taut import _core

__all__ = ["SIGNAL", "arm", "available", "disarm", "protect", "raise_again"]

SIGNAL: int | None = getattr(signal, "SIGURG", None)


class _Interruptible(Protocol):
    def _interrupt_due(self) -> bool:
        """True if the deadline has passed and no interrupt was raised yet."""

    def _interrupt_error(self) -> BaseException:
        """The exception to raise; also records that it was raised."""

    def _interrupt_lost(self) -> None:
        """The exception raised was dropped (a finalizer ran): not raised yet."""

    def _interrupt_block(self) -> FrameType | None:
        """A frame that must be on the stack for the interrupt to land (a
        task's block, not while suspended at an ``await``), or None."""


# Main-thread interrupt scopes, in entry order. Read and written only with the
# GIL held, from the main thread, the callback thread and the handler.
_active: list[_Interruptible] = []
_previous: Any = None
# True between a pthread_kill of ours and the handler run that consumes it.
_sent = False
_RESEND_FIRST_S = 0.001
_RESEND_MAX_S = 0.05
# Code objects of scope entry/exit: the handler must not raise in them, nor
# the callback thread set an asynchronous exception for a thread in them.
_protected: set[CodeType] = set()


def protect(*functions: Callable[..., Any]) -> None:
    """Mark functions (scope entry/exit) in which no interrupt is raised."""
    for fn in functions:
        _protected.add(fn.__code__)


def available() -> bool:
    """True if a scope entered on this thread can interrupt blocking calls."""
    if SIGNAL is None or not hasattr(signal, "pthread_kill"):
        return False
    if threading.get_ident() != threading.main_thread().ident:
        return False
    if _active:
        return True
    try:
        # None: a handler installed from C that signal.signal cannot restore.
        return signal.getsignal(SIGNAL) is not None
    except ValueError:  # pragma: no cover - not the main interpreter
        return False


def arm(scope: _Interruptible, deadline: _core.Deadline) -> None:
    """On the main thread (``available()``): interrupt ``scope`` at expiry."""
    global _previous
    assert SIGNAL is not None
    if not _active:
        # A signal the timer thread sent for an earlier scope may have gone
        # to the program's handler after all (held back by a signal mask
        # until that scope had closed): its count must not make the
        # program's next signal look like taut's.
        _core._take_sent_signals()
        current = signal.getsignal(SIGNAL)
        if current is not _handler:
            # (Ours still: left by a scope closed on another thread, with
            # the program's handler kept in _previous; see disarm.)
            _previous = current
        signal.signal(SIGNAL, _handler)
    _active.append(scope)
    # At expiry the timer thread signals this thread at once, GIL or not.
    # If the deadline already passed it sends nothing: the callback thread
    # does, once this thread lets go of the GIL, which is in the block
    # (hence call_soon last).
    deadline.signal_main_thread(SIGNAL)
    deadline.call_soon(lambda: _send_if_due(scope))


def disarm(scope: _Interruptible) -> None:
    """``scope`` closed: no interrupt for it any more; the user's handler is
    back once no interrupt scope is open."""
    global _previous
    # Safe to run again when an exception from another signal handler (a
    # Ctrl-C) cut it short: each step checks what is left to do, and the
    # program's handler is forgotten only once it is back.
    if scope in _active:
        _active.remove(scope)
    if not _active:
        assert SIGNAL is not None
        if threading.get_ident() != threading.main_thread().ident:
            # Closed on another thread, where signal.signal raises
            # ValueError (a scope's exit there is refused before it gets
            # here; kept for any other close from elsewhere). Ours stays, passing every
            # SIGURG on to the program's handler (nothing is due), until
            # the main thread's next interrupt scope closes.
            return
        if signal.getsignal(SIGNAL) is not _handler:
            _previous = None
            return  # replaced meanwhile by the program: its handler stays
        # The scope's cancel() returned, so the timer thread's signal was
        # sent already (it is pending on this thread) or never will be. A
        # system call's return delivers a pending signal to the C handler,
        # and signal.signal first runs pending handlers: a signal of ours is
        # consumed by _handler here (and ignored, nothing is due), never by
        # the program's handler once it is back.
        signal.pthread_sigmask(signal.SIG_BLOCK, ())
        signal.signal(SIGNAL, _previous if _previous is not None else signal.SIG_DFL)
        _previous = None


def raise_again(scope: _Interruptible) -> None:
    """On the main thread: ``scope``'s interrupt was raised inside a finalizer,
    which dropped it (see ``taut.deadline._lost_interrupts``); raise it again."""
    if scope in _active:
        scope._interrupt_lost()
        # From the callback thread, as at expiry: a signal sent from here
        # would be handled at once, inside the machinery that drops it.
        _core.Deadline(0.0).call_soon(lambda: _send_if_due(scope))


def _send() -> None:
    global _sent
    main = threading.main_thread().ident
    if SIGNAL is None or main is None:
        return
    _sent = True
    signal.pthread_kill(main, SIGNAL)


def _send_if_due(scope: _Interruptible, attempt: int = 0) -> None:
    """On the callback thread, GIL held: the main thread cannot close the scope
    between this check and the signal's arrival.

    Sent again, 1 ms later and then backing off to every 50 ms, until the
    interrupt was raised or the scope closed: a signal that arrives after the
    main thread released the GIL for a blocking call but before the system
    call itself began interrupts nothing (its C handler ran already), and
    this thread runs exactly when the GIL is released."""
    if scope in _active and scope._interrupt_due():
        _send()
        delay = min(_RESEND_MAX_S, _RESEND_FIRST_S * 2**attempt)
        retry = _core.Deadline(_core.monotonic() + delay)
        retry.call_soon(lambda: _send_if_due(scope, attempt + 1))


def _running(scope: _Interruptible, frame: FrameType | None) -> bool:
    """Whether ``scope``'s block runs here: a task's block suspended at an
    ``await`` does not (the loop or another task runs; the task is cancelled
    instead, and the signal is sent again until the scope closes)."""
    block = scope._interrupt_block()
    while block is not None and frame is not None:
        if frame is block:
            return True
        frame = frame.f_back
    return block is None


def _in_scope_machinery(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code in _protected:
            return True
        frame = frame.f_back
    return False


def _handler(signum: int, frame: FrameType | None) -> None:
    global _sent
    # Sent by the callback thread (_sent) or by the timer thread (counted in
    # Rust); both are taken, as pending signals of one number merge.
    sent_by_timer = _core._take_sent_signals() > 0
    ours, _sent = _sent or sent_by_timer, False
    due = next((s for s in _active if s._interrupt_due() and _running(s, frame)), None)
    if due is None:
        if not ours:
            _forward(signum, frame)
        return
    if _in_scope_machinery(frame):
        # The scope's repeated signal lands once this code has returned.
        return
    if frame is not None and _raised_after_the_jump(frame, due):
        return
    raise due._interrupt_error()


def _raised_after_the_jump(frame: FrameType, scope: _Interruptible) -> bool:
    """At a loop's backward jump on CPython 3.13, have ``scope``'s interrupt
    raised at the frame's next instruction instead (``taut._backward_jump``)."""
    from taut import _backward_jump

    if not _backward_jump.at_backward_jump(frame):
        return False
    return _backward_jump.raise_at_next_instruction(
        frame.f_code, threading.get_ident(), functools.partial(_error_if_due, scope)
    )


def _error_if_due(scope: _Interruptible) -> BaseException | None:
    if scope in _active and scope._interrupt_due():
        return scope._interrupt_error()
    return None


# A signal handled while the handler runs finds it on the stack and leaves
# the raising to it: raised from there, the exception would reach the
# interrupted frame where it was interrupted, maybe its backward jump.
protect(_handler)


def _forward(signum: int, frame: FrameType | None) -> None:
    # SIG_DFL (SIGURG's default: ignore it) and SIG_IGN: nothing to do.
    previous = _previous
    if callable(previous):
        previous(signum, frame)
