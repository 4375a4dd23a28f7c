"""Module-level locks of taut that a fork must not copy while another
thread holds them: the child would get the lock held by a thread it does
not have, and its first use would wait for good (a config file being read
and validated in one thread while another forks, say). As the standard
library does for its own (``concurrent.futures.thread``, ``logging``): a
fork waits until no other thread holds one, and the child gets each fresh.

Imported by ``taut/__init__`` before any module that registers fork hooks
of its own, so these run first in the child (after-fork hooks run in the
order they were registered): no other hook finds one of them still held."""

from __future__ import annotations

import os
import threading

# How long a fork waits for another thread to let go of one of these locks
# (each is held for a file read and parse at most). Past this the fork goes
# ahead, and the child still gets the lock fresh.
_FORK_WAIT_S = 10.0

_locks: list[threading.Lock] = []
_taken: list[threading.Lock] = []


def fork_safe_lock() -> threading.Lock:
    """A ``threading.Lock`` that no other thread holds at a fork, and that
    a forked child gets free."""
    lock = threading.Lock()
    _locks.append(lock)
    return lock


def _before_fork() -> None:
    # Always in the order they were made, so two forking threads never
    # wait for each other.
    for lock in _locks:
        if lock.acquire(timeout=_FORK_WAIT_S):
            _taken.append(lock)


def _after_fork_in_parent() -> None:
    while _taken:
        _taken.pop().release()


def _after_fork_in_child() -> None:
    _taken.clear()
    for lock in _locks:
        # Free, also one still held by a thread of the parent (the wait
        # above gave up on it): that thread does not exist here.
        lock._at_fork_reinit()  # type: ignore[attr-defined]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
