"""Whether ``threading`` is monkey-patched into greenlets (gevent, eventlet).

Under ``gevent.monkey.patch_all()`` or ``eventlet.monkey_patch()``,
``threading.Thread`` starts a greenlet on the caller's OS thread instead of an
OS thread of its own. taut's own threads (pool workers, the timer's callback
thread) wait in the Rust core, blocking the OS thread they run on: as greenlets
that thread is the process's only one, and every greenlet would hang. They are
refused instead, with this error.
"""

from __future__ import annotations

import sys


def greenlet_threads() -> str | None:
    """The library whose monkey-patching makes ``threading.Thread`` start a
    greenlet (``"gevent"`` or ``"eventlet"``), or None. Looked up in
    ``sys.modules`` only: neither is ever imported here."""
    gevent_monkey = sys.modules.get("gevent.monkey")
    if gevent_monkey is not None and gevent_monkey.is_module_patched("threading"):
        return "gevent"
    eventlet_patcher = sys.modules.get("eventlet.patcher")
    if eventlet_patcher is not None and eventlet_patcher.is_monkey_patched("thread"):
        return "eventlet"
    return None


def refuse_greenlet_thread(what: str, instead: str) -> None:
    """Raise ``RuntimeError`` naming ``what`` (taut's thread that would be a
    greenlet) and ``instead`` (what to use), when threading is patched."""
    patched_by = greenlet_threads()
    if patched_by is not None:
        raise RuntimeError(
            f"{what} cannot run as {patched_by} greenlets: this process's threading is "
            f"monkey-patched by {patched_by}, and a greenlet that waits in taut's Rust core "
            f"blocks the process's only OS thread (every greenlet would hang); {instead}, "
            "or leave threading unpatched "
            "(gevent.monkey.patch_all(thread=False), eventlet.monkey_patch(thread=False))"
        )
