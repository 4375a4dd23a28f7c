"""Benchmark of timeout resolution on a hot path: taut's cached resolver against
re-reading the config file per call (what a resolver without a cache does) and
against a bare environment-variable read (the legacy resolver)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from taut._bench import Row, interleaved_samples, paired_row

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

            def taut_resolve() -> float:
                start = time.perf_counter()
                for _ in range(calls):
                    resolve_timeout(KEY, default=420, env_var=ENV, config=path)
                return (time.perf_counter() - start) / calls

            def reparse() -> float:
                n = max(1, calls // 20)  # much slower; fewer calls keep the run short
                start = time.perf_counter()
                for _ in range(n):
                    os.stat(path)
                    data = yaml.safe_load(path.read_text(encoding="utf-8"))
                    value = data["timeouts"]["tools"]["concurrent_batch"]
                    if value is None:
                        value = float(os.environ.get(ENV, "420"))
                return (time.perf_counter() - start) / n

            def env_only() -> float:
                start = time.perf_counter()
                for _ in range(calls):
                    text = os.environ.get(ENV)
                    float(text) if text else 420.0
                return (time.perf_counter() - start) / calls

            resolve_timeout(KEY, default=420, env_var=ENV, config=path)  # warm the cache
            samples = interleaved_samples(
                {"taut": taut_resolve, "reparse": reparse, "env": env_only}, rounds
            )
        finally:
            os.environ.pop(ENV, None)
    return [
        paired_row(
            key="config.resolve_vs_reparse",
            case="timeout resolve, config file + env",
            baseline_name="stat + yaml.safe_load per call",
            baseline=samples["reparse"],
            taut=samples["taut"],
            unit="s",
            target="< 0.05x",
            met=lambda r: r.ratio < 0.05,
        ),
        paired_row(
            key="config.resolve_cached_absolute",
            case="timeout resolve, cached (absolute)",
            baseline_name="os.environ.get + float",
            baseline=samples["env"],
            taut=samples["taut"],
            unit="s",
            target="taut < 10 µs",
            met=lambda r: r.taut < 10e-6,
            note="cached resolve = one stat + one dict lookup",
        ),
    ]
