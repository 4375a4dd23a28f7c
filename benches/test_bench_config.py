"""pytest-benchmark: cached timeout resolution vs. a bare environment read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from taut.config import resolve_timeout

ENV = "TAUT_BENCH_TIMEOUT_S"


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "taut.yaml"
    path.write_text("timeouts:\n  tools:\n    concurrent_batch: 300\n", encoding="utf-8")
    return path


def test_resolve_cached_file(benchmark: Any, config_file: Path) -> None:
    result = benchmark(
        resolve_timeout, "tools.concurrent_batch", default=420, env_var=ENV, config=config_file
    )
    assert result == 300.0


def test_resolve_mapping(benchmark: Any) -> None:
    cfg = {"timeouts": {"tools": {"concurrent_batch": 300}}}
    assert benchmark(resolve_timeout, "tools.concurrent_batch", default=420, config=cfg) == 300.0


def test_baseline_env_read(benchmark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "300")

    def env_only() -> float:
        text = os.environ.get(ENV)
        return float(text) if text else 420.0

    assert benchmark(env_only) == 300.0
