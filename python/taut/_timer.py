"""Process-lifecycle hooks of the Rust timer thread.

Imported once by ``taut``: a forked child gets a fresh timer (the parent's
timer thread does not exist there and its locks may be frozen), and the timer
thread and taut's Python callback thread stop before the interpreter
finalises, from an ``atexit`` hook. That hook runs after the non-daemon
threads have been joined (a non-daemon thread may still be inside a deadline
scope whose expiry, an interrupt or a Python callback, is what lets it end)
and while Python is fully alive, before any thread can meet a finalising
interpreter.
"""

from __future__ import annotations

import atexit
import os

from taut import _core


def _register() -> None:
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_core._timer_after_fork)
    # Not threading._register_atexit: those hooks run before the non-daemon
    # threads are joined, and a thread still waiting for a deadline's Python
    # callback or interrupt would then wait forever, and exit with it.
    atexit.register(_core._timer_shutdown)


_register()
