"""kill_process_tree and run_process: whole trees die, the caller never does,
reused pids are never signalled, and a deadline returns on time.

Liveness is checked with psutil / os.kill(pid, 0) on real processes (zombies
count as dead; we reap the ones we own), never with marker files."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import psutil
import pytest

import taut
from taut import _core
from taut.deadline import DeadlineExpired

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)"),
]

# Lopsided timings: work of 30 s against budgets of 0.05-0.2 s, and generous
# bounds for "promptly" so a busy 2-core machine never makes a test flaky.
WORK = "30"
PROMPT_S = 5.0
SANDBOX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_process_sandbox.py")


def running(pid: int) -> bool:
    """Exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids: list[int], within: float = 10.0) -> list[int]:
    """Wait until none of ``pids`` runs; return the ones still running."""
    until = time.monotonic() + within
    left = [p for p in pids if running(p)]
    while left and time.monotonic() < until:
        time.sleep(0.01)
        left = [p for p in left if running(p)]
    return left


def wait_descendants(pid: int, count: int, within: float = 10.0) -> list[int]:
    until = time.monotonic() + within
    while time.monotonic() < until:
        kids = [p.pid for p in psutil.Process(pid).children(recursive=True)]
        if len(kids) >= count:
            return kids
        time.sleep(0.01)
    raise AssertionError(f"{pid} never had {count} descendants")


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Popen objects to kill and reap after the test, whatever happens."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL) if os.getpgid(
                    proc.pid
                ) == proc.pid else proc.kill()
            except OSError:
                pass
        proc.wait(timeout=10)


