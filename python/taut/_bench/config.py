"""Benchmark of timeout resolution on a hot path: taut's cached resolver against
re-reading the config file per call (what a resolver without a cache does) and
against a bare environment-variable read (the legacy resolver)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from taut._bench import Row, interleaved_samples, paired_row, per_call

KEY = "tools.concurrent_batch"
ENV = "TAUT_BENCH_CONCURRENT_TOOL_TIMEOUT_S"


def run(quick: bool) -> list[Row]:
    import yaml

    from taut.config import resolve_timeout

    calls = 2_000 if quick else 20_000
    rounds = 5 if quick else 9
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "taut.yaml"
        path.write_text("timeouts:\n  tools:\n    concurrent_batch: 300\n", encoding="utf-8")
        os.environ[ENV] = "120"
        try:

            def taut_resolve(k: int) -> None:
                for _ in range(k):
                    resolve_timeout(KEY, default=420, env_var=ENV, config=path)

            def reparse(k: int) -> None:
                for _ in range(k):
                    os.stat(path)
                    data = yaml.safe_load(path.read_text(encoding="utf-8"))
                    value = data["timeouts"]["tools"]["concurrent_batch"]
                    if value is None:
                        value = float(os.environ.get(ENV, "420"))

            def env_only(k: int) -> None:
                for _ in range(k):
                    text = os.environ.get(ENV)
                    float(text) if text else 420.0

            resolve_timeout(KEY, default=420, env_var=ENV, config=path)  # warm the cache
            runners = {
                "taut": per_call(taut_resolve, calls),
                # much slower; fewer calls keep the run short
                "reparse": per_call(reparse, max(1, calls // 20)),
                "env": per_call(env_only, calls),
            }
            samples = interleaved_samples(runners, rounds)
        finally:
            os.environ.pop(ENV, None)
    return [
        paired_row(
            "config.resolve_vs_reparse",
            "timeout resolve, config file + env",
            "stat + yaml.safe_load per call",
            samples["reparse"],
            samples["taut"],
            target="< 0.05x",
            met=lambda r: r.ratio < 0.05,
        ),
        paired_row(
            "config.resolve_cached_absolute",
            "timeout resolve, cached (absolute)",
            "os.environ.get + float",
            samples["env"],
            samples["taut"],
            target="taut < 10 µs",
            met=lambda r: r.taut < 10e-6,
            note="cached resolve = one stat + one dict lookup",
        ),
    ]
