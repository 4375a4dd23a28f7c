"""``python -m taut demo``: the live agent-turn demo runs and proves its claims."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

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
    # what was left of the 1.2 s batch deadline when its group started:
    # 1.2 s, or 1.1 s on a machine busy enough to start it 50 ms late
    assert re.search(r"Error executing tool 'hang': timed out after 1\.[12]s", out), out
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
    # the status and result columns too: the table, the per-call lines, the tools' texts
    table = out.split("Ergebnisse", 1)[1].split("Prüfungen", 1)[0]
    assert "| Zeitüberschreitung |" in table
    assert re.search(r"Fehler beim Ausführen von 'hang': Zeitüberschreitung nach 1,[12] s", table)
    assert "3 Textstellen zu 'deadlines'" in table and "mit beendet" in table
    assert "t3 hang: Zeitüberschreitung nach" in out
    for english in ("timeout", "Error executing", "timed out", "passages", "bytes read", " words"):
        assert english not in table, english


def test_a_used_up_budget_is_no_time_not_the_full_batch_deadline() -> None:
    from taut.demo import BATCH_DEADLINE_S, _batch_deadline

    assert _batch_deadline(0.0) == 0.0
    assert _batch_deadline(0.4) == 0.4
    assert _batch_deadline(None) == BATCH_DEADLINE_S
    assert _batch_deadline(99.0) == BATCH_DEADLINE_S


def test_the_result_column_speaks_the_demo_language() -> None:
    from taut.demo import _TEXT, _result_text, _Row
    from taut.tools import ToolResult

    hung = ToolResult(
        "t3", "hang", "timeout", "Error executing tool 'hang': timed out after 1.2s", started=True
    )
    late = ToolResult(
        "t9",
        "late",
        "timeout",
        "Error executing tool 'late': timed out after 1.2s "
        "(no free worker before the batch deadline)",
    )
    failed = ToolResult(
        "t4",
        "fail",
        "error",
        "Error executing tool 'fail': disk full",
        error=OSError("disk full"),
        started=True,
    )
    fine = ToolResult("t1", "ok", "ok", "3 Wörter", started=True)
    de, en = _TEXT["de"], _TEXT["en"]
    assert _result_text(_Row(1, hung, deadline=1.2), de) == (
        "Fehler beim Ausführen von 'hang': Zeitüberschreitung nach 1,2 s"
    )
    assert _result_text(_Row(1, late, deadline=1.2), de) == (
        "Fehler beim Ausführen von 'late': kein Bearbeiter frei vor der Frist"
    )
    assert _result_text(_Row(1, failed), de) == "Fehler beim Ausführen von 'fail': disk full"
    assert _result_text(_Row(1, fine), de) == "3 Wörter"
    # English shows what the model reads, unchanged
    for result in (hung, late, failed, fine):
        assert _result_text(_Row(1, result, deadline=1.2), en) == result.text
    assert set(de["status"]) == set(en["status"]) == {"ok", "error", "timeout"}
    assert set(de) == set(en)  # every text has both languages


def _readme() -> str:
    from pathlib import Path

    return (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")


def test_readme_command_one_makes_and_uses_a_virtual_environment() -> None:
    # System Pythons such as Debian 12's refuse `pip install` outside a venv.
    block = _readme().split("## The two commands", 1)[1].split("```sh\n", 1)[1].split("```")[0]
    command = " ".join(
        line.strip() for line in block.split("# 2.")[0].splitlines() if not line.startswith("#")
    )
    assert command.startswith("python3 -m venv .venv && . .venv/bin/activate && ")
    assert "python -m pip install . && python -m taut bench && python -m taut demo" in command
    assert "python3 -m pip" not in command  # the system pip, outside the venv


def test_readme_speaks_to_users_not_to_the_team() -> None:
    text = _readme()
    for word in (r"\bseeds?\b", r"\bissues?\b", "§", r"\bhelpers?\b", r"\bwt-"):
        assert not re.search(word, text, re.IGNORECASE), word


# ------------------------------------------------------------ where the output goes
def _taut_command(*args: str, **popen: object) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop("TAUT_CONFIG", None)
    env.update(popen.pop("env", {}))  # type: ignore[call-overload]
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "taut", *args], text=True, env=env, **popen
    )


@pytest.mark.timeout(150)
@pytest.mark.parametrize("args", [("demo",), ("bench", "--quick", "--area", "config")])
def test_a_reader_that_leaves_early_ends_the_command_quietly(args: tuple[str, ...]) -> None:
    # `python -m taut demo | head -1`: the rest of the output has nowhere to
    # go. Before, the demo logged a traceback for every notice it could not
    # print and both ended with a BrokenPipeError traceback.
    proc = _taut_command(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # as `head -1` does
    errors = proc.stderr.read()
    assert proc.wait(120) == 1
    assert first.strip()
    assert "Traceback" not in errors and "BrokenPipeError" not in errors, errors


@pytest.mark.timeout(150)
def test_output_that_cannot_be_written_is_said_in_one_line() -> None:
    with open("/dev/full", "w") as full:
        proc = _taut_command("demo", stdout=full, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        errors = proc.stderr.read()
        assert proc.wait(120) == 1
    assert "Traceback" not in errors, errors
    assert "No space left on device" in errors


@pytest.mark.timeout(150)
def test_a_terminal_that_cannot_show_the_german_texts_still_gets_them() -> None:
    proc = _taut_command(
        "demo",
        "--lang",
        "de",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PYTHONIOENCODING": "ascii", "LC_ALL": "C"},
    )
    out, errors = proc.communicate(timeout=120)
    assert proc.returncode == 0, errors
    assert "Traceback" not in errors, errors
    assert "\\xfc" in out  # ü, escaped rather than a UnicodeEncodeError


def _config_file(tmp_path: Path) -> str:
    path = tmp_path / "taut.yaml"
    path.write_text("timeouts:\n  tools:\n    concurrent_batch: 5\n", encoding="utf-8")
    return str(path)


def _run_taut(args: tuple[str, ...], stdout: int, shell_prefix: str = "") -> tuple[int, str]:
    env = dict(os.environ)
    env.pop("TAUT_CONFIG", None)
    env.pop("PYTHONUNBUFFERED", None)  # buffered, as in a terminal session
    command = [sys.executable, "-m", "taut", *args]
    if shell_prefix:
        command = ["/bin/sh", "-c", f'{shell_prefix} "$@"', "sh", *command]
    proc = subprocess.run(
        command, stdout=stdout, stderr=subprocess.PIPE, text=True, env=env, timeout=60
    )
    return proc.returncode, proc.stderr


_CHEAP_COMMANDS = [("--help",), ("--version",), ("config", "schema"), ("config", "check", "FILE")]


@pytest.mark.parametrize("args", _CHEAP_COMMANDS, ids=" ".join)
def test_a_closed_stdout_is_said_in_one_line(args: tuple[str, ...], tmp_path: Path) -> None:
    # `python -m taut config check FILE >&-`: before, an AttributeError
    # traceback ('NoneType' object has no attribute 'write'), or the help
    # on stderr and exit status 0.
    args = tuple(_config_file(tmp_path) if a == "FILE" else a for a in args)
    status, errors = _run_taut(args, subprocess.DEVNULL, shell_prefix="exec >&-;")
    assert status == 1, errors
    assert errors == "python -m taut: cannot write the output: stdout is closed\n", errors


@pytest.mark.parametrize("args", [("--bogus",), (), ("bench", "--area", "nope")], ids=repr)
@pytest.mark.parametrize("stdout", ["closed", "a closed pipe"])
def test_a_refused_command_line_keeps_its_usage_and_status_2(
    args: tuple[str, ...], stdout: str
) -> None:
    # With stdout closed it exited 1 and added "stdout is closed" to
    # argparse's own usage message, as if the command line were fine.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        if stdout == "closed":
            status, errors = _run_taut(args, subprocess.DEVNULL, shell_prefix="exec >&-;")
        else:
            status, errors = _run_taut(args, write_end)
    finally:
        os.close(write_end)
    assert status == 2, errors
    assert errors.startswith("usage: python -m taut"), errors
    assert "stdout is closed" not in errors, errors


@pytest.mark.parametrize("args", _CHEAP_COMMANDS, ids=" ".join)
def test_a_reader_gone_before_the_first_line_ends_the_command_quietly(
    args: tuple[str, ...], tmp_path: Path
) -> None:
    # `python -m taut --help | true`: before, "Exception ignored ...
    # BrokenPipeError" and exit status 120. As Python's note on SIGPIPE
    # advises: nothing more to the closed pipe, and exit status 1.
    args = tuple(_config_file(tmp_path) if a == "FILE" else a for a in args)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        status, errors = _run_taut(args, write_end)
    finally:
        os.close(write_end)
    assert status == 1, errors
    assert errors == "", errors
