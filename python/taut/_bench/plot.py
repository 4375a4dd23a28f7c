"""``python -m taut bench --plot FILE.png``: the comparison as a bar chart of
ratios (matplotlib is an optional extra: ``pip install 'taut[plot]'``).

One horizontal bar per row, on a log axis of taut's advantage over the
row's baseline (baseline / taut where lower is better, taut / baseline where
higher is better), so a bar to the right of 1 is always taut doing better
and its colour says so, whichever way the metric runs. Error bars show the
interquartile range of the per-round ratios as a black line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from taut._bench import Row

COLOURS = {
    "better": "tab:green",
    "worse": "tab:red",
    "inconclusive": "tab:gray",
}


class Bar(NamedTuple):
    label: str
    advantage: float  # > 1: taut better than the baseline, in the row's direction
    low: float  # the spread, as advantages (low <= high); equal to advantage if none
    high: float
    colour: str
    status: str  # the target check: "yes", "NO" or "info"
    inconclusive: bool


def _advantage(row: Row, ratio: float) -> float:
    if row.better == "lower":
        return 1 / ratio if ratio else float("inf")
    return ratio


def _phrase(advantage: float) -> str:
    if 0.995 <= advantage <= 1.005:
        return "equal"
    if advantage >= 1:
        return f"{advantage:.3g}x better"
    return f"{1 / advantage:.3g}x worse" if advantage else "worse"


def bars(rows: Sequence[Row]) -> list[Bar]:
    """What the chart draws, one bar per row (kept apart from matplotlib so
    it can be tested without drawing)."""
    out = []
    labels: set[str] = set()
    for row in rows:
        label = f"{row.case} vs {row.baseline_name}"
        if label in labels:  # two rows may share both names; keys never repeat
            label = f"{label} [{row.key}]"
        labels.add(label)
        advantage = _advantage(row, row.ratio)
        spread = row.spread
        if spread is None:
            low = high = advantage
        else:
            ends = sorted(_advantage(row, r) for r in spread)
            low, high = ends[0], ends[1]
        out.append(
            Bar(
                label,
                advantage,
                low,
                high,
                COLOURS[row.verdict],
                row.status,
                row.inconclusive,
            )
        )
    return out


def plot_rows(rows: Sequence[Row], path: str, title: str = "") -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError as exc:
        raise SystemExit("--plot needs matplotlib: pip install 'taut[plot]'") from exc
    specs = bars(rows)
    fig, ax = plt.subplots(figsize=(12, 0.42 * len(specs) + 2.2))
    y = list(range(len(specs)))
    values = [b.advantage for b in specs]
    # Bars grow from 1 (equal): right = taut better, left = taut worse.
    ax.barh(y, [v - 1.0 for v in values], left=1.0, color=[b.colour for b in specs])
    # The spread as a line of its own: the ratio of the medians need not lie
    # inside the interquartile range of the per-round ratios.
    spread_rows = [(yi, b) for yi, b in zip(y, specs) if b.low != b.high]
    ax.hlines(
        [yi for yi, _ in spread_rows],
        [b.low for _, b in spread_rows],
        [b.high for _, b in spread_rows],
        color="black",
        linewidth=1.2,
    )
    ax.set_yticks(y, [b.label for b in specs], fontsize=8)
    for yi, b in zip(y, specs):
        ax.annotate(
            f" {_phrase(b.advantage)}{' (inconclusive)' if b.inconclusive else ''}, "
            f"target: {b.status}",
            (max(b.advantage, b.high, 1.0), yi),
            va="center",
            fontsize=7,
        )
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("taut's advantage over the baseline (x, log scale; > 1 = taut better, 1 = equal)")
    ax.invert_yaxis()
    fig.legend(
        handles=[
            Patch(color=COLOURS["better"], label="taut better"),
            Patch(color=COLOURS["worse"], label="taut worse"),
            Patch(color=COLOURS["inconclusive"], label="inconclusive (spread straddles 1)"),
        ],
        loc="lower center",
        ncol=3,
        fontsize=8,
    )
    ax.set_title(f"taut vs baseline, black line = IQR of the per-round ratios\n{title}", fontsize=9)
    # Room on the right for the annotations.
    low = min([b.low for b in specs] + [1.0])
    high = max([b.high for b in specs] + [1.0])
    ax.set_xlim(low / 2, high * 8)
    # Leave a strip at the bottom for the legend.
    fig.tight_layout(rect=(0, 0.5 / fig.get_figheight(), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
