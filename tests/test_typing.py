"""Issue 9 §3: a user's script that type-checks against the standard library
type-checks with taut swapped in, under ``mypy --strict``; and the types carry
information (a script with mistakes gets exactly the errors expected)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import taut

HERE = Path(__file__).parent / "typing"
GOOD = HERE / "user_script.py"
WRONG = HERE / "wrong_use.py"
REPO = Path(__file__).parent.parent


@pytest.mark.timeout(600)
def test_user_script_passes_mypy_strict_and_mistakes_are_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = pytest.importorskip("mypy.api", reason="mypy is in the lint extras")
    # Check the taut under test (a worktree, a wheel), not whatever else is installed.
    monkeypatch.setenv("MYPYPATH", str(Path(taut.__file__).parent.parent))
    stdout, stderr, _ = api.run(
        ["--strict", "--config-file", str(REPO / "pyproject.toml"), str(GOOD), str(WRONG)]
    )
    errors = [line for line in stdout.splitlines() if ": error:" in line]
    in_good = [line for line in errors if line.startswith(str(GOOD))]
    assert in_good == [], stdout + stderr
    flagged = {
        int(m.group(1)) for line in errors if (m := re.search(r"wrong_use\.py:(\d+):", line))
    }
    expected = {
        n for n, text in enumerate(WRONG.read_text().splitlines(), 1) if text.endswith("# error")
    }
    assert len(expected) == 6
    assert flagged == expected, stdout


def test_user_script_runs() -> None:
    namespace: dict[str, object] = {"__name__": "user_script"}
    exec(compile(GOOD.read_text(), str(GOOD), "exec"), namespace)
    # 9 + 25 + (36 + 16) + (1 + 4 + 9) + len("hello ada?") + 2
    assert namespace["executor_like_the_stdlib"]() == 112  # type: ignore[operator]
