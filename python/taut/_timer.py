"""Process-lifecycle hooks of the Rust timer thread.

Imported once by ``taut``: a forked child gets a fresh timer (the parent's
timer thread does not exist there and its locks may be frozen), and the timer
thread and taut's Python callback thread stop before the interpreter
finalises, from a ``threading._register_atexit`` hook, which runs before
non-daemon threads are joined and while Python is fully alive.
"""

from __future__ import annotations

import os
import threading

from taut import _core


def _register() -> None:
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_core._timer_after_fork)
    register_atexit = getattr(threading, "_register_atexit", None)
    if register_atexit is not None:
        try:
            register_atexit(_core._timer_shutdown)
        except RuntimeError:
            # Imported while the interpreter is already shutting down.
            pass


_register()
