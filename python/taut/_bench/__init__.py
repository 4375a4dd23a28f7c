"""Side-by-side benchmarks of taut against the standard library.

Every area of taut contributes one module here with a function
``run(quick: bool) -> list[Row]``; ``python -m taut bench`` prints the rows as
one table. Each row is measured against its baseline in the same run
(interleaved rounds), and reported as the ratio of the medians together with
the spread of the per-round ratios, because on a shared, noisy machine one
absolute time means little and one median hides how much the rounds disagree.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Callable, TypeVar

# What a row's target check said: "yes"/"NO", or "info" for a row that has
# no target (shown for context; never counted as a met target).
INFO = "info"

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Row:
    """One benchmark case: the baseline and taut measured in the same run.

    ``key`` is the row's stable id (``"area.case"``, no load sizes in it):
    JSON output and scripts use it; ``case`` is the display name.
    ``baseline`` and ``taut`` are medians; ``ratios`` holds the per-round
    ``taut / baseline`` ratios (rounds are interleaved, so round ``i`` of each
    ran under the same load). ``met`` is None for an informational row.
    """

    key: str
    case: str
    baseline_name: str
    baseline: float
    taut: float
    unit: str
    # "lower" when a smaller number is better (time, memory), "higher" otherwise.
    better: str
    target: str
    met: bool | None
    note: str = ""
    ratios: tuple[float, ...] = ()

    @property
    def ratio(self) -> float:
        """taut / baseline: below 1 is better for "lower" rows, above 1 for
        "higher". The median of the per-round ratios when the rounds are
        paired (so it always lies inside the spread), else of the medians."""
        if self.ratios:
            return statistics.median(self.ratios)
        return self.taut / self.baseline if self.baseline else float("inf")

    @property
    def rounds(self) -> int:
        """Paired rounds behind the spread (0: the row's numbers are not paired
        by round, e.g. a percentile over all samples)."""
        return len(self.ratios)

    @property
    def spread(self) -> tuple[float, float] | None:
        """The interquartile range of the per-round ratios; None with fewer
        than 2 rounds."""
        if len(self.ratios) < 2:
            return None
        q1, _, q3 = statistics.quantiles(self.ratios, n=4, method="inclusive")
        return q1, q3

    @property
    def inconclusive(self) -> bool:
        """True when the rounds disagree on which side is better: the spread
        of the per-round ratios straddles 1.0. Without a spread there is
        nothing to judge by; the table says so in its spread column."""
        spread = self.spread
        if spread is None:
            return False
        low, high = spread
        return low <= 1.0 <= high

    @property
    def taut_better(self) -> bool:
        """taut's median is better than the baseline's, in this row's direction."""
        return self.ratio < 1.0 if self.better == "lower" else self.ratio > 1.0

    @property
    def verdict(self) -> str:
        """Better, worse or inconclusive, in the direction that matters."""
        if self.inconclusive:
            return "inconclusive"
        return "better" if self.taut_better else "worse"

    @property
    def status(self) -> str:
        """The target check: "yes"/"NO", or "info" for a row without one."""
        if self.met is None:
            return INFO
        return "yes" if self.met else "NO"


Judge = Callable[[Row], bool]


def ratio_within(limit: float) -> Judge:
    """The usual target: the ratio at most ``limit`` where lower is better,
    at least ``limit`` where higher is better."""

    def met(row: Row) -> bool:
        return row.ratio <= limit if row.better == "lower" else row.ratio >= limit

    return met


def judged_row(
    key: str,
    case: str,
    baseline_name: str,
    baseline: float,
    taut: float,
    *,
    target: str,
    met: Judge | float | None,
    unit: str = "s",
    better: str = "lower",
    note: str = "",
    ratios: tuple[float, ...] = (),
) -> Row:
    """The one place a measured Row is made. ``met`` judges the row against
    ``target``: a function of the row (its ``ratio``, ``taut``, ``baseline``),
    a number for :func:`ratio_within`, or None for an informational row."""
    if isinstance(met, (int, float)):
        met = ratio_within(met)
    row = Row(
        key=key,
        case=case,
        baseline_name=baseline_name,
        baseline=baseline,
        taut=taut,
        unit=unit,
        better=better,
        target=target if met is not None else INFO,
        met=None,
        note=note,
        ratios=ratios,
    )
    return row if met is None else dataclasses.replace(row, met=met(row))


def paired_row(
    key: str,
    case: str,
    baseline_name: str,
    baseline: Sequence[float],
    taut: Sequence[float],
    *,
    target: str,
    met: Judge | float | None,
    unit: str = "s",
    better: str = "lower",
    note: str = "",
) -> Row:
    """A row from per-round samples (paired by round): the medians of both
    sides and the per-round ratios; ``met`` as in :func:`judged_row`."""
    if len(baseline) != len(taut) or not baseline:
        raise ValueError(f"{key}: need paired samples, got {len(baseline)} and {len(taut)}")
    medians = statistics.median(baseline), statistics.median(taut)
    return judged_row(
        key,
        case,
        baseline_name,
        *medians,
        target=target,
        met=met,
        unit=unit,
        better=better,
        note=note,
        ratios=ratios_of(taut, baseline),
    )


def ratios_of(taut: Sequence[float], baseline: Sequence[float]) -> tuple[float, ...]:
    """Per-round ``taut / baseline`` ratios of paired samples."""
    return tuple(t / b if b else float("inf") for t, b in zip(taut, baseline))


def check_keys(rows: Sequence[Row]) -> None:
    """Row keys are JSON keys: they must be unique across the run."""
    seen: set[str] = set()
    for row in rows:
        if row.key in seen:
            raise ValueError(f"duplicate benchmark row key {row.key!r}")
        seen.add(row.key)


def machine_line() -> str:
    """CPU count, load average, Python and taut versions: what a reader needs
    to judge how noisy the numbers may be and what produced them."""
    from taut import __version__

    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # not available on this platform
        load = "n/a"
    return (
        f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load}, "
        f"{platform.python_implementation()} {platform.python_version()}, taut {__version__}"
    )


def interleaved_samples(runners: Mapping[str, Callable[[], T]], rounds: int) -> dict[str, list[T]]:
    """Run each measurement function once per round, alternating between them,
    and return every sample, in round order. Interleaving spreads a noisy
    neighbour's load over all contenders instead of penalising whoever ran
    during the burst, and pairs the samples of one round for ratios."""
    samples: dict[str, list[T]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, fn in runners.items():
            samples[name].append(fn())
    return samples


def per_call(batch: Callable[[int], object], n: int) -> Callable[[], float]:
    """A measurement function: seconds per call of one ``batch(n)`` of ``n`` calls."""

    def measure() -> float:
        start = time.perf_counter()
        batch(n)
        return (time.perf_counter() - start) / n

    return measure