@pytest.fixture
def strays() -> Iterator[list[int]]:
    """Pids a test expects to be dead; killed afterwards if a test failed."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def sh(script: str, **kwargs: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sh", "-c", script], **kwargs)  # type: ignore[call-overload,no-any-return]


# ---------------------------------------------------------------------------
# kill_process_tree


def test_kills_children_and_grandchildren(
    spawned: list[subprocess.Popen[bytes]], strays: list[int]
) -> None:
    root = sh(f"sh -c 'sleep {WORK} & sleep {WORK}' & sleep {WORK} & wait", start_new_session=True)
    spawned.append(root)
    tree = wait_descendants(root.pid, 4)
    strays.extend(tree)
    assert taut.kill_process_tree(root.pid) is True
    assert root.wait(timeout=10) == -signal.SIGKILL
    assert wait_gone(tree) == []


def test_kills_grandchild_that_started_its_own_session(
    spawned: list[subprocess.Popen[bytes]], strays: list[int]
) -> None:
    root = sh(f"setsid sleep {WORK} & wait", start_new_session=True)
    spawned.append(root)
    (grandchild,) = wait_descendants(root.pid, 1)
    strays.append(grandchild)
    until = time.monotonic() + 10
    while os.getsid(grandchild) != grandchild:  # setsid may not have run yet
        assert time.monotonic() < until
        time.sleep(0.01)
    assert os.getpgid(grandchild) != os.getpgid(root.pid)
    assert taut.kill_process_tree(root.pid) is True
    root.wait(timeout=10)
    assert wait_gone([grandchild]) == []


def test_kills_orphans_left_in_the_session_of_an_exited_root(
    spawned: list[subprocess.Popen[bytes]], strays: list[int]
) -> None:
    # The root exits at once; its background child is reparented to init and
    # is found only through the session the root led. The root stays a zombie
    # (unreaped), which still counts as present, as for os.kill.
    root = sh(
        f"sleep {WORK} >/dev/null 2>&1 & echo $!", stdout=subprocess.PIPE, start_new_session=True
    )
    spawned.append(root)
    assert root.stdout is not None
    orphan = int(root.stdout.readline())
    strays.append(orphan)
    until = time.monotonic() + 10
    while psutil.Process(root.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < until
        time.sleep(0.01)
    assert psutil.Process(orphan).ppid() != root.pid
    assert taut.kill_process_tree(root.pid) is True
    assert wait_gone([orphan]) == []


def test_a_forking_tree_cannot_escape(spawned: list[subprocess.Popen[bytes]]) -> None:
    # Forks a new sleeper every few milliseconds: without freezing the tree, a
    # child forked between discovery and the kill would survive.
    root = sh(f"while true; do sleep {WORK} & sleep 0.005; done", start_new_session=True)
    spawned.append(root)
    wait_descendants(root.pid, 20)
    assert taut.kill_process_tree(root.pid) is True
    root.wait(timeout=10)
    session = root.pid

    def members() -> list[int]:
        out = []
        for p in psutil.process_iter():
            try:
                if os.getsid(p.pid) == session and running(p.pid):
                    out.append(p.pid)
            except (OSError, psutil.Error):
                pass
        return out

    left = members()
    until = time.monotonic() + 10
    while left and time.monotonic() < until:
        time.sleep(0.02)
        left = members()
    assert left == []


def test_sigterm_is_delivered_and_handled(spawned: list[subprocess.Popen[bytes]]) -> None:
    # The tree is frozen with SIGSTOP while it is signalled; without the final
    # SIGCONT the handler below would never run.
    code = (
        "import signal, sys, time\n"
        "def on_term(*_):\n"
        "    print('handled', flush=True); sys.exit(3)\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        "print('ready', flush=True)\n"
        f"time.sleep({WORK})\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True
    )
    spawned.append(child)
    assert child.stdout is not None
    assert child.stdout.readline() == b"ready\n"
    assert taut.kill_process_tree(child.pid, sig=signal.SIGTERM) is True
    assert child.stdout.readline() == b"handled\n"
    assert child.wait(timeout=10) == 3


@pytest.mark.parametrize("sig", [signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGSTOP])
@pytest.mark.parametrize(
    "own",
    [
        {"start_new_session": True},
        pytest.param(
            {"process_group": 0},
            marks=pytest.mark.skipif(
                sys.version_info < (3, 11), reason="Popen takes process_group from Python 3.11"
            ),
        ),
    ],
)
def test_a_stop_signal_stops_the_whole_tree(
    spawned: list[subprocess.Popen[bytes]],
    strays: list[int],
    sig: signal.Signals,
    own: dict[str, object],
) -> None:
    # The tree is frozen while it is signalled, and the SIGCONT that follows a
    # catchable signal would drop a stop signal still pending; in a session of
    # its own (an orphaned group) the kernel drops SIGTSTP/SIGTTIN/SIGTTOU
    # even from os.kill. Either way the tree must end up stopped.
    root = sh(f"sleep {WORK} & sleep {WORK} & wait", **own)
    spawned.append(root)
    tree = [root.pid, *wait_descendants(root.pid, 2)]
    strays.extend(tree)

    def statuses() -> set[str]:
        return {psutil.Process(p).status() for p in tree}

    assert taut.kill_process_tree(root.pid, sig=sig) is True
    until = time.monotonic() + 10
    while statuses() != {psutil.STATUS_STOPPED} and time.monotonic() < until:
        time.sleep(0.01)
    assert statuses() == {psutil.STATUS_STOPPED}
    # And it can be continued as a whole.
    assert taut.kill_process_tree(root.pid, sig=signal.SIGCONT) is True
    until = time.monotonic() + 10
    while psutil.STATUS_STOPPED in statuses() and time.monotonic() < until:
        time.sleep(0.01)
    assert psutil.STATUS_STOPPED not in statuses()


@pytest.mark.parametrize("sig", [signal.SIGSTOP, signal.SIGTSTP, signal.SIGCONT])
def test_grace_with_a_signal_that_cannot_end_the_tree_is_refused(
    spawned: list[subprocess.Popen[bytes]], sig: signal.Signals
) -> None:
    # The grace period waits for the tree to end: a stopped (or continued)
    # tree never does, so it was killed with SIGKILL when the wait ran out.
    child = subprocess.Popen(["sleep", WORK], start_new_session=True)
    spawned.append(child)
    with pytest.raises(ValueError, match=rf"^grace needs a signal .* sig={sig.name} with grace=5"):
        taut.kill_process_tree(child.pid, sig=sig, grace=5)
    assert psutil.Process(child.pid).status() != psutil.STATUS_STOPPED
    assert child.poll() is None  # neither stopped nor signalled


def test_grace_escalates_to_sigkill_for_what_ignores_sigterm(
    spawned: list[subprocess.Popen[bytes]], strays: list[int]
) -> None:
    # SIG_IGN is inherited through exec, so the sleeper ignores SIGTERM too.
    root = sh(f"trap '' TERM; sleep {WORK} & wait", start_new_session=True)
    spawned.append(root)
    tree = wait_descendants(root.pid, 1)
    strays.extend(tree)
    started = time.monotonic()
    assert taut.kill_process_tree(root.pid, grace=0.1) is True
    assert time.monotonic() - started < PROMPT_S
    assert root.wait(timeout=10) == -signal.SIGKILL
    assert wait_gone(tree) == []


def test_grace_returns_early_when_sigterm_works(spawned: list[subprocess.Popen[bytes]]) -> None:
    child = subprocess.Popen(["sleep", WORK], start_new_session=True)
    spawned.append(child)
    started = time.monotonic()
    # A long grace that need not be used: the default SIGTERM kills sleep.
    assert taut.kill_process_tree(child.pid, grace=20) is True
    assert time.monotonic() - started < PROMPT_S
    assert child.wait(timeout=10) == -signal.SIGTERM


def test_returns_false_for_a_process_already_gone() -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    assert taut.kill_process_tree(child.pid) is False
    assert taut.kill_process_tree(child.pid, grace=0.1) is False


def stop_record(child: int) -> int | None:
    """``CLD_STOPPED``/``CLD_CONTINUED`` if our child was ever stopped, else None
    (the kernel records it when the signal is sent: no waiting)."""
    info = os.waitid(os.P_PID, child, os.WSTOPPED | os.WCONTINUED | os.WNOHANG | os.WNOWAIT)
    return None if info is None else info.si_code


def test_refuses_a_child_in_the_callers_process_group(
    spawned: list[subprocess.Popen[bytes]],
) -> None:
    # A child started without a group of its own shares ours: refused, and
    # neither it nor its own child is stopped or signalled.
    victim = sh(f"sleep {WORK} & wait")
    spawned.append(victim)
    assert os.getpgid(victim.pid) == os.getpgrp()
    (grandchild,) = wait_descendants(victim.pid, 1)
    with pytest.raises(
        ValueError, match=rf"caller's own process group {os.getpgrp()}, got {victim.pid}"
    ):
        taut.kill_process_tree(victim.pid)
    with pytest.raises(ValueError, match="start_new_session=True or process_group=0"):
        taut.kill_process_tree(victim.pid, sig=signal.SIGTERM, grace=1)
    assert stop_record(victim.pid) is None
    assert running(victim.pid) and running(grandchild)
    with pytest.raises(ValueError, match=r"pid must not be the caller's own process, got \d+"):
        taut.kill_process_tree(os.getpid())
    with pytest.raises(ValueError, match="ancestor of the caller"):
        taut.kill_process_tree(os.getppid(), sig=signal.SIGCONT)


def in_sandbox(scenario: str) -> dict[str, Any]:
    """Run a scenario of tests/_process_sandbox.py as the leader of a session of
    its own (a kill that went wrong harms only the sandbox) and return what it
    saw; every process left in that session is killed afterwards."""
    proc = subprocess.Popen(
        [sys.executable, SANDBOX, scenario],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        for p in psutil.process_iter():
            try:
                if os.getsid(p.pid) == proc.pid:
                    p.kill()
            except (OSError, psutil.Error):
                pass
        proc.wait(timeout=10)
    assert proc.returncode == 0, err.decode()
    facts: dict[str, Any] = json.loads(out.decode().splitlines()[-1])
    return facts


def test_a_child_in_its_parents_group_cannot_harm_its_parent_or_siblings() -> None:
    # The child aims at its parent (also its group leader), its sibling and
    # itself: every call is refused, and no process of the group is stopped or
    # signalled (their SIGUSR1/SIGTERM/SIGCONT are blocked, so a sent one would
    # still be pending).
    facts = in_sandbox("scenario_parent")
    assert facts["same_group"] is True
    lines = facts["caller"].splitlines()
    assert len(lines) == 5, facts["caller"]
    assert all(": refused: pid must not be" in line for line in lines), facts["caller"]
    assert "parent: refused: pid must not be an ancestor of the caller" in lines[0]
    assert "parent with grace: refused: pid must not be an ancestor" in lines[1]
    assert "group leader: refused: pid must not be an ancestor" in lines[2]
    assert "sibling: refused: pid must not be in the caller's own process group" in lines[3]
    assert "self: refused: pid must not be the caller's own process" in lines[4]
    assert facts["me"] == []
    assert facts["sibling"] == []
    assert facts["sibling_stopped"] is None


def test_the_callers_group_leader_is_refused_even_when_not_an_ancestor() -> None:
    # The caller joined a group led by a process that is not its ancestor, and
    # aims at os.getpgrp(), directly and through a deadline.
    facts = in_sandbox("scenario_leader")
    lines = facts["caller"].splitlines()
    assert len(lines) == 2, facts["caller"]
    assert "group leader: refused: pid must not be in the caller's own process group" in lines[0]
    assert "deadline: refused: pid must not be in the caller's own process group" in lines[1]
    assert facts["me"] == []
    assert facts["leader"] == []
    assert facts["leader_stopped"] is None


def test_a_descendant_in_the_callers_group_is_skipped_and_its_children_still_reached() -> None:
    # x (a group of its own) -> y (joined the caller's group) -> z (a group of
    # its own). Killing x signals x and z, never y, and warns about y.
    facts = in_sandbox("scenario_links")
    sigusr1, sigcont = int(signal.SIGUSR1), int(signal.SIGCONT)
    assert facts["found"] is True
    assert facts["y_in_our_group"] is True
    assert facts["y"] == []
    assert facts["x"] == sorted([sigusr1, sigcont])
    assert facts["z"] == sorted([sigusr1, sigcont])
    assert facts["x_stopped"] == os.CLD_CONTINUED  # frozen first, then continued
    assert facts["me"] == []
    (warning,) = facts["warnings"]
    assert f"pids [{facts['pids']['y']}]" in warning


def test_freezes_every_member_before_signalling(
    spawned: list[subprocess.Popen[bytes]],
) -> None:
    # Deterministic check of the freeze: the kernel records that a child was
    # stopped and continued when SIGCONT is sent, so the root (our child) and the
    # grandchild (asked of its parent through a pipe) must both have that record
    # right after the call. SIGURG is ignored by default: everyone survives.
    code = (
        "import os, subprocess, sys\n"
        f"g = subprocess.Popen(['sleep', '{WORK}'])\n"
        "print(g.pid, flush=True)\n"
        "sys.stdin.readline()\n"
        "info = os.waitid(os.P_PID, g.pid, os.WSTOPPED | os.WCONTINUED | os.WNOHANG | os.WNOWAIT)\n"
        "print(None if info is None else info.si_code, flush=True)\n"
        "g.kill(); g.wait()\n"
    )
    root = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    spawned.append(root)
    assert root.stdin is not None and root.stdout is not None
    grandchild = int(root.stdout.readline())
    assert stop_record(root.pid) is None
    assert taut.kill_process_tree(root.pid, sig=signal.SIGURG) is True
    assert stop_record(root.pid) == os.CLD_CONTINUED
    root.stdin.write(b"\n")
    root.stdin.flush()
    assert root.stdout.readline() == f"{os.CLD_CONTINUED}\n".encode()
    assert root.wait(timeout=10) == 0
    assert wait_gone([grandchild]) == []


def test_permission_error_when_no_member_may_be_signalled(
    spawned: list[subprocess.Popen[bytes]],
) -> None:
    # OS errors keep their errno across the bindings: a caller that may not
    # signal any member gets PermissionError, as from os.kill.
    if os.geteuid() != 0:
        pytest.skip("needs root to start a caller that may not signal our process")
    target = subprocess.Popen(["sleep", WORK], start_new_session=True)
    spawned.append(target)
    # The interpreter lives under /root: start as root, then become nobody.
    code = (
        "import os, taut\n"
        # taut.process loads on first use: load it while its files are readable
        "taut.kill_process_tree\n"
        "os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
        "try:\n"
        f"    taut.kill_process_tree({target.pid})\n"
        "except OSError as e:\n"
        "    print(type(e).__name__, e.errno, e.strerror)\n"
    )
    nobody = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert nobody.stdout.strip() == (
        f"PermissionError {errno.EPERM} Operation not permitted (signalling pid {target.pid})"
    ), nobody.stderr
    assert running(target.pid)
    assert stop_record(target.pid) is None


def test_start_time_identity_protects_against_pid_reuse(
    spawned: list[subprocess.Popen[bytes]],
) -> None:
    child = subprocess.Popen(["sleep", WORK], start_new_session=True)
    spawned.append(child)
    start = _core.process_start_time(child.pid)
    assert isinstance(start, int) and start > 0
    # The pid now names "another" process than the one recorded: never signalled.
    assert _core.signal_process_tree(child.pid, signal.SIGKILL, start + 1) is None
    assert _core.signal_process_trees([(child.pid, start + 1)], signal.SIGKILL) == ([], [])
    assert _core.running_processes([(child.pid, start + 1)]) == []
    assert running(child.pid)
    assert _core.running_processes([(child.pid, start)]) == [(child.pid, start)]
    assert _core.signal_process_tree(child.pid, signal.SIGKILL, start) == (
        [(child.pid, start)],
        [],
    )
    assert child.wait(timeout=10) == -signal.SIGKILL
    assert _core.process_start_time(child.pid) is None


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"pid": True}, TypeError, r"pid must be a positive int process id, got True \(bool\)"),
        ({"pid": "12"}, TypeError, r"got '12' \(str\)"),
        ({"pid": 12.0}, TypeError, r"got 12\.0 \(float\)"),
        ({"pid": np.float64(12)}, TypeError, r"pid must be a positive int.*\(float64\)"),
        ({"pid": np.True_}, TypeError, r"pid must be a positive int process id, got np\.True_"),
        ({"pid": np.int64(2**40)}, ValueError, r"up to 2147483647, got 1099511627776"),
        ({"pid": np.int64(-1)}, ValueError, r"got -1 \(int\)"),
        ({"pid": 0}, ValueError, r"got 0 \(int\)"),
        ({"pid": -1}, ValueError, r"got -1 \(int\)"),
        ({"pid": 1}, ValueError, "init"),
        (
            {"pid": 2**31},
            ValueError,
            r"pid must be a positive int process id up to 2147483647, got 2147483648 \(int\)",
        ),
        ({"pid": 2**63}, ValueError, r"got 9223372036854775808 \(int\)"),
        ({"pid": 10**400}, ValueError, r"got 1000000000000000000000000000000000000\.\.\. \(int\)"),
        ({"pid": -(2**63)}, ValueError, r"got -9223372036854775808 \(int\)"),
        ({"pid": 12345, "sig": 0}, ValueError, r"sig must be a valid signal number other than 0"),
        ({"pid": 12345, "sig": 999}, ValueError, r"got 999 \(int\)"),
        ({"pid": 12345, "sig": True}, TypeError, r"sig must be a signal number.*True \(bool\)"),
        ({"pid": 12345, "sig": "KILL"}, TypeError, r"'KILL' \(str\)"),
        (
            {"pid": 12345, "grace": -1},
            ValueError,
            r"grace must not be negative, got -1 \(int\)",
        ),
        ({"pid": 12345, "grace": float("nan")}, ValueError, r"nan \(float\)"),
        ({"pid": 12345, "grace": True}, TypeError, r"True \(bool\)"),
        ({"pid": 12345, "grace": "1"}, TypeError, r"'1' \(str\)"),
    ],
)
def test_argument_errors(kwargs: dict[str, object], error: type[Exception], match: str) -> None:
    pid = kwargs.pop("pid")
    with pytest.raises(error, match=match):
        taut.kill_process_tree(pid, **kwargs)  # type: ignore[arg-type]


class Index:
    """An int-like that is no int (as NumPy's integers are not)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


@pytest.mark.parametrize("as_pid", [np.int32, np.int64, np.uint32, Index])
def test_a_pid_and_sig_may_be_any_int_like(
    spawned: list[subprocess.Popen[bytes]], as_pid: Any
) -> None:
    # Before: "pid must be a positive int process id, got np.int64(...)".
    child = subprocess.Popen(["sleep", WORK], start_new_session=True)
    spawned.append(child)
    assert taut.kill_process_tree(as_pid(child.pid), sig=as_pid(int(signal.SIGTERM))) is True
    assert child.wait(timeout=10) == -signal.SIGTERM


def test_huge_grace_is_clamped(spawned: list[subprocess.Popen[bytes]]) -> None:
    child = subprocess.Popen(["sleep", WORK], start_new_session=True)
    spawned.append(child)
    assert taut.kill_process_tree(child.pid, grace=10**400) is True
    assert child.wait(timeout=10) == -signal.SIGTERM


# ---------------------------------------------------------------------------
# run_process


def test_run_process_completes_like_subprocess_run() -> None:
    result = taut.run_process(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"], 30
    )
    assert isinstance(result, subprocess.CompletedProcess)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"out\n", b"err\n")
    assert result.timed_out is False
    assert result.timeout_s == 30.0
    result.check_returncode()


