"""The deadlines benchmark area (taut._bench.deadlines): a probe that got no
samples leaves its row out instead of failing the whole bench."""

from __future__ import annotations

import pytest

from taut import _core
from taut._bench import deadlines


def test_lateness_rows_without_os_floor_samples_leave_the_floor_row_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before: IndexError from the percentile of an empty list, ending the bench.
    monkeypatch.setattr(_core, "_os_wait_probe", lambda delay, samples: [])
    keys = [row.key for row in deadlines.bench_lateness(True)]
    assert "deadlines.gil_free_lateness_p99_idle" in keys
    assert not any(key.startswith("deadlines.os_wait_floor") for key in keys)
