"""Run leases: one live runner per journal run, fenced by a token.

A journal object is a *runner*. Its first write takes the run's lease: an
owner id (host and PID namespace, pid, random part), an expiry ``lease``
seconds ahead, and a *fencing token* one higher than the run's previous
token. A run whose lease is held by another owner and has not expired
refuses the lease at once
(:class:`~taut.journal.errors.JournalBusy`). Every later write of the runner
checks, in the same transaction, that the run still carries its token (and
pushes the expiry ahead): a runner whose lease ran out and was taken over
holds a stale token, and its writes are refused instead of clobbering the new
owner's slots.

Every write extends the lease. While the runner lives, one daemon thread per
process renews the lease of each open journal object that has not written
for a third of its lease, whether or not calls are running (an agent that
thinks for a minute between two gathers keeps its run). ``close()`` and
interpreter exit release the lease, so the next run starts at once; a runner
that dies without that (SIGKILL, power loss, a frozen VM) holds the run until
its lease expires. A forked child writes under a lease the parent held at the
fork as the same runner (the parent renews and releases it); a lease it takes
itself is its own.

Expiry is read from the storage's clock: PostgreSQL's ``clock_timestamp()``
(one clock for every host), the local wall clock for SQLite (one host),
``time.monotonic`` for the in-memory journal.
"""

from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
import time
import uuid
import weakref
from typing import Protocol

from taut._checks import check_duration, describe

__all__ = ["Lease", "check_lease_seconds", "holder_died_here", "keep_renewing", "stop_renewing"]


# A lease is renewed every third of it, each time with a write transaction:
# a shorter one would have the renewal thread hammer the database (1e-6 s:
# some 700 transactions a second, each an fsync on SQLite) and run out before
# any write could prove it.
MIN_LEASE = 0.1


def check_lease_seconds(lease: object) -> float:
    """``lease`` as a finite number of seconds >= MIN_LEASE, or a clear error."""
    seconds = check_duration(lease, "lease", none_ok=False, zero_ok=False)
    assert seconds is not None  # refused by none_ok=False
    if seconds < MIN_LEASE:
        raise ValueError(
            f"lease must be at least {MIN_LEASE} seconds (it is renewed every third of "
            f"it), got {describe(lease)}"
        )
    return seconds


def _pid_space() -> str | None:
    """Where this process's pids mean something: the host name and, on Linux,
    the PID namespace. Two containers can share a host name (docker compose
    replicas given one ``hostname:``, Kubernetes pods with ``hostNetwork``)
    while each numbers its processes on its own: a live runner's pid 4 in
    one is a pid that does not exist in the other. None where the namespace
    cannot be read: then no holder is ever taken for dead here."""
    host = socket.gethostname()
    if not sys.platform.startswith("linux"):
        return host  # no PID namespaces
    try:
        return f"{host}/pidns{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:  # no /proc (a sandbox): cannot tell
        return None


def _owner_id() -> str:
    # host[/pidnsN]:pid:nonce (parsed from the right: a host name may hold ':')
    space = _pid_space() or socket.gethostname()
    return f"{space}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


class Lease:
    """The lease state of one journal object."""

    __slots__ = ("lost", "owner", "pid", "renewed", "renewed_wall", "seconds", "token")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.renewed = 0.0  # time.monotonic() of the last write or renewal that held it
        self.renewed_wall = 0.0  # time.time() of the same
        self.owner = _owner_id()
        self.token: int | None = None  # None until the first write takes the lease
        self.pid = os.getpid()  # only the process that took the lease releases it
        self.lost: str | None = None  # why this runner may no longer write

    def take_here(self) -> None:
        """The lease is about to be taken. In a forked child (a journal opened
        before the fork, first written after it) it is the child's lease: its
        owner names the child's pid, so a child killed on this host is seen
        dead, and the child's close() and exit release it."""
        if self.pid != os.getpid():
            self.pid = os.getpid()
            self.owner = _owner_id()

    def held(self) -> None:
        """A write or renewal just proved (and extended) the lease."""
        self.renewed = time.monotonic()
        self.renewed_wall = time.time()

    def overdue(self) -> bool:
        """Whether two renewals have been missed since the lease was last
        proven: the runner stood still (SIGSTOP, a paused VM) or could not
        reach the database, and another runner may soon take, or have taken,
        the run over. Both clocks: the monotonic one stops while a VM is
        suspended, the wall clock is what SQLite's expiry is read from."""
        limit = self.seconds * 2 / 3
        return (
            time.monotonic() - self.renewed > limit or time.time() - self.renewed_wall > limit
        )

    def due(self) -> float:
        # A third of the lease after it was last extended: two renewals may fail
        # (a slow database, a busy lock) before the lease can run out under a
        # live runner. A runner that writes often never needs the thread.
        return self.renewed + self.seconds / 3

    def describe(self) -> str:
        return f"owner {self.owner}, token {self.token}"


