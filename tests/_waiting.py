"""Helpers for tests that wait on threads: a generous bound that only limits
how long a failing test takes, and a poll that never decides a pass by time."""

from __future__ import annotations

import time
from typing import Callable

LONG = 30.0  # seconds a "never" wait may take before the test fails


def wait_until(predicate: Callable[[], object], timeout: float = LONG) -> None:
    """Poll a condition until it holds; the polling only bounds a failure."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.001)
