"""run_process under hostile input and awkward edges: every call ends in one
outcome, bad arguments are refused before anything starts, and nothing is
left behind (no armed deadline, no running command).

Timings are lopsided: budgets of 0.3-1 s against work of 60 s."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import taut
from taut import _core
from taut.deadline import DeadlineExpired
from taut.demo import _pid_gone

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)"),
]

WORK = "60"
PROMPT_S = 20.0


def _must_not_start(*args: object, **kwargs: object) -> None:
    raise AssertionError(f"the command was started: {args}")


def _kill_left_over(procs: list[subprocess.Popen[bytes]]) -> None:
    """Kill what a failing test left running (Popen.kill never signals a
    child it has reaped)."""
    for proc in procs:
        proc.kill()
        proc.wait()


def gone(pid: int, within: float = 10.0) -> bool:
    """The process has exited (a zombie has) within ``within`` seconds."""
    return _pid_gone(pid, within)


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Every command run_process spawns in the test, killed afterwards if the
    test left it running."""
    procs: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    class RecordingPopen(real_popen):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            procs.append(self)

    monkeypatch.setattr(subprocess, "Popen", RecordingPopen)
    try:
        yield procs
    finally:
        _kill_left_over(procs)


# ---------------------------------------------------------------------------
# text output that the deadline's kill cut short


def test_a_timed_out_text_output_cut_inside_a_character_is_still_a_timeout() -> None:
    # The kill can land between the bytes of one UTF-8 character. Decoding
    # that output strictly raised UnicodeDecodeError: the timeout outcome and
    # everything read before it were lost (check=True lost DeadlineExpired).
    command = ["sh", "-c", f"printf 'ok \\303'; exec sleep {WORK}"]
    result = taut.run_process(command, 1.0, text=True)
    assert result.timed_out is True
    assert result.stdout == "ok \ufffd"
    with pytest.raises(DeadlineExpired):
        taut.run_process(command, 1.0, encoding="utf-8", check=True)


def test_a_timed_out_text_output_with_bytes_that_do_not_decode_is_still_a_timeout() -> None:
    # subprocess.run never raises a decode error on a timeout (TimeoutExpired
    # carries bytes). Here the undecodable byte raised UnicodeDecodeError in
    # place of the timed-out result, and check=True raised it instead of
    # DeadlineExpired, though the kill had already ended the command.
    command = ["sh", "-c", f"printf 'a\\377b'; exec sleep {WORK}"]
    result = taut.run_process(command, 1.0, text=True)
    assert (result.timed_out, result.stdout) == (True, "a\ufffdb")
    with pytest.raises(DeadlineExpired):
        taut.run_process(command, 1.0, text=True, check=True)


def test_invalid_text_from_a_completed_command_still_raises_like_subprocess_run() -> None:
    # Only the cut made by the kill is forgiven; bad bytes the command wrote
    # itself are the command's output, decoded as strictly as asked.
    with pytest.raises(UnicodeDecodeError):
        taut.run_process(["printf", "\\303"], 30, text=True)
    assert taut.run_process(["printf", "\\303"], 30, errors="replace").stdout == "\ufffd"