def holder_died_here(owner: str) -> bool:
    """True when ``owner`` (``host[/pidnsN]:pid:nonce``) is a process of this
    host and PID namespace that no longer exists: a runner killed on this
    machine need not be waited out for its whole lease. A reused pid reads
    as alive, and so does an owner of another PID namespace (another
    container with the same host name: its pid says nothing here) or one
    written without its namespace; that only means waiting for the lease as
    usual (the safe direction)."""
    space = _pid_space()
    parts = owner.rsplit(":", 2)
    if space is None or len(parts) != 3 or parts[0] != space or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, OSError):
        return False
    return False


class _Renewable(Protocol):
    _lease: Lease

    def _renew_lease(self) -> None: ...

    def _release_lease(self) -> None: ...


_journals: weakref.WeakSet[_Renewable] = weakref.WeakSet()
_lock = threading.Lock()
_wake = threading.Event()
_thread: threading.Thread | None = None
_exiting = False


def keep_renewing(journal: _Renewable) -> None:
    """Renew ``journal``'s lease in the background from now on."""
    global _thread
    with _lock:
        if _exiting:
            return
        _journals.add(journal)
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(
                target=_renew_forever, name="taut-journal-lease", daemon=True
            )
            _thread.start()
    _wake.set()  # the shortest lease may have changed


def stop_renewing(journal: _Renewable) -> None:
    with _lock:
        _journals.discard(journal)


def _renew_forever() -> None:
    while True:
        with _lock:
            if _exiting:
                return
            journals = list(_journals)
        held = [j for j in journals if j._lease.token is not None and j._lease.lost is None]
        del journals
        if not _renew_the_due(held):
            return
        due = min((j._lease.due() for j in held), default=None)
        # No reference to a journal may outlive this round: one dropped
        # without close() must be freed (and stop being renewed) at once.
        del held
        # Woken early when a journal takes a new lease (it may be due sooner).
        _wake.wait(None if due is None else max(due - time.monotonic(), 0.001))
        _wake.clear()


def _renew_the_due(held: list[_Renewable]) -> bool:
    """Renew the leases of ``held`` that are due; False once exiting. (A
    function of its own: its loop variable goes when it returns.)"""
    now = time.monotonic()
    for journal in held:
        if _exiting:
            return False
        if journal._lease.due() <= now:
            try:
                journal._renew_lease()
            except Exception:
                # The next write reports the problem to the caller; a renewal
                # that failed for a passing reason is retried soon.
                journal._lease.renewed = now - journal._lease.seconds / 6
    return True


def _release_all_at_exit() -> None:
    global _exiting
    with _lock:
        _exiting = True
        journals = list(_journals)
        thread = _thread
    _wake.set()
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout=2.0)
    mine = [j for j in journals if j._lease.pid == os.getpid()]
    if not mine:
        return
    # Releasing is a courtesy (a lease runs out by itself), and a database
    # that stays locked or does not answer, or a renewal stuck waiting for it
    # with the journal's lock held, would hold up the exit for the journal's
    # whole timeout (for good with timeout=None): release on a thread and
    # wait for it a few seconds only.
    releasing = threading.Thread(
        target=_release_each, args=(mine,), name="taut-journal-release", daemon=True
    )
    try:
        releasing.start()
    except RuntimeError:  # 3.12.0/3.12.1 start no threads in atexit hooks
        _release_each(mine)
        return
    releasing.join(timeout=_EXIT_PATIENCE)


_EXIT_PATIENCE = 5.0  # seconds the exit waits for the leases to be released


def _release_each(journals: list[_Renewable]) -> None:
    for journal in journals:
        try:
            journal._release_lease()
        except Exception:
            pass  # the lease then runs out by itself


def _after_fork_in_child() -> None:
    # The renewal thread does not exist in the child; the parent keeps renewing
    # the leases the child inherited (the same runner, the same token).
    global _thread, _lock, _wake
    _lock = threading.Lock()
    _wake = threading.Event()
    _thread = None
    _journals.clear()


atexit.register(_release_all_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
