"""Durable call journals: finished calls replay instead of running again.

A journal is an ordered list of *slots*, one per durable call, in the order the
calls were gathered. Before anything runs, :meth:`Journal.reserve` claims the next
slots for a batch in one transaction and returns them (a :class:`Reservation`);
when a call finishes, :meth:`Journal.complete` writes its terminal outcome
(``ok``, ``error`` or ``timeout``). When the same program runs again after a
crash, each journal object starts again at position 0:

* a slot with the same call id and a terminal outcome *replays* (the call is not
  run again);
* a slot with the same call id that is still pending runs again;
* a different call id means the program took another path: the journal is
  truncated from that position on and the rest is recorded afresh.

``not_started`` and ``cancelled`` are never written; those slots stay pending and
run again on the next attempt.

A *run* (``run=``) has one live runner at a time: a lease with a fencing token
(:mod:`taut.journal.lease`). A second live runner gets :class:`JournalBusy`; a
runner whose lease ran out and was taken over can no longer write.

Implementations: :class:`InMemoryJournal` (no durability: tests, or replay
within one process), :class:`SqliteJournal` (one local file; pickle by default:
the file is trusted local state, never point it at a file someone else can
write), :class:`PostgresJournal` (shared by a fleet; JSON by default, because
unpickling what another host wrote is remote code execution). Codecs:
:mod:`taut.journal.codec`.

Layout: :mod:`taut.journal.base` (the contract, records, argument checks and
the reservation decision), :mod:`taut.journal.errors`,
:mod:`taut.journal.lease` (leases and their renewal thread),
:mod:`taut.journal.codec`, :mod:`taut.journal.memory` (the in-memory journal),
:mod:`taut.journal.sql` (what the SQL journals share: fence, reservation and
outcome rows) with its two dialects :mod:`taut.journal.sqlite` and
:mod:`taut.journal.postgres`.
"""

from __future__ import annotations

from taut.journal.base import TERMINAL_STATUSES, Journal, JournalRecord, Reservation
from taut.journal.errors import JournalBusy, JournaledError, JournaledTimeoutError, JournalError
from taut.journal.memory import InMemoryJournal
from taut.journal.postgres import PostgresJournal
from taut.journal.sqlite import SqliteJournal

__all__ = [
    "TERMINAL_STATUSES",
    "InMemoryJournal",
    "Journal",
    "JournalBusy",
    "JournalError",
    "JournalRecord",
    "JournaledError",
    "JournaledTimeoutError",
    "PostgresJournal",
    "Reservation",
    "SqliteJournal",
]
