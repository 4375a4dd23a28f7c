"""The gateway benchmark area (taut._bench.gateway): rows judged in the right
direction, the gRPC case skipped with a reason when grpcio is missing, and
the shapes it measures doing what their names say. No timing asserts."""

from __future__ import annotations

import sys

import pytest

from taut._bench import gateway


def test_row_judges_lower_and_higher_ratios_and_info_rows() -> None:
    lower = gateway._row("c", "b", [10.0, 10.0], [4.0, 6.0], target="<= 0.5x", limit=0.5)
    assert lower.met and lower.taut == 5.0 and lower.baseline == 10.0
    worse = gateway._row("c", "b", [10.0], [6.0], target="<= 0.5x", limit=0.5)
    assert not worse.met
    higher = gateway._row(
        "c", "b", [100.0], [90.0], unit="/s", better="higher", target=">= 1x", limit=1.0
    )
    assert not higher.met
    info = gateway._row("c", "b", [1.0, 2.0], [3.0, 4.0], target="", limit=None)
    assert info.met is None and info.status == "info"  # never counted as met
    assert info.spread is not None and info.rounds == 2
    assert info.key == "gateway.c"


def test_grpc_case_skips_with_reason_without_grpcio(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "grpc", None)  # import grpc -> ImportError
    assert gateway.grpc_missing() == "grpcio is not installed (pip install grpcio)"
    assert gateway.bench_grpc(quick=True) == []
    assert "gRPC skipped: grpcio is not installed" in capsys.readouterr().err


def test_unknown_kinds_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'nope'"):
        gateway.fanout("nope", 1, 1)
    with pytest.raises(ValueError, match="'nope'"):
        gateway.scope_factory("nope")


@pytest.mark.parametrize("kind", gateway.FANOUT_KINDS)
def test_every_fanout_kind_runs_its_calls(kind: str) -> None:
    sample = gateway.fanout(kind, 200, 16, workers=2)
    assert sample.wall > 0 and sample.cpu >= 0


def test_loop_stall_counts_refusals_of_asyncio_to_thread_on_a_full_queue() -> None:
    # One call runs, one waits in the queue (max_queue=1); submit() on the
    # loop's thread refuses the other three at once instead of blocking it.
    _, refused = gateway.loop_stall("asyncio.to_thread")
    assert refused == gateway.STALL_CALLS - 2
    _, refused = gateway.loop_stall("taut.to_thread")
    assert refused == 0


def test_row_keys_keep_the_fixed_numbers_and_drop_the_load_size() -> None:
    # Two in-flight levels are two rows (a key without digits made them one,
    # and `python -m taut bench` stopped on the duplicate); --quick's smaller
    # load keeps the same key.
    full = gateway._slug("(a) fan-out 20,000 calls, 256 in flight, 8 workers: taut.to_thread")
    small = gateway._slug("(a) fan-out 2,000 calls, 16 in flight, 8 workers: taut.to_thread")
    quick = gateway._slug("(a) fan-out 4,000 calls, 256 in flight, 8 workers: taut.to_thread")
    assert full != small
    assert full == quick
