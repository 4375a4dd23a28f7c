"""``PoolStats``: the snapshot ``ThreadPoolExecutor.stats()`` returns.

A module of its own, loaded on first use (``stats()``, or ``taut.PoolStats``),
because ``typing.NamedTuple`` needs ``typing`` and ``import taut`` loads no
``typing`` (see ``taut/__init__``)."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["PoolStats"]


class PoolStats(NamedTuple):
    """A snapshot of one executor's pool.

    ``workers``, ``idle``, ``running`` and ``queued`` are now; ``completed``,
    ``failed``, ``cancelled`` and ``abandoned`` count since the pool began.
    Every call submitted is in exactly one of ``queued``, ``running``,
    ``completed``, ``failed``, ``cancelled``, except a call whose worker was
    abandoned (``abandon()``, or a bounded run giving up on it) while it
    still runs: it has left ``running`` (its worker no longer counts against
    ``max_workers``) and is counted in ``completed`` or ``failed`` when it
    ends; ``abandoned`` counts such calls, ended or not."""

    max_workers: int
    workers: int
    idle: int
    running: int
    queued: int
    completed: int
    failed: int
    cancelled: int
    abandoned: int
