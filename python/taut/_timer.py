"""Process-lifecycle hooks of the Rust core, and taut's Python callback thread.

Imported once by ``taut``:

- A forked child gets a fresh timer (the parent's timer thread does not exist
  there and its locks may be frozen).
- The timer thread and the callback thread stop before the interpreter
  finalises, from an ``atexit`` hook. It runs after the non-daemon threads
  have been joined (a non-daemon thread may still be inside a deadline scope
  whose expiry, an interrupt or a Python callback, is what lets it end) and
  while Python is fully alive.
- Last of all, taut's GIL gate closes (see ``rust/gil.rs``): from then on no
  thread that waits in Rust with the GIL released comes back into Python.
  In CPython before 3.14 such a thread would be ended with ``pthread_exit``
  while a Rust frame is on its stack, which aborts the process.

The callback thread's loop is Python: it asks Rust for the next callable and
calls it here, so a callback never has a Rust frame below it.
"""

from __future__ import annotations

import atexit
import os
import threading

from taut import _core
from taut._greenlet_threads import refuse_greenlet_thread


def _callback_loop() -> None:
    """Run the Python callbacks of expired deadlines until exit."""
    next_callback = _core._timer_next_callback
    callback = next_callback()
    while callback is not None:
        try:
            callback()
        except BaseException as exc:  # like an exception in a thread: reported, never fatal
            threading.excepthook(
                threading.ExceptHookArgs(
                    [type(exc), exc, exc.__traceback__, threading.current_thread()]
                )
            )
            del exc
        callback = None  # drop it before waiting for the next one
        callback = next_callback()


def _start_callback_thread() -> threading.Thread:
    """Start the callback thread (the Rust core calls this on first need).

    Refused under greenlet monkey-patching (it would block the process's only
    OS thread): the Rust core then reports the RuntimeError to the caller
    that needed the thread, and ``run_bounded_sync`` waits without it."""
    refuse_greenlet_thread(
        "taut's timer callbacks",
        "use deadlines without a Python callback (deadline scopes without "
        "interrupt=True expire by the clock in each greenlet; run_bounded_sync works)",
    )
    thread = threading.Thread(target=_callback_loop, name="taut-timer-callbacks", daemon=True)
    thread.start()
    return thread


def _after_fork_in_child() -> None:
    _core._timer_after_fork()
    _core._gil_gate_after_fork()
    _core._set_main_thread(threading.get_ident())


def _register() -> None:
    _core._set_main_thread(threading.main_thread().ident or 0)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
    # atexit runs its hooks last-registered first: the gate closes after the
    # timer shutdown below, which still needs the callback thread to come
    # back into Python and end.
    atexit.register(_core._close_gil_gate)
    # Not threading._register_atexit: those hooks run before the non-daemon
    # threads are joined, and a thread still waiting for a deadline's Python
    # callback or interrupt would then wait forever, and exit with it.
    atexit.register(_core._timer_shutdown)


_register()
