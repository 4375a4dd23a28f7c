"""Side-by-side benchmarks of taut against the standard library.

Every area of taut contributes one module here with a function
``run(quick: bool) -> list[Row]``; ``python -m taut bench`` prints the rows as
one table. Each row is measured against its standard-library baseline in the
same run (interleaved rounds, medians), and reported as a ratio, because on a
shared, noisy machine one absolute time means little.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Row:
    """One benchmark case: the baseline and taut measured in the same run."""

    case: str
    baseline_name: str
    baseline: float
    taut: float
    unit: str
    # "lower" when a smaller number is better (time, memory), "higher" otherwise.
    better: str
    target: str
    met: bool
    note: str = ""

    @property
    def ratio(self) -> float:
        """taut / baseline: below 1 is better for "lower" rows, above 1 for "higher"."""
        return self.taut / self.baseline if self.baseline else float("inf")


def interleaved_medians(runners: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Run each measurement function once per round, alternating between them,
    and return the median of each. Interleaving spreads a noisy neighbour's load
    over all contenders instead of penalising whoever ran during the burst."""
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, fn in runners.items():
            samples[name].append(fn())
    return {name: statistics.median(values) for name, values in samples.items()}


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes on the performance counter."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
