"""What every gateway shape shares: the handler it runs, the pool size, the
per-call sample of wall and CPU time, and the one builder of the area's rows."""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Mapping, Sequence
from typing import NamedTuple

from taut._bench import Judge, Row, paired_row

WORKERS = 8  # pool size of the fan-out, paced and gRPC cases


def work() -> int:
    """The tiny handler of every case: about a microsecond of Python."""
    return sum(range(20))


class Sample(NamedTuple):
    """One measurement: wall seconds and process CPU seconds, per call."""

    wall: float
    cpu: float


async def per_call(calls: Awaitable[object], n: int) -> Sample:
    """Wall and process CPU seconds per call of awaiting ``calls``, ``n`` calls in all."""
    wall, cpu = time.perf_counter(), time.process_time()
    await calls
    return Sample((time.perf_counter() - wall) / n, (time.process_time() - cpu) / n)


def wall_and_cpu(
    samples: Mapping[str, Sequence[Sample]],
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Interleaved samples split into the wall and the CPU seconds of each runner."""
    wall = {name: [s.wall for s in runs] for name, runs in samples.items()}
    cpu = {name: [s.cpu for s in runs] for name, runs in samples.items()}
    return wall, cpu


def _row(
    case: str,
    baseline_name: str,
    base: Sequence[float],
    mine: Sequence[float],
    *,
    unit: str = "s",
    better: str = "lower",
    target: str,
    limit: Judge | float | None,
    note: str = "",
) -> Row:
    """A row from paired per-round samples, its key made from ``case``.
    ``limit``: the ratio the target allows, in the row's
    direction, or a function of the row for an absolute target; None for an
    informational row."""
    key = "gateway." + _slug(case)
    how = {"unit": unit, "better": better, "note": note}
    return paired_row(key, case, baseline_name, base, mine, target=target, met=limit, **how)


def _slug(case: str) -> str:
    """A stable key from a display name: its words and fixed numbers (calls
    in flight, workers), without the load size, which --quick changes."""
    text = re.sub(r"[\d,]+ (calls|requests|unary rpcs)", "", case.lower())
    return "_".join(re.findall(r"[a-z0-9_]+", text.replace(".", "_")))
