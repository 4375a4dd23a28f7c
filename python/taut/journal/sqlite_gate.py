"""The gate into SQLite: a fork waits until no thread of this process is
inside SQLite through a journal, and no thread goes in until the fork is made.

SQLite keeps process-wide mutexes (its allocator's above all: every
allocation of every connection takes it). A fork that lands while another
thread holds one copies it locked into the child, whose first query then
waits for ever. A journal's own lock does not cover this: a journal being
opened (not yet known to a fork hook), two journals in use at once, and a
connection freed by the garbage collector on whatever thread it runs all
enter SQLite outside it. So every entry into SQLite by a journal passes this
gate: shared (journals on many threads go in at once), closed by a fork.

Connections of journals freed without ``close()`` wait here to be closed
inside the gate, by the next thread that goes in (or by a fork). A child
does not close a connection it inherited (SQLite: using one across a fork
can undo the parent's locks); it keeps them, unused, in
:data:`taut.journal.sql.inherited` with the journals' own, until it exits.

Limits: a thread waiting in SQLite's own busy handler (another process
holds the write lock) is inside, so a fork then waits for it, up to
``_FORK_WAIT_S``, and goes ahead past that; SQLite used outside the journals
(the program's own connections) is not gated.
"""

from __future__ import annotations

import os
import sqlite3
import threading

from taut.journal.sql import inherited

__all__ = ["GatedLock", "close_later"]

# How long a fork waits for the threads inside SQLite to come out (a few
# milliseconds; a stalled disk may take longer). Past this it goes ahead.
_FORK_WAIT_S = 10.0


class _Gate:
    """Shared by the threads inside SQLite, closed by a forking thread. A
    thread already inside goes in again at once (a journal call nests), and
    a forking thread never waits for itself: neither when it forks from
    inside nor when a finalizer or signal handler of its own calls a journal
    half-way through the fork (the lock is re-entrant for the same reason)."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.RLock())
        self._inside = 0  # threads inside now
        self._forks = 0  # forks waiting or being made: nobody else goes in
        # This thread: how deep it is inside ("n"), whether it is forking.
        self._mine = threading.local()
        # Connections to close inside the gate (appended by __del__, which
        # takes no lock: the collector may run inside the gate's own lock).
        self._to_close: list[sqlite3.Connection] = []

    def _depth(self) -> int:
        return getattr(self._mine, "n", 0)

    def _forking_here(self) -> bool:
        return getattr(self._mine, "forking", False)

    def enter(self) -> None:
        depth = self._depth()
        if depth == 0:
            with self._changed:
                while self._forks > 0 and not self._forking_here():
                    self._changed.wait()
                self._inside += 1
        self._mine.n = depth + 1

    def leave(self) -> None:
        depth = self._depth() - 1
        self._mine.n = depth
        if depth == 0:
            with self._changed:
                self._inside -= 1
                if not self._inside:
                    self._changed.notify_all()

    def close_later(self, conn: sqlite3.Connection) -> None:
        self._to_close.append(conn)

    def close_waiting(self) -> None:
        """Close the connections of journals freed unclosed (call inside)."""
        while True:
            try:
                conn = self._to_close.pop()
            except IndexError:  # empty, or another thread took the last one
                return
            try:
                conn.close()
            except sqlite3.Error:
                pass  # it is gone either way

    # -- fork ------------------------------------------------------------
    def before_fork(self) -> None:
        here = 1 if self._depth() else 0
        # Marked before counted: an exception between the two (a signal
        # handler's) then costs at most one uncounting too many, which the
        # clamp below absorbs, never a gate closed for good.
        self._mine.forking = True
        with self._changed:
            self._forks += 1
            self._changed.wait_for(lambda: self._inside <= here, timeout=_FORK_WAIT_S)
        # Nobody else is inside now (unless the wait gave up): closing the
        # waiting connections here cannot race with the fork.
        self.close_waiting()

    def after_fork_in_parent(self) -> None:
        if not self._forking_here():
            return  # before_fork did not get as far as counting this fork
        self._mine.forking = False
        with self._changed:
            self._forks = max(self._forks - 1, 0)
            self._changed.notify_all()

    def after_fork_in_child(self) -> None:
        # Fresh: a thread of the parent may have held the condition's lock,
        # and only this thread exists here.
        self._changed = threading.Condition(threading.RLock())
        self._inside = 1 if self._depth() else 0
        self._forks = 0
        self._mine.forking = False
        inherited.extend(self._to_close)
        self._to_close.clear()


_gate = _Gate()
close_later = _gate.close_later

if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_gate.before_fork,
        after_in_parent=_gate.after_fork_in_parent,
        after_in_child=_gate.after_fork_in_child,
    )


class GatedLock:
    """A journal's re-entrant lock, held inside the gate: what a journal does
    under it (every call into SQLite) is never split by a fork."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.RLock()

    def __enter__(self) -> None:
        _gate.enter()
        try:
            self._lock.acquire()
        except BaseException:
            _gate.leave()
            raise
        try:
            _gate.close_waiting()
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()
        _gate.leave()
