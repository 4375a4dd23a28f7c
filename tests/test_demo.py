"""``python -m taut demo``: the live agent-turn demo runs and proves its claims."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("TAUT_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "taut", "demo", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.timeout(150)
def test_demo_runs_and_every_check_holds() -> None:
    proc = _run_demo()
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "You have 3 seconds and 3 available agents." in out
    assert "round 1: 8 tool calls on 3 tool workers" in out
    # queue notices: five calls wait, positions count down, notices clear
    for n in range(1, 6):
        assert f"Waiting for a free worker - position {n}" in out
    # the clearing notice says where the call started
    assert "t4 shell: started on agent-tool-worker_" in out
    assert "Error executing tool 'hang': timed out after 1.2s" in out
    assert "grandchild sleep (pid" in out and "killed with it" in out
    assert "planning round 2: You have" in out
    assert "round | call | tool" in out  # the final table
    assert out.count("[ok  ]") == 8 and "FAIL" not in out
    assert out.rstrip().endswith("all checks passed")


@pytest.mark.timeout(150)
def test_demo_in_german() -> None:
    proc = _run_demo("--lang", "de")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Warte auf einen freien Bearbeiter - Position 1" in proc.stdout
    assert "Du hast 3 Sekunden und 3 verfügbare Agenten." in proc.stdout
    out = proc.stdout
    assert out.rstrip().endswith("alle Prüfungen bestanden")
    assert "gestartet auf agent-tool-worker_" in out
    # German throughout: labels, table header and decimal commas
    assert "Runde | Aufruf | Tool" in out and "round | call" not in out
    assert "hängendes Tool an der Frist des Stapels abgebrochen" in out
    for english in ("hung tool", "checks", "started on", "[started]", "budget:", " yes "):
        assert english not in out, english
    assert "Frist 1,2 s" in out and "Frist 1.2 s" not in out


def test_a_used_up_budget_is_no_time_not_the_full_batch_deadline() -> None:
    from taut.demo import BATCH_DEADLINE_S, _batch_deadline

    assert _batch_deadline(0.0) == 0.0
    assert _batch_deadline(0.4) == 0.4
    assert _batch_deadline(None) == BATCH_DEADLINE_S
    assert _batch_deadline(99.0) == BATCH_DEADLINE_S
