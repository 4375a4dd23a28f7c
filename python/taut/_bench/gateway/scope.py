"""(d) a deadline scope per request that does not expire: ``taut.fail_after``
against ``asyncio.timeout`` (3.11+), wall and CPU per scope, with the floor of
an empty ``async with`` written in Python."""

from __future__ import annotations

import asyncio
import functools
import sys
from typing import Any, Callable

import taut
from taut._bench import Row, interleaved_samples
from taut._bench.gateway.common import Sample, _row, per_call, wall_and_cpu

FAR = 30.0


class _EmptyScope:
    """The cheapest possible ``async with`` written in Python: what any
    scope implemented as a Python class pays before doing anything."""

    async def __aenter__(self) -> _EmptyScope:
        return self

    async def __aexit__(self, *exc: object) -> bool:
        return False


def scope_factory(kind: str) -> Callable[[float], Any]:
    """``taut`` (``taut.fail_after``), ``asyncio`` (``asyncio.timeout``,
    3.11+) or ``empty`` (:class:`_EmptyScope`)."""
    if kind == "taut":
        return taut.fail_after
    if kind == "asyncio":
        timeout: Callable[[float], Any] = asyncio.timeout  # type: ignore[attr-defined,unused-ignore]
        return timeout
    if kind == "empty":
        return lambda _seconds: _EmptyScope()
    raise ValueError(f"unknown scope kind {kind!r}")


async def enter_exit(kind: str, n: int) -> None:
    """``n`` times ``async with <scope>(30): pass``, never expiring."""
    scope = scope_factory(kind)
    for _ in range(n):
        async with scope(FAR):
            pass


def scope_cost(kind: str, n: int) -> Sample:
    """Wall and CPU seconds per scope of :func:`enter_exit`."""

    return asyncio.run(per_call(enter_exit(kind, n), n))


def bench_scope(quick: bool) -> list[Row]:
    if sys.version_info < (3, 11):
        print("gateway (d) skipped: asyncio.timeout needs Python 3.11+", file=sys.stderr)
        return []
    n = 20_000 if quick else 100_000
    s = interleaved_samples(
        {k: functools.partial(scope_cost, k, n) for k in ("asyncio", "taut", "empty")},
        3 if quick else 7,
    )
    wall, cpu = wall_and_cpu(s)
    head = f"(d) async with fail_after({FAR:g}) enter+exit, not expiring"
    base = f"asyncio.timeout({FAR:g})"
    return [
        _row(head, base, wall["asyncio"], wall["taut"], target="<= 0.5x", limit=0.5),
        _row(
            f"{head}, CPU", f"{base} CPU", cpu["asyncio"], cpu["taut"], target="<= 0.5x", limit=0.5
        ),
        _row(
            "(d) floor: an empty Python `async with` (no deadline at all), CPU",
            f"{base} CPU",
            cpu["asyncio"],
            cpu["empty"],
            target="",
            limit=None,
            note="what any scope written as a Python class costs before arming anything",
        ),
    ]
