"""``python -m taut bench --plot FILE.png``: the comparison as a bar chart of
ratios (matplotlib is an optional extra: ``pip install 'taut[plot]'``)."""

from __future__ import annotations

from collections.abc import Sequence

from taut._bench import Row


def plot_rows(rows: Sequence[Row], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise SystemExit("--plot needs matplotlib: pip install 'taut[plot]'") from exc
    # Speed-ups for "lower is better" rows, so that taller is always better.
    gains = [1 / r.ratio if r.better == "lower" else r.ratio for r in rows]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.5))
    colors = ["tab:green" if r.met else "tab:red" for r in rows]
    ax.barh([r.case for r in rows], gains, color=colors)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("taut's advantage over the baseline (x, log scale; 1 = equal)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