def test_run_process_input_text_and_check() -> None:
    result = taut.run_process(["cat"], 30, input="a\r\nb", text=True)
    assert result.stdout == "a\nb"
    data = b"x" * 300_000  # more than a pipe buffer each way
    assert taut.run_process(["cat"], 30, input=data).stdout == data
    with pytest.raises(subprocess.CalledProcessError):
        taut.run_process(["sh", "-c", "exit 4"], 30, check=True)
    assert taut.run_process(["sh", "-c", "exit 4"], None).returncode == 4


def test_run_process_kills_the_tree_at_the_deadline(strays: list[int]) -> None:
    started = time.monotonic()
    result = taut.run_process(["sh", "-c", f"sleep {WORK} & echo $!; sleep {WORK}"], 0.2)
    elapsed = time.monotonic() - started
    assert result.timed_out is True
    assert elapsed < PROMPT_S
    assert result.returncode == -signal.SIGKILL
    grandchild = int(result.stdout)
    strays.append(grandchild)
    assert wait_gone([grandchild]) == []
    with pytest.raises(DeadlineExpired):
        result.check_returncode()


def test_run_process_returns_on_time_when_an_escaped_grandchild_holds_the_pipes(
    strays: list[int],
) -> None:
    # The grandchild starts its own session and its parent exits: no parent
    # link, group or session leads to it, and it keeps stdout open. The call
    # must still return promptly instead of waiting for EOF, and the daemon
    # dies too: holding the command's pipes, it is found through /proc.
    script = f"setsid sleep {WORK} & echo $!"
    started = time.monotonic()
    result = taut.run_process(["sh", "-c", script], 0.2)
    elapsed = time.monotonic() - started
    grandchild = int(result.stdout)
    strays.append(grandchild)
    assert result.timed_out is True
    assert elapsed < PROMPT_S
    assert wait_gone([grandchild]) == []


