"""``PoolStats``: the snapshot ``ThreadPoolExecutor.stats()`` returns.

A module of its own, loaded on first use (``stats()``, or ``taut.PoolStats``),
because ``typing.NamedTuple`` needs ``typing`` and ``import taut`` loads no
``typing`` (see ``taut/__init__``)."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["PoolStats"]


class PoolStats(NamedTuple):
    """A snapshot of one executor's pool."""

    max_workers: int
    workers: int
    idle: int
    running: int
    queued: int
    completed: int
    failed: int
    cancelled: int
    abandoned: int
