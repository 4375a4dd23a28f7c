"""The run_bounded_* benchmark area (taut._bench.bounded): overhead is taken
against the bare call of the same round, and the sync row names the floor any
worker-thread design pays. Fake samples, no timing asserts."""

from __future__ import annotations

import pytest

from taut._bench import bounded


def test_sync_row_is_judged_on_overhead_and_names_the_round_trip_floor() -> None:
    samples = {
        "bare": [1e-6, 1e-6, 1e-6],
        "taut": [11e-6, 9e-6, 11e-6],
        "seed": [71e-6, 71e-6, 71e-6],
        "round_trip": [7e-6, 7e-6, 7e-6],
    }
    row = bounded._row("bounded.sync_overhead", "case", "thread", samples)
    # Overheads: taut 10 µs (median), seed 70 µs; 10/70 = 0.143 > 0.1.
    assert row.taut == pytest.approx(10e-6) and row.baseline == pytest.approx(70e-6)
    assert row.met is False
    # The round trip's overhead, 7 - 1 = 6 µs, is 0.086x the seed's 70 µs.
    assert "round trip 7.0 µs, 0.086x the baseline's overhead" in row.note


def test_async_row_has_no_round_trip_floor() -> None:
    samples = {"bare": [1e-6], "taut": [6e-6], "seed": [101e-6]}
    row = bounded._row("bounded.async_overhead", "case", "timers", samples)
    assert row.met is True and "round trip" not in row.note