def test_run_process_kills_a_double_forked_daemon_holding_the_pipes(strays: list[int]) -> None:
    # The classic daemon: fork, setsid, fork again, the middle process exits
    # before the root does. Only the pipe it still holds links it to the command.
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        print(os.getpid(), flush=True)\n"
        f"        time.sleep({WORK})\n"
        "    os._exit(0)\n"
        "os.wait()\n"
    )
    # 3 s for a Python to start, fork twice and print: lopsided on a busy machine.
    result = taut.run_process([sys.executable, "-c", code], 3.0)
    daemon = int(result.stdout)
    strays.append(daemon)
    assert result.timed_out is True
    assert result.returncode == 0  # the command itself had finished
    assert wait_gone([daemon]) == []


def test_run_process_grandchild_holding_pipes_after_root_exit_is_killed(strays: list[int]) -> None:
    # The root exits at once, its background child keeps stdout open: a plain
    # subprocess.run(timeout=...) would wait for EOF; here the session finds it.
    started = time.monotonic()
    result = taut.run_process(["sh", "-c", f"sleep {WORK} & echo $!"], 0.2)
    assert time.monotonic() - started < PROMPT_S
    assert result.timed_out is True
    grandchild = int(result.stdout)
    strays.append(grandchild)
    assert wait_gone([grandchild]) == []


