"""``python -m taut bench`` reports honestly (issue 9 §5-6, issue 12): no row
counts as a met target unless its target was checked, rows whose rounds
disagree are marked inconclusive, colours follow each metric's direction,
JSON keys are the rows' stable ids, and the command line rejects a wrong
``--area`` and a missing matplotlib before measuring anything.

The command line is driven with a fake benchmark area, so nothing here
measures anything (and nothing depends on timing)."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from collections.abc import Iterator

import pytest

import taut
from taut import cli
from taut._bench import INFO, Row, check_keys, paired_row
from taut._bench.plot import COLOURS, bars, plot_rows


def row(key: str = "fake.case", **changes: object) -> Row:
    fields: dict[str, object] = {
        "key": key,
        "case": "a case",
        "baseline_name": "stdlib",
        "baseline": 1.0,
        "taut": 0.5,
        "unit": "s",
        "better": "lower",
        "target": "<= 0.6x",
        "met": True,
        "ratios": (0.4, 0.5, 0.6),
    }
    fields.update(changes)
    return Row(**fields)  # type: ignore[arg-type]


FAKE_ROWS = [
    row("fake.met"),
    row("fake.missed", taut=10.0, met=False, ratios=(9.0, 10.0, 11.0)),
    row("fake.info", target=INFO, met=None, taut=10.0, ratios=(9.0, 10.0, 11.0)),
    row("fake.noisy", taut=1.05, met=False, ratios=(0.8, 1.05, 1.3)),
]


@pytest.fixture
def fake_area(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """A benchmark area ``fake`` returning FAKE_ROWS; the list records runs."""
    runs: list[bool] = []
    module = types.ModuleType("taut_test_fake_bench_area")

    def run(quick: bool) -> list[Row]:
        runs.append(quick)
        return list(FAKE_ROWS)

    module.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(cli.BENCH_AREAS, "fake", module.__name__)
    yield runs


def test_paired_row_without_target_is_informational() -> None:
    r = paired_row(
        key="x.y",
        case="c",
        baseline_name="b",
        baseline=[1.0, 1.0, 1.0],
        taut=[10.0, 10.0, 10.0],
        unit="s",
        target="whatever",
        met=None,
    )
    assert (r.met, r.status, r.target) == (None, "info", INFO)
    checked = paired_row(
        key="x.z",
        case="c",
        baseline_name="b",
        baseline=[1.0, 2.0, 3.0],
        taut=[1.0, 1.0, 1.0],
        unit="s",
        target="<= 0.6x",
        met=lambda r: r.ratio <= 0.6,
    )
    assert (checked.baseline, checked.taut, checked.met, checked.status) == (2.0, 1.0, True, "yes")
    assert checked.ratios == (1.0, 0.5, 1 / 3)
    with pytest.raises(ValueError, match="paired samples"):
        paired_row(
            key="x",
            case="c",
            baseline_name="b",
            baseline=[1.0],
            taut=[1.0, 2.0],
            unit="s",
            target="t",
            met=None,
        )


def test_ratio_is_the_median_of_the_paired_rounds() -> None:
    # The medians of the two sides come from different rounds (10 / 1 = 10x);
    # the paired rounds say 1x, 10x, 1x: the ratio shown is 1x, inside its spread.
    r = paired_row(
        key="x.y",
        case="c",
        baseline_name="b",
        baseline=[1.0, 1.0, 10.0],
        taut=[1.0, 10.0, 10.0],
        unit="s",
        target="<= 2x",
        met=lambda r: r.ratio <= 2.0,
    )
    assert (r.taut, r.baseline, r.ratio, r.met) == (10.0, 1.0, 1.0, True)
    assert r.spread is not None and r.spread[0] <= r.ratio <= r.spread[1]
    assert row(ratios=()).ratio == 0.5  # unpaired: the medians' ratio


def test_summary_counts_only_checked_targets() -> None:
    assert cli.summary(FAKE_ROWS) == (
        "1/3 targets met (1 informational rows not counted); 1 of 4 rows inconclusive"
    )


def test_table_shows_rounds_spread_verdict_and_info() -> None:
    lines = cli._table(FAKE_ROWS).splitlines()
    cells = [[c.strip() for c in line.split("|")] for line in lines[2:6]]
    #   ratio, spread, rounds, verdict, target, met
    assert [c[4:] for c in cells] == [
        ["0.500x", "0.45-0.55x", "3", "better", "<= 0.6x", "yes"],
        ["10.000x", "9.5-10.5x", "3", "worse", "<= 0.6x", "NO"],
        ["10.000x", "9.5-10.5x", "3", "worse", "info", "info"],
        ["1.050x", "0.925-1.18x", "3", "inconclusive", "<= 0.6x", "NO"],
    ]
    single = cli._table([row(ratios=(0.5,)), row("x.none", ratios=())]).splitlines()
    assert [[c.strip() for c in line.split("|")][5:7] for line in single[2:4]] == [
        ["n/a", "1"],
        ["n/a", "-"],
    ]


def test_inconclusive_only_when_the_spread_straddles_one() -> None:
    assert row(ratios=(0.8, 0.9, 1.1, 1.2)).inconclusive
    assert row(ratios=(0.9, 1.0, 1.0)).inconclusive  # touching 1.0 decides nothing
    assert not row(ratios=(0.5, 0.6, 0.7, 1.5)).inconclusive  # IQR 0.575-0.9
    assert not row(ratios=(1.1, 1.2)).inconclusive
    assert not row(ratios=(1.2,)).inconclusive and row(ratios=(1.2,)).spread is None


def test_verdict_and_colour_follow_the_metric_direction() -> None:
    slower = row(taut=10.0, ratios=(9.0, 10.0, 11.0))  # time: 10x more is worse
    higher = row(better="higher", taut=10.0, ratios=(9.0, 10.0, 11.0))  # rate: 10x more
    lower = row(better="higher", taut=0.1, ratios=(0.09, 0.1, 0.11))
    assert [r.verdict for r in (slower, higher, lower)] == ["worse", "better", "worse"]
    got = bars([slower, higher, lower, FAKE_ROWS[3]])
    assert [b.colour for b in got] == [
        COLOURS["worse"],
        COLOURS["better"],
        COLOURS["worse"],
        COLOURS["inconclusive"],
    ]
    # Drawn as taut's advantage: > 1 always means taut better.
    assert got[0].advantage == pytest.approx(0.1) and got[1].advantage == pytest.approx(10)
    assert got[0].low <= got[0].high


def test_bar_labels_are_distinct() -> None:
    twins = [row("a.one"), row("a.two"), row("a.three", baseline_name="other")]
    labels = [b.label for b in bars(twins)]
    assert len(set(labels)) == 3
    assert labels[0] == "a case vs stdlib" and "a.two" in labels[1]


def test_duplicate_keys_are_refused() -> None:
    check_keys([row("a.one"), row("a.two")])
    with pytest.raises(ValueError, match=r"duplicate benchmark row key 'a\.one'"):
        check_keys([row("a.one"), row("a.one")])


def test_json_rows_are_keyed_by_stable_ids(
    fake_area: list[bool], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["bench", "--area", "fake", "--json", "--quick"]) == 0
    assert fake_area == [True]
    payload = json.loads(capsys.readouterr().out)
    assert list(payload["rows"]) == ["fake.met", "fake.missed", "fake.info", "fake.noisy"]
    info = payload["rows"]["fake.info"]
    assert (info["met"], info["target"], info["rounds"]) == (None, "info", 3)
    noisy = payload["rows"]["fake.noisy"]
    assert noisy["inconclusive"] is True and noisy["spread_iqr"] == [0.925, 1.175]
    assert f"taut {taut.__version__}" in payload["machine"]
    assert "CPUs, load average" in payload["machine"]
    assert payload["summary"].startswith("1/3 targets met")


def test_text_output_starts_with_the_machine_line(
    fake_area: list[bool], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["bench", "--area", "fake"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("machine: ") and f"taut {taut.__version__}" in out[0]
    assert out[-1].endswith(
        "1/3 targets met (1 informational rows not counted); 1 of 4 rows inconclusive"
    )


def test_a_wrong_area_is_one_line_of_error_listing_the_choices() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "taut", "bench", "--area", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("python -m taut bench: error: argument --area: invalid choice: 'nope'")
    for name in ("executor", "deadlines", "bounded", "config"):
        assert name in error


def test_help_lists_the_areas(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    assert "one of executor, deadlines, bounded, config" in " ".join(
        capsys.readouterr().out.split()
    )


def test_plot_without_matplotlib_fails_before_the_run(
    fake_area: list[bool], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    assert cli.main(["bench", "--area", "fake", "--plot", "out.png"]) == 2
    assert fake_area == []  # nothing measured
    assert "--plot needs matplotlib" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"taut {taut.__version__}"


def test_plot_writes_a_png(tmp_path: object) -> None:
    import pathlib

    path = pathlib.Path(str(tmp_path)) / "bench.png"
    plot_rows(FAKE_ROWS, str(path), title="machine line")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