# ---------------------------------------------------------------------------
# encoding / errors are checked before the command runs


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"encoding": "no-such-codec"}, LookupError, r"encoding .*'no-such-codec' \(str\)"),
        ({"errors": "no-such-handler"}, LookupError, r"errors .*'no-such-handler' \(str\)"),
        ({"encoding": 5}, TypeError, r"encoding must be a str or None, got 5 \(int\)"),
        ({"errors": b"strict"}, TypeError, r"errors must be a str or None, got b'strict'"),
    ],
)
def test_bad_encoding_or_errors_is_refused_before_the_command_runs(
    kwargs: dict[str, Any], error: type[Exception], match: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # They were first used to decode the output: the command ran (its side
    # effects done), then its output was lost to a LookupError or to
    # "decode() argument 'encoding' must be str"; an unknown codec went
    # unnoticed when the output was empty. subprocess.run refuses an unknown
    # encoding before it starts anything.
    monkeypatch.setattr(subprocess, "Popen", _must_not_start)
    with pytest.raises(error, match=match):
        taut.run_process(["true"], 30, **kwargs)


# ---------------------------------------------------------------------------
# a command that cannot start


@pytest.mark.parametrize(
    "kwargs",
    [{"args": ["/nonexistent/taut-probe"]}, {"args": ["true"], "cwd": "/nonexistent/dir"}],
)
def test_a_command_that_cannot_start_leaves_no_deadline_armed(
    kwargs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The deadline was armed before the spawn and left pending when Popen
    # raised: one timer entry per failed call, kept until it would have fired
    # (an hour here, up to 136 years for a huge timeout).
    armed: list[_core.Deadline] = []
    real = _core.Deadline

    def recording(at: float) -> _core.Deadline:
        deadline = real(at)
        armed.append(deadline)
        return deadline

    monkeypatch.setattr(_core, "Deadline", recording)
    args = kwargs.pop("args")
    with pytest.raises(FileNotFoundError):
        taut.run_process(args, 3600, **kwargs)
    assert [d for d in armed if not (d.cancelled or d.expired)] == []


def test_an_interrupt_right_after_the_spawn_still_kills_the_command(
    monkeypatch: pytest.MonkeyPatch, spawned: list[subprocess.Popen[bytes]]
) -> None:
    # The first steps after Popen returned ran outside the try that kills the
    # tree on any exception: a KeyboardInterrupt there left the command
    # running with no deadline. The interrupt is injected at the first call
    # after the spawn.
    def interrupted(pid: int) -> int | None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_core, "process_start_time", interrupted)
    with pytest.raises(KeyboardInterrupt):
        taut.run_process(["sleep", WORK], 30)
    assert len(spawned) == 1 and gone(spawned[0].pid)


# ---------------------------------------------------------------------------
# enclosing deadline scopes


def _in_thread(fn: Any) -> Any:
    """Run ``fn`` on a fresh thread (where a scope cannot interrupt a blocking
    call) and return what it returned or raised."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append(fn())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(PROMPT_S)
    assert not thread.is_alive(), "run_process ignored the enclosing scope"
    return outcome[0]


@pytest.mark.parametrize("interrupt", [False, True])
def test_run_process_in_a_worker_thread_is_bounded_by_the_enclosing_scope(
    interrupt: bool,
) -> None:
    # Off the main thread no scope can interrupt the wait for the command:
    # run_process waited for the whole command (forever for one that never
    # ends), whatever the scope's deadline, as if it were not inside one.
    results: list[taut.ProcessResult] = []

    def bounded() -> float:
        started = time.monotonic()
        with taut.move_on_after(0.3, interrupt=interrupt):
            results.append(taut.run_process(["sleep", WORK], None))
        return time.monotonic() - started

    elapsed = _in_thread(bounded)
    assert elapsed < PROMPT_S
    if not interrupt:
        # (With interrupt=True the scope's own interrupt may land as the call
        # returns, before its result is kept: the block is cancelled.)
        assert [(r.timed_out, r.returncode) for r in results] == [(True, -9)]


def test_run_process_under_fail_after_raises_and_leaves_no_command_running(
    spawned: list[subprocess.Popen[bytes]],
) -> None:
    def bounded() -> tuple[BaseException | None, float]:
        started = time.monotonic()
        try:
            with taut.fail_after(0.3):
                taut.run_process(["sleep", WORK], 3600)
        except DeadlineExpired as exc:
            return exc, time.monotonic() - started
        return None, time.monotonic() - started

    error, elapsed = _in_thread(bounded)
    assert isinstance(error, DeadlineExpired)
    assert elapsed < PROMPT_S
    assert len(spawned) == 1 and gone(spawned[0].pid)


def test_a_scope_already_expired_starts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "Popen", _must_not_start)
    with taut.move_on_after(0):
        result = taut.run_process(["true"], None)
    assert result.timed_out is True


def test_a_scope_later_than_the_timeout_changes_nothing() -> None:
    with taut.fail_after(3600):
        result = taut.run_process(["sh", "-c", "echo hi"], 30)
    assert (result.timed_out, result.returncode, result.stdout) == (False, 0, b"hi\n")
    assert result.timeout_s == 30.0


# ---------------------------------------------------------------------------
# kill_process_tree interrupted during its grace period


def test_an_interrupt_during_the_grace_period_still_escalates_to_sigkill() -> None:
    # Ctrl-C while kill_process_tree(grace=...) waited for SIGTERM to work
    # skipped the promised SIGKILL: a member that ignores SIGTERM lived on.
    child = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: print('term', flush=True))\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        "    time.sleep(60)\n"
    )
    # The caller starts the child, waits until its SIGTERM handler is in
    # place, and says when it is in the grace wait (its first sleep there).
    caller = (
        "import subprocess, sys, time, taut\n"
        f"child = subprocess.Popen([sys.executable, '-c', {child!r}],\n"
        "                         stdout=subprocess.PIPE, start_new_session=True)\n"
        "print(child.pid, child.stdout.readline().decode().strip(), flush=True)\n"
        "real_sleep = time.sleep\n"
        "def sleep(seconds):\n"
        "    time.sleep = real_sleep\n"
        "    print('waiting', flush=True)\n"
        "    real_sleep(seconds)\n"
        "time.sleep = sleep\n"
        "try:\n"
        f"    taut.kill_process_tree(child.pid, grace={WORK})\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", caller], stdout=subprocess.PIPE, start_new_session=True
    )
    assert proc.stdout is not None
    pid = 0
    try:
        pid_text, ready = proc.stdout.readline().split()
        pid = int(pid_text)
        assert ready == b"ready"
        assert proc.stdout.readline() == b"waiting\n"
        proc.send_signal(signal.SIGINT)
        assert proc.stdout.readline() == b"interrupted\n"
        assert proc.wait(timeout=PROMPT_S) == 0
        assert gone(pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if pid and not gone(pid, within=0):
            os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------------
# a wrong argument whose __repr__ raises, or that has too many digits to print


class _BrokenRepr:
    def __repr__(self) -> str:
        raise RuntimeError("from the argument's __repr__")


def test_wrong_arguments_with_a_broken_repr_are_refused_naming_them() -> None:
    # Before: the argument's own RuntimeError, naming no parameter.
    shown = r"got <unrepresentable> \(_BrokenRepr\)"
    with pytest.raises(TypeError, match=r"^pid must be a positive int process id, " + shown):
        taut.kill_process_tree(_BrokenRepr())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^args must be a command string .*" + shown):
        taut.run_process(_BrokenRepr(), timeout=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^check must be a bool, " + shown):
        taut.run_process(["true"], timeout=5, check=_BrokenRepr())  # type: ignore[arg-type]


def test_a_pid_too_long_to_print_is_still_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^pid must be .*got <int too long to print> \(int\)"):
        taut.kill_process_tree(10**5000)


# ---------------------------------------------------------------------------
# kill_process_tree given the id of a thread, not of a process


def test_a_thread_id_is_refused_naming_its_process() -> None:
    # /proc/TID exists for every thread, so the id of a non-main thread was
    # taken for a process that could not be signalled: kill_process_tree
    # returned True (signalled) and nothing was killed.
    script = (
        "import threading, time\n"
        "threading.Thread(target=lambda: print(threading.get_native_id(), flush=True)"
        " or time.sleep(60), daemon=True).start()\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert child.stdout is not None
        tid = int(child.stdout.readline())
        expected = rf"pid must be a process id, got {tid}: a thread of process {child.pid}"
        with pytest.raises(ValueError, match=expected):
            taut.kill_process_tree(tid)
    finally:
        child.kill()
        child.wait()


# ---------------------------------------------------------------------------
# text and universal_newlines


@pytest.mark.parametrize(("text", "universal"), [(True, False), (False, True)])
def test_text_and_universal_newlines_that_disagree_are_refused_like_subprocess_run(
    text: bool, universal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # subprocess.run refuses them ("Cannot disambiguate ..."); run_process
    # took whichever said True, and passed universal_newlines on to Popen.
    monkeypatch.setattr(subprocess, "Popen", _must_not_start)
    with pytest.raises(subprocess.SubprocessError, match=r"Cannot disambiguate.*text="):
        taut.run_process(["true"], 30, text=text, universal_newlines=universal)


def test_text_and_universal_newlines_that_agree_are_taken() -> None:
    result = taut.run_process(["printf", "a\\r\\nb"], 30, text=True, universal_newlines=True)
    assert result.stdout == "a\nb"


# ---------------------------------------------------------------------------
# session and stream arguments

_STREAM_KINDS = r"must be None, subprocess\.PIPE, subprocess\.DEVNULL, "


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"stdout": "out.txt"}, TypeError, r"stdout " + _STREAM_KINDS + r".*got 'out\.txt' \(str"),
        ({"stdout": 3.5}, TypeError, r"stdout must be .*got 3\.5 \(float\)"),
        ({"stdout": io.StringIO()}, TypeError, r"stdout must be .*fileno.*\(StringIO\)"),
        ({"stderr": object()}, TypeError, r"stderr must be .*subprocess\.STDOUT.*\(object\)"),
        ({"stdin": "x"}, TypeError, r"stdin must be .*got 'x' \(str\)"),
        # A bool is an int to Popen: stdout=True wrote to this process's fd 1.
        ({"stdout": True}, TypeError, r"stdout must be .*got True \(bool\)"),
        ({"stdout": -5}, ValueError, r"stdout must be .*got -5 \(int\)"),
        ({"stdout": subprocess.STDOUT}, ValueError, r"stdout must be .*got -2 \(int\)"),
        ({"stdout": 10**30}, ValueError, r"stdout must be .*got 1000000000000000000000000000000"),
        ({"stderr": 1_000_000}, ValueError, r"stderr must be .*not an open file descriptor"),
        ({"start_new_session": "yes"}, TypeError, r"start_new_session must be a bool or None"),
        ({"start_new_session": 1}, TypeError, r"start_new_session must be .*got 1 \(int\)"),
        ({"text": "no"}, TypeError, r"text must be a bool or None, got 'no' \(str\)"),
        ({"universal_newlines": "x"}, TypeError, r"universal_newlines must be a bool or None"),
        ({"shell": "false"}, TypeError, r"shell must be a bool, got 'false' \(str\)"),
        ({"close_fds": None}, TypeError, r"close_fds must be a bool, got None"),
    ],
)
def test_bad_session_or_stream_arguments_are_refused_naming_them(
    kwargs: dict[str, Any], error: type[Exception], match: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Popen's own errors named neither: "'str' object has no attribute
    # 'fileno'", "Python int too large to convert to C long", "'str' object
    # cannot be interpreted as an integer", or none at all (text="no" and
    # shell="false" count as true).
    monkeypatch.setattr(subprocess, "Popen", _must_not_start)
    with pytest.raises(error, match=match):
        taut.run_process(["true"], 30, **kwargs)


def test_good_stream_arguments_are_taken(tmp_path: Any) -> None:
    with open(tmp_path / "out", "wb") as out:
        result = taut.run_process(["sh", "-c", "echo a; echo b >&2"], 30, stdout=out, stderr=-2)
    assert (result.stdout, result.stderr) == (None, None)
    assert (tmp_path / "out").read_bytes() == b"a\nb\n"
    with open(tmp_path / "out", "wb") as out:
        result = taut.run_process(["echo", "c"], 30, stdout=out.fileno(), stdin=subprocess.DEVNULL)
    assert (tmp_path / "out").read_bytes() == b"c\n"
    result = taut.run_process(
        ["sh", "-c", "echo d >&2"], 30, stderr=subprocess.STDOUT, start_new_session=None, text=True
    )
    assert result.stdout == "d\n"


def test_a_process_group_and_a_file_descriptor_may_be_any_int_like(tmp_path: Any) -> None:
    # Before: process_group=np.int64(0) was "process_group must be an int",
    # and Popen took a NumPy file descriptor for a file object ("'numpy.int64'
    # object has no attribute 'fileno'").
    np = pytest.importorskip("numpy")
    # Popen takes process_group from Python 3.11; before, a session of its own.
    own: dict[str, Any] = {"process_group": np.int64(0)} if sys.version_info >= (3, 11) else {}
    with open(tmp_path / "out", "wb") as out:
        result = taut.run_process(
            ["sh", "-c", "echo a; ps -o pgid= -p $$"],
            30,
            stdout=np.int32(out.fileno()),
            stderr=np.int64(subprocess.DEVNULL),
            **own,
        )
    assert result.returncode == 0
    first, group = (tmp_path / "out").read_bytes().split()
    assert first == b"a" and int(group) != os.getpgrp()
    with pytest.raises(TypeError, match=r"process_group must be an int or None, got np\.True_"):
        taut.run_process(["true"], 30, process_group=np.True_)
    with pytest.raises(TypeError, match=r"stdout must be .*got np\.float64\(1\.0\)"):
        taut.run_process(["true"], 30, stdout=np.float64(1))
