"""Argument checks shared by the agent layer (gathers and tool batches), so a
parameter is validated, and worded, the same way wherever it appears."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["check_max_parallel", "check_timeout"]


def check_timeout(timeout: Any) -> float | None:
    """A batch timeout in seconds: ``None`` or ``inf`` mean no deadline."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(
            f"timeout must be a number of seconds or None, got {timeout!r} "
            f"({type(timeout).__name__})"
        )
    value = float(timeout)
    if math.isnan(value) or value < 0:
        raise ValueError(f"timeout must be a non-negative number of seconds, got {timeout!r}")
    return None if math.isinf(value) else value


def check_max_parallel(max_parallel: Any) -> int | None:
    """How many calls of a batch may run at once: an int >= 1, or ``None`` for all."""
    if max_parallel is None:
        return None
    if isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1:
        raise ValueError(
            f"max_parallel must be an int >= 1 or None, got {max_parallel!r} "
            f"({type(max_parallel).__name__})"
        )
    return max_parallel
