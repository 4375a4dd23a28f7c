"""Exit safety: programs that end while taut has abandoned, queued or
running work exit cleanly, every time (the matrix is in exit_matrix.py)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import exit_matrix

# Runs per case: 20 by default (CI); TAUT_EXIT_RUNS overrides it.
RUNS = int(os.environ.get("TAUT_EXIT_RUNS", "20"))


@pytest.fixture(scope="module")
def startup() -> float:
    return exit_matrix.startup_seconds()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", exit_matrix.CASES, ids=lambda c: c.name)
def test_program_exits_cleanly(case: exit_matrix.Case, startup: float) -> None:
    problems = exit_matrix.run_case(case, RUNS, startup, allowed=exit_matrix.HANG_BUDGET)
    assert not problems, f"{len(problems)}/{RUNS} runs failed: {sorted(set(problems))}"


def test_every_gil_release_in_the_rust_core_goes_through_the_gate() -> None:
    # rust/gil.rs is the one place that releases and re-takes the GIL: a
    # bare `py.detach` or `Python::attach` elsewhere could re-enter a
    # finalizing interpreter with a Rust frame on the stack (abort at exit).
    rust = os.path.join(os.path.dirname(__file__), os.pardir, "rust")
    offenders = []
    for name in sorted(os.listdir(rust)):
        if not name.endswith(".rs") or name == "gil.rs":
            continue
        with open(os.path.join(rust, name), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                code = line.split("//")[0]
                if any(word in code for word in (".detach(", "Python::attach", "with_gil")):
                    offenders.append(f"{name}:{number}: {line.strip()}")
    assert not offenders, offenders


def test_a_user_call_has_no_rust_frame_below_it() -> None:
    # The worker loop is Python: the frames under a running call are the
    # thread bootstrap and taut's loop, all Python (a C frame of the Rust core
    # would not show here, so check that the loop frame calls the user's
    # function directly).
    import traceback

    import taut

    def where() -> list[str]:
        return [frame.name for frame in traceback.extract_stack()]

    with taut.ThreadPoolExecutor(1) as ex:
        names = ex.submit(where).result()
    assert names[-2:] == ["_work", "where"], names
    assert names[0] == "_bootstrap", names
