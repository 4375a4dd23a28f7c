"""What a batch checks before anything runs: every handle is a taut handle,
appears once, belongs to this scheduler and process, holds no handle among
its arguments, and is not part of the gather this call runs in."""

from __future__ import annotations

import concurrent.futures as cf
import os
from typing import TYPE_CHECKING, Any

from taut._checks import describe
from taut.gather.handles import Call, GatherRejected, default_id, nested_argument
from taut.gather.tasks import enclosing_frames
from taut.journal import Journal

if TYPE_CHECKING:
    from taut.gather import Scheduler

__all__ = ["check_executor", "check_handles", "check_journal"]


def check_executor(executor: object) -> Any:
    """``executor`` if it is ``None`` or a concurrent.futures.Executor, else a
    TypeError naming it (not an AttributeError once something runs)."""
    if executor is not None and not isinstance(executor, cf.Executor):
        raise TypeError(
            f"executor must be a concurrent.futures.Executor or None, got {describe(executor)}"
        )
    return executor


def check_journal(journal: object) -> Any:
    """``journal`` if it is ``None`` or has the Journal protocol's methods (a
    duck-typed journal is fine), else a TypeError naming it."""
    if journal is not None and not (
        callable(getattr(journal, "reserve", None)) and callable(getattr(journal, "complete", None))
    ):
        raise TypeError(
            "journal must have reserve() and complete() (taut.SqliteJournal, "
            f"taut.PostgresJournal, taut.InMemoryJournal) or be None, got {describe(journal)}"
        )
    return journal


def check_handles(
    handles: list[Any], scheduler: Scheduler, journal: Journal | None, what: str
) -> None:
    """Raise TypeError or GatherRejected for the first handle a batch must
    refuse; ``what`` names the batch ("gather", "await", "tool batch")."""
    seen: dict[int, int] = {}
    ids: dict[str, int] = {}
    pid = os.getpid()
    enclosing = enclosing_frames()
    enclosing_handles = {id(f.handle) for f in enclosing}
    for i, h in enumerate(handles):
        where = f"handles[{i}]"
        if not isinstance(h, Call):
            # describe(): the object's own __repr__ may raise, which must
            # not replace this TypeError.
            raise TypeError(
                f"{where} is not a taut call handle, got {describe(h)}; "
                "make one with taut.call(fn, *args)"
            )
        name = h._call_id or default_id(h._fn)
        if id(h) in seen:
            raise GatherRejected(
                f"{where} ({name}) is the same handle as handles[{seen[id(h)]}]; "
                "each handle may appear once in a gather"
            )
        seen[id(h)] = i
        if h._explicit_id and h._call_id is not None:
            if h._call_id in ids:
                raise GatherRejected(
                    f"{where} has call_id {h._call_id!r}, already used by "
                    f"handles[{ids[h._call_id]}]; call ids must be unique in a gather"
                )
            ids[h._call_id] = i
        if h._pid != pid:
            raise GatherRejected(
                f"{where} ({name}) is foreign: it was made in process {h._pid}, "
                f"this is process {pid}"
            )
        if h._scheduler is not scheduler:
            maker = repr(h._scheduler)
            if maker == repr(scheduler):  # "made by <X>, not by <X>" would puzzle
                maker = f"another scheduler of the same name ({maker})"
            raise GatherRejected(
                f"{where} ({name}) is foreign: it was made by {maker}, not by the "
                f"scheduler that runs this {what} ({scheduler!r}); gather or await a "
                "handle with the scheduler that made it (handle.scheduler)"
            )
        nested = nested_argument(h._args, h._kwargs)
        if nested is not None:
            raise GatherRejected(
                f"{where} ({name}) is nested: its {nested} holds a taut handle; "
                "gather the inner handle first and pass its value"
            )
        if id(h) in enclosing_handles or any(id(h) in f.batch.handles for f in enclosing):
            raise GatherRejected(
                f"{where} ({name}) belongs to the gather this call is running in; "
                "a call cannot gather or await handles of its own batch"
            )
    if journal is not None and any(f.batch.journal is journal for f in enclosing):
        raise GatherRejected(
            "journal is the journal of the enclosing gather; a nested gather needs "
            "its own journal (its slots would interleave with the outer batch's)"
        )