def _first_select_late(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """run_process's reading thread starts its first select ``seconds`` late,
    as when another thread holds the GIL."""
    import selectors

    from taut import process

    class LateSelector(selectors.DefaultSelector):
        first = True

        def select(self, timeout: float | None = None) -> Any:
            if LateSelector.first:
                LateSelector.first = False
                time.sleep(seconds)
            return super().select(timeout)

    monkeypatch.setattr(process.selectors, "DefaultSelector", LateSelector)


def test_run_process_times_out_when_the_kill_and_the_exit_are_seen_in_one_wake_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The reading thread does not run between the deadline and the end of the
    # tree (another thread holds the GIL): when it looks, the wake-up byte, the
    # pipes' EOF and the root's exit are all there at once. The deadline still
    # decided the outcome.
    _first_select_late(monkeypatch, 1.0)  # the 0.1 s deadline fires and kills meanwhile
    result = taut.run_process(["sh", "-c", f"sleep {WORK}"], 0.1)
    assert result.returncode == -signal.SIGKILL
    assert result.timed_out is True
    with pytest.raises(DeadlineExpired):
        result.check_returncode()


def test_run_process_that_finished_before_the_deadline_is_not_timed_out_when_seen_late(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The command's exit and its EOFs are all there in one wake-up before the
    # deadline, but the reading thread only gets on with them after it (a busy
    # GIL; here a selector that dawdles before returning what it found). The
    # command finished in time: that is not a timeout.
    import selectors

    from taut import process

    timeout, late = 3.0, 4.0

    class LateSelector(selectors.DefaultSelector):
        def select(self, timeout: float | None = None) -> Any:
            # Every descriptor but one is ready once the command has ended:
            # the one left is the deadline's wake-up pipe, silent until then.
            expected = len(self.get_map()) - 1
            while True:
                events = super().select(0.01)
                if len(events) >= expected:
                    break
            time.sleep(late)  # the deadline passes (and fires) meanwhile
            return events

    monkeypatch.setattr(process.selectors, "DefaultSelector", LateSelector)
    started = time.monotonic()
    result = taut.run_process(["sh", "-c", "true"], timeout)
    assert time.monotonic() - started >= late
    assert result.returncode == 0
    assert result.timed_out is False
    result.check_returncode()


def test_a_command_done_long_before_the_deadline_is_not_timed_out_when_first_seen_late(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The reading thread gets the GIL back only after the deadline (another
    # thread held it: a C extension, a long regex), before its first select.
    # `true` ended within milliseconds; its EOFs, its exit and the deadline's
    # wake-up byte are then all seen in one select. The deadline's kill found
    # the root a zombie and nothing of it holding the pipes: not a timeout.
    _first_select_late(monkeypatch, 3.0)  # starved: the 1 s deadline passes meanwhile
    result = taut.run_process(["true"], 1.0)
    assert result.returncode == 0  # it exited by itself, long before the deadline
    assert result.timed_out is False


def test_a_command_still_running_at_the_deadline_is_timed_out_also_when_seen_late(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Starved past the deadline, the reading thread finds the output, the EOF
    # and the exit together, as for a command that ended by itself; but the
    # kill found the root running, so this one is a timeout, its output kept.
    _first_select_late(monkeypatch, 2.0)  # the 0.3 s deadline fires meanwhile
    result = taut.run_process(["sh", "-c", f"echo started; exec sleep {WORK}"], 0.3)
    assert result.timed_out is True
    assert result.returncode == -signal.SIGKILL
    assert result.stdout == b"started\n"


def test_a_zombie_root_whose_grandchild_holds_the_pipes_is_timed_out_when_seen_late(
    monkeypatch: pytest.MonkeyPatch, strays: list[int]
) -> None:
    # The root exits at once (a zombie: nobody reaps it while this thread is
    # starved), its background child keeps stdout open: the call was still
    # waiting on that child at the deadline, so its kill is a timeout, even
    # though the root itself ended by itself (returncode 0, not -9).
    _first_select_late(monkeypatch, 4.0)  # the 2 s deadline fires meanwhile
    result = taut.run_process(["sh", "-c", f"sleep {WORK} & echo $!"], 2.0)
    grandchild = int(result.stdout)
    strays.append(grandchild)
    assert result.timed_out is True
    assert result.returncode == 0
    assert wait_gone([grandchild]) == []


def test_a_command_that_ended_before_the_deadline_keeps_its_returncode_when_seen_late(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _first_select_late(monkeypatch, 3.0)  # the 1 s deadline fires meanwhile
    result = taut.run_process(["sh", "-c", "echo out; echo err >&2; exit 3"], 1.0)
    assert result.timed_out is False
    assert (result.returncode, result.stdout, result.stderr) == (3, b"out\n", b"err\n")
    with pytest.raises(subprocess.CalledProcessError):  # not DeadlineExpired
        result.check_returncode()


def test_a_background_child_that_left_the_pipes_alone_is_not_waited_for_when_seen_late(
    monkeypatch: pytest.MonkeyPatch, strays: list[int]
) -> None:
    # The call never waits for a background child that holds none of the
    # pipes (it returns as soon as the root has exited and the pipes are at
    # EOF), so its being alive at the deadline is no timeout either. The
    # deadline's kill ends it, as it ends the whole tree.
    script = f"sleep {WORK} >/dev/null 2>&1 & echo $!"
    _first_select_late(monkeypatch, 3.0)  # the 1 s deadline fires meanwhile
    result = taut.run_process(["sh", "-c", script], 1.0)
    strays.append(int(result.stdout))
    assert result.timed_out is False
    assert result.returncode == 0


def _late_once_input_is_written(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """run_process's reading thread starts the first select after all input
    was written ``seconds`` late."""
    import selectors

    from taut import process

    class LateSelector(selectors.DefaultSelector):
        late = True

        def select(self, timeout: float | None = None) -> Any:
            writing = any(k.events & selectors.EVENT_WRITE for k in self.get_map().values())
            if LateSelector.late and not writing:
                LateSelector.late = False
                time.sleep(seconds)
            return super().select(timeout)

    monkeypatch.setattr(process.selectors, "DefaultSelector", LateSelector)


# The root passes its stdin on to a background child that neither reads it nor
# holds stdout/stderr, then exits (dash gives background jobs /dev/null as
# stdin unless redirected explicitly, hence fd 3).
_HOLDS_STDIN = f"exec 3<&0; sleep {WORK} <&3 >/dev/null 2>&1 3<&- & echo $!"


def test_a_child_holding_stdin_that_the_call_still_writes_to_is_a_timeout(
    strays: list[int],
) -> None:
    # More input than a pipe holds: the call is still writing when the
    # deadline comes, to a child that never reads.
    result = taut.run_process(["sh", "-c", _HOLDS_STDIN], 2.0, input=b"x" * 1_000_000)
    child = int(result.stdout)
    strays.append(child)
    assert result.timed_out is True
    assert result.returncode == 0
    assert wait_gone([child]) == []


def test_a_child_holding_stdin_after_all_input_was_written_is_not_waited_for(
    monkeypatch: pytest.MonkeyPatch, strays: list[int]
) -> None:
    # All input fits in the pipe: written at once, our end closed. The child
    # still holding the pipe keeps nothing waiting, seen late or not.
    _late_once_input_is_written(monkeypatch, 4.0)  # the 2 s deadline fires meanwhile
    result = taut.run_process(["sh", "-c", _HOLDS_STDIN], 2.0, input=b"x")
    strays.append(int(result.stdout))
    assert result.timed_out is False
    assert result.returncode == 0


def test_the_deadlines_kill_reports_what_it_found(spawned: list[subprocess.Popen[bytes]]) -> None:
    def kill_now(proc: subprocess.Popen[bytes], pipes: list[int]) -> _core.TreeKill:
        start = _core.process_start_time(proc.pid)
        kill = _core.signal_process_tree_at(
            _core.Deadline(0.0), proc.pid, signal.SIGKILL, start, pipes
        )
        assert kill.wait(30.0)
        return kill

    # Running, and holding the watched pipe.
    proc = sh(f"exec sleep {WORK}", stdout=subprocess.PIPE, start_new_session=True)
    spawned.append(proc)
    assert proc.stdout is not None
    start = _core.process_start_time(proc.pid)
    kill = kill_now(proc, [proc.stdout.fileno()])
    assert (kill.state, kill.found_running, kill.root_running) == ("ran", True, True)
    assert kill.pipe_holders == [(proc.pid, start)]
    assert kill.signalled == [(proc.pid, start)]
    assert kill.error is None
    assert proc.wait(timeout=10) == -signal.SIGKILL

    # Exited by itself and not reaped yet: a zombie is not running.
    proc = sh("exit 5", stdout=subprocess.PIPE, start_new_session=True)
    spawned.append(proc)
    assert proc.stdout is not None and proc.stdout.read() == b""
    until = time.monotonic() + 10
    while running(proc.pid):
        assert time.monotonic() < until, "never exited"
        time.sleep(0.001)
    kill = kill_now(proc, [proc.stdout.fileno()])
    assert (kill.state, kill.found_running, kill.root_running) == ("ran", False, False)
    assert kill.pipe_holders == []
    assert "found_running=False" in repr(kill)
    assert proc.wait(timeout=10) == 5

    # Cancelled before it fired: it never runs, and waiting for it ends at once.
    proc = sh(f"exec sleep {WORK}", start_new_session=True)
    spawned.append(proc)
    deadline = _core.Deadline(time.monotonic() + 3600)
    kill = _core.signal_process_tree_at(deadline, proc.pid, signal.SIGKILL)
    assert (kill.state, kill.found_running, kill.root_running) == ("pending", None, None)
    assert kill.wait(0.001) is False
    deadline.cancel()
    assert kill.wait(60.0) is True
    assert (kill.state, kill.found_running, kill.signalled) == ("not run", None, [])
    assert running(proc.pid)
    with pytest.raises(ValueError, match="NaN"):
        kill.wait(float("nan"))


# The main thread ends (pthread_exit) while another keeps the process going
# (ignoring SIGTERM): its /proc entry then shows a zombie ("Z"), yet the
# process runs on.
_LEADER_GONE_FIRST = (
    "import ctypes, signal, threading, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    f"threading.Thread(target=time.sleep, args=({WORK},)).start()\n"
    "ctypes.CDLL(None).pthread_exit(None)\n"
)


def _main_thread_ended_first(
    spawned: list[subprocess.Popen[bytes]], **kwargs: Any
) -> subprocess.Popen[bytes]:
    """A process whose main thread has ended while another runs on."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _LEADER_GONE_FIRST], start_new_session=True, **kwargs
    )
    spawned.append(proc)
    until = time.monotonic() + 30
    while True:
        with open(f"/proc/{proc.pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        if fields[0] == b"Z" and int(fields[17]) > 1:  # state, num_threads
            return proc
        assert proc.poll() is None and time.monotonic() < until, "the main thread never ended"
        time.sleep(0.001)


def test_a_root_whose_main_thread_ended_before_its_others_is_found_running(
    spawned: list[subprocess.Popen[bytes]],
) -> None:
    proc = _main_thread_ended_first(spawned, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    start = _core.process_start_time(proc.pid)
    kill = _core.signal_process_tree_at(
        _core.Deadline(0.0), proc.pid, signal.SIGKILL, start, [proc.stdout.fileno()]
    )
    assert kill.wait(30.0)
    assert (kill.state, kill.root_running, kill.found_running) == ("ran", True, True)
    assert proc.wait(timeout=10) == -signal.SIGKILL


def test_a_graceful_kill_escalates_for_a_process_whose_main_thread_ended_first(
    spawned: list[subprocess.Popen[bytes]],
) -> None:
    # It ignores SIGTERM: only the SIGKILL after the grace ends it. Taken for
    # exited, it was never sent one.
    proc = _main_thread_ended_first(spawned)
    assert taut.kill_process_tree(proc.pid, grace=0.2) is True
    assert proc.wait(timeout=30) == -signal.SIGKILL


def runs_on(pid: int) -> bool:
    """Has not exited: also a process whose main thread has ended while others
    run on, which psutil (and ``running``) take for a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except OSError:
        return False
    return fields[0] != b"Z" or int(fields[17]) > 1  # state, num_threads


# Forks a process whose main thread ends while another holds stdout (inherited)
# and, once the main thread is gone, prints the process's pid, then sleeps on.
# Its /proc/PID/fd is empty from then on: the pipe shows only in
# /proc/PID/task/TID/fd. With the same first line as the daemon below.
_HOLDER_WITHOUT_MAIN_THREAD = (
    "import ctypes, os, threading, time\n"
    "def hold():\n"
    "    while True:\n"
    "        with open(f'/proc/{os.getpid()}/stat', 'rb') as f:\n"
    "            if f.read().rpartition(b')')[2].split()[0] == b'Z':\n"
    "                break\n"
    "        time.sleep(0.001)\n"
    "    os.write(1, b'%d\\n' % os.getpid())\n"
    f"    time.sleep({WORK})\n"
    "def main_thread_ends_first():\n"
    "    threading.Thread(target=hold).start()\n"
    "    ctypes.CDLL(None).pthread_exit(None)\n"
)


def test_run_process_times_out_on_a_child_holding_the_pipes_after_its_main_thread_ended(
    strays: list[int],
) -> None:
    # The root exits at once; its child, in the tree, holds stdout with its
    # main thread gone. The call waits on it at the deadline: timed out, and
    # killed. Taken for a process without descriptors, it was killed as a
    # member of the tree, but the call, waiting on its pipe, was not timed out.
    code = _HOLDER_WITHOUT_MAIN_THREAD + (
        "if os.fork() == 0:\n"
        "    main_thread_ends_first()\n"
        "os._exit(0)\n"
    )
    # 3 s for a Python to start, fork and end its main thread: lopsided.
    result = taut.run_process([sys.executable, "-c", code], 3.0)
    assert result.stdout, "the main thread did not end before the deadline"
    holder = int(result.stdout)
    strays.append(holder)
    assert result.timed_out is True
    assert result.returncode == 0  # the root itself had finished
    until = time.monotonic() + 10
    while runs_on(holder):
        assert time.monotonic() < until, "the holder survived the deadline"
        time.sleep(0.01)


def test_run_process_kills_a_double_forked_daemon_whose_main_thread_ended(
    strays: list[int],
) -> None:
    # A daemon outside the tree (fork, setsid, fork, the middle gone) is found
    # only by the pipe it holds; here held by a thread other than its main
    # one, which has ended. Missed, it lives on after the call returns.
    code = _HOLDER_WITHOUT_MAIN_THREAD + (
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        main_thread_ends_first()\n"
        "    os._exit(0)\n"
        "os.wait()\n"
    )
    result = taut.run_process([sys.executable, "-c", code], 3.0)
    assert result.stdout, "the main thread did not end before the deadline"
    daemon = int(result.stdout)
    strays.append(daemon)
    assert result.timed_out is True
    assert result.returncode == 0
    until = time.monotonic() + 10
    while runs_on(daemon):
        assert time.monotonic() < until, "the daemon survived the deadline"
        time.sleep(0.01)


@pytest.fixture
def pipe_writer(
    spawned: list[subprocess.Popen[bytes]],
) -> tuple[subprocess.Popen[bytes], int]:
    """A process outside our tree writing to a pipe we read, and its start
    time."""
    proc = sh(f"exec sleep {WORK}", stdout=subprocess.PIPE, start_new_session=True)
    spawned.append(proc)
    assert proc.stdout is not None
    start = _core.process_start_time(proc.pid)
    assert start is not None
    return proc, start


def test_a_pipe_holder_is_named_by_the_start_time_read_before_its_descriptors(
    monkeypatch: pytest.MonkeyPatch, pipe_writer: tuple[subprocess.Popen[bytes], int]
) -> None:
    # The holder found through /proc is killed by (pid, start time). Should
    # its pid be reused while its descriptors are read, the start time read
    # after them would name the newcomer, which would be killed instead.
    from taut import process

    proc, start = pipe_writer
    assert proc.stdout is not None
    reused = False
    real_readlink = os.readlink

    def readlink(path: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal reused
        if str(path).startswith(f"/proc/{proc.pid}/fd/"):
            reused = True  # from now on the pid names another process
        return real_readlink(path, *args, **kwargs)

    def process_start_time(pid: int) -> int | None:
        return start + 1 if reused and pid == proc.pid else _core.process_start_time(pid)

    monkeypatch.setattr(process.os, "readlink", readlink)
    monkeypatch.setattr(
        process, "_core", type("Core", (), {"process_start_time": staticmethod(process_start_time)})
    )
    found = process._pipe_peers({proc.stdout.fileno(): os.O_RDONLY})
    assert reused
    assert found == [(proc.pid, start)]


def test_the_deadlines_kill_takes_only_pipes_to_watch(tmp_path: Any) -> None:
    proc = sh(f"exec sleep {WORK}", start_new_session=True)
    try:
        deadline = _core.Deadline(time.monotonic() + 3600)
        with open(tmp_path / "f", "wb") as f:
            with pytest.raises(ValueError, match=rf"got {f.fileno()} \(not a pipe\)"):
                _core.signal_process_tree_at(deadline, proc.pid, signal.SIGKILL, None, [f.fileno()])
        r, w = os.pipe()
        os.close(r)
        os.close(w)
        with pytest.raises(OSError) as caught:
            _core.signal_process_tree_at(deadline, proc.pid, signal.SIGKILL, None, [r])
        assert caught.value.errno == errno.EBADF
        with pytest.raises(TypeError, match=r"pipes must be a file descriptor.*True \(bool\)"):
            _core.signal_process_tree_at(deadline, proc.pid, signal.SIGKILL, None, [True])
        with pytest.raises(ValueError, match=r"pipes must be a file descriptor.*got -1"):
            _core.signal_process_tree_at(deadline, proc.pid, signal.SIGKILL, None, [-1])
        with pytest.raises(TypeError, match=r"pipes must be an iterable.*got 5 \(int\)"):
            _core.signal_process_tree_at(deadline, proc.pid, signal.SIGKILL, None, 5)
        assert not deadline.expired
        deadline.cancel()
    finally:
        proc.kill()
        proc.wait()


def test_run_process_zero_timeout_starts_nothing() -> None:
    result = taut.run_process(["sh", "-c", "exit 1"], 0)
    assert result.timed_out is True
    assert result.returncode is None


def test_run_process_argument_errors() -> None:
    with pytest.raises(TypeError, match=r"True \(bool\)"):
        taut.run_process(["true"], True)
    with pytest.raises(ValueError):
        taut.run_process(["true"], float("nan"))
    with pytest.raises(TypeError, match="capture_output"):
        taut.run_process(["true"], 1, capture_output=True)
    with pytest.raises(TypeError, match="input must be bytes"):
        taut.run_process(["cat"], 1, input="text")


@pytest.mark.parametrize("value", [5, True, 2**64, -1, [1, 2], object()])
def test_run_process_input_that_is_not_bytes_is_refused_naming_it(value: object) -> None:
    # bytes(5) is five NUL bytes, bytes(2**64) an OverflowError and bytes(10**12)
    # a terabyte: only bytes-like data (or text with text=True) is input.
    with pytest.raises(TypeError, match=r"input must be bytes.*\(" + type(value).__name__):
        taut.run_process(["cat"], 30, input=value)


@pytest.mark.parametrize("args", [[], (), ""])
def test_run_process_empty_command_is_refused_naming_it(args: Any) -> None:
    # subprocess.Popen([]) fails deep inside with IndexError: list index out of range.
    with pytest.raises(ValueError, match=r"args must name a command, got "):
        taut.run_process(args, 30)


def test_run_process_bytes_like_input_still_goes_through() -> None:
    for data in (bytearray(b"ab"), memoryview(b"ab")):
        assert taut.run_process(["cat"], 30, input=data).stdout == b"ab"


def test_run_process_kills_the_tree_when_the_caller_is_interrupted() -> None:
    script = (
        "import taut\n"
        "try:\n"
        f"    taut.run_process(['sh', '-c', 'sleep {WORK} & sleep {WORK}'], 60)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
    )
    caller = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        tree = wait_descendants(caller.pid, 3)  # sh and its two sleeps
        caller.send_signal(signal.SIGINT)
        assert caller.wait(timeout=20) == 0
        assert caller.stdout is not None and caller.stdout.read() == b"interrupted\n"
        assert wait_gone(tree) == []
    finally:
        if caller.poll() is None:
            caller.kill()
            caller.wait()


def test_a_pipe_holder_whose_table_fails_half_read_is_read_through_a_thread(
    monkeypatch: pytest.MonkeyPatch, pipe_writer: tuple[subprocess.Popen[bytes], int]
) -> None:
    # The main thread ends while its table is read: listed, its links then
    # fail (ENOENT). The table the other threads share still holds our pipe:
    # taken for read, it hid the holder (a daemon outside the tree lived on).
    from taut import process

    proc, start = pipe_writer
    assert proc.stdout is not None
    real_readlink = os.readlink
    failed = []

    def readlink(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path).startswith(f"/proc/{proc.pid}/fd/"):
            failed.append(path)
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        return real_readlink(path, *args, **kwargs)

    monkeypatch.setattr(process.os, "readlink", readlink)
    found = process._pipe_peers({proc.stdout.fileno(): os.O_RDONLY})
    assert failed
    assert found == [(proc.pid, start)]


def test_a_process_whose_table_we_may_not_read_is_not_read_thread_by_thread(
    monkeypatch: pytest.MonkeyPatch, pipe_writer: tuple[subprocess.Popen[bytes], int]
) -> None:
    # Another user's process (we are not root): its table refuses us
    # (EACCES), and so would each of its threads' tables, one open per
    # thread for nothing. Not ours to kill: skipped at once.
    from taut import process

    proc, _ = pipe_writer
    assert proc.stdout is not None
    real_listdir = os.listdir
    refused: list[str] = []

    def listdir(path: Any) -> Any:
        if str(path).startswith(f"/proc/{proc.pid}/") and str(path).endswith("/fd"):
            refused.append(str(path))
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_listdir(path)

    monkeypatch.setattr(process.os, "listdir", listdir)
    assert process._pipe_peers({proc.stdout.fileno(): os.O_RDONLY}) == []
    assert refused == [f"/proc/{proc.pid}/fd"]


@pytest.mark.parametrize("group", [-1, -5, 2**40])
def test_run_process_bad_process_group_is_refused_before_anything_starts(
    group: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Popen ignores a negative process_group: the command started in the
    # caller's group, and only then was the tree's kill refused, leaving it
    # running with no deadline. 2**40 failed inside Popen with OverflowError.
    started: list[object] = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a))
    with pytest.raises(ValueError, match=rf"process_group must be 0 .* got {group}"):
        taut.run_process(["sleep", "30"], 30, process_group=group)
    with pytest.raises(TypeError, match=r"process_group must be an int or None, got True \(bool"):
        taut.run_process(["sleep", "30"], 30, process_group=True)
    assert started == []


def test_run_process_takes_any_iterable_of_arguments_and_refuses_an_empty_one() -> None:
    # An empty generator reached Popen's IndexError: list index out of range.
    with pytest.raises(ValueError, match=r"args must name a command, got \[\]"):
        taut.run_process((word for word in ()), 30)
    with pytest.raises(TypeError, match=r"args must be a command string or a sequence"):
        taut.run_process(5, 30)
    result = taut.run_process((word for word in ("sh", "-c", "exit 3")), 30)
    assert result.returncode == 3
