"""An event loop blocked by code that never yields: report every thread's
stack, and on request raise ``DeadlineExpired`` inside the blocking code on
the loop's thread so the loop recovers."""

from __future__ import annotations

import ctypes
import signal
import sys
import threading
import traceback

from taut import _core
from taut.deadline import DeadlineExpired

__all__ = ["clear_interrupt", "format_all_stacks", "install_wake_handler", "interrupt_thread"]


def format_all_stacks(loop_thread: int) -> str:
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        marker = " (event loop thread)" if ident == loop_thread else ""
        parts.append(
            f"Thread {names.get(ident, '<unknown>')} [{ident}]{marker}:\n"
            + "".join(traceback.format_stack(frame))
        )
    return "\n".join(parts)


def _noop_signal_handler(signum: int, frame: object) -> None:
    # Running any Python code lets a pending asynchronous exception land; that is
    # the whole purpose of this handler (see interrupt_thread).
    return None


# SIGURG is ignored by default and unused by Python programs; a no-op handler on
# it makes a blocking system call on the main thread return EINTR and run Python
# code, where DeadlineExpired lands.
_WAKE_SIGNAL: int | None = getattr(signal, "SIGURG", None)
_wake_handler_installed = False


def install_wake_handler() -> None:
    """Install the no-op handler (main thread only: signal.signal requires it),
    unless the program set its own handler for the signal."""
    global _wake_handler_installed
    if _wake_handler_installed or _WAKE_SIGNAL is None:
        return
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(_WAKE_SIGNAL) in (signal.SIG_DFL, None):
        signal.signal(_WAKE_SIGNAL, _noop_signal_handler)
    _wake_handler_installed = signal.getsignal(_WAKE_SIGNAL) is _noop_signal_handler


def _set_async_exc(thread_id: int, exc_type: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_type)
    )


def interrupt_thread(thread_id: int) -> None:
    """Raise ``DeadlineExpired`` in ``thread_id`` at its next bytecode boundary
    (on the main thread also out of a blocking sleep or select)."""
    _set_async_exc(thread_id, DeadlineExpired)
    if (
        _wake_handler_installed
        and _WAKE_SIGNAL is not None
        and thread_id == threading.main_thread().ident
    ):
        # time.sleep(), select() and friends restart after EINTR unless a signal
        # handler raises; ours runs Python code, so the pending exception is raised.
        signal.pthread_kill(thread_id, _WAKE_SIGNAL)


def clear_interrupt() -> None:
    """Drop an interrupt of this thread that was set but has not landed yet, so
    it cannot hit unrelated code later. Not with ``PyThreadState_SetAsyncExc``
    and NULL: before CPython 3.13 that left the interpreter's "asynchronous
    exception pending" flag raised for good (all Python code slower from then
    on, and on 3.11 the next ``sys.settrace`` hook hung the process)."""
    _core._take_back_own_interrupt()
