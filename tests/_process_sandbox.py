"""Roles for the hostile kill_process_tree scenarios of tests/test_process.py.

``python _process_sandbox.py ROLE ARGS...``. The test starts a scenario role as
the leader of a session of its own, so that a kill that goes wrong can only harm
the sandbox, never pytest; the scenario prints one JSON line with what it saw.

Evidence without timing: every process here blocks SIGUSR1, SIGTERM and SIGCONT.
A blocked signal stays pending, and the kernel records it in ``ShdPnd`` of
``/proc/PID/status`` at the moment it is sent, so "was never signalled" and "was
never stopped and continued" (the freeze always ends with SIGCONT for catchable
signals) are read at once after the call, with no waiting. A parent also asks
``waitid(WSTOPPED | WCONTINUED)`` whether a child was ever stopped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from typing import Any

import taut

WATCHED = {signal.SIGUSR1, signal.SIGTERM, signal.SIGCONT}
HERE = os.path.abspath(__file__)


def block() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)


def pending(pid: int) -> list[int]:
    """Process-directed signals pending for ``pid`` (those sent by kill/pidfd)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("ShdPnd:"):
                mask = int(line.split()[1], 16)
                return [s for s in range(1, 65) if mask >> (s - 1) & 1]
    raise AssertionError("no ShdPnd line")


def own_pending() -> list[int]:
    return sorted(int(s) for s in signal.sigpending())


def stop_record(child: int) -> int | None:
    """``CLD_STOPPED``/``CLD_CONTINUED`` if our child was ever stopped, else None."""
    info = os.waitid(os.P_PID, child, os.WSTOPPED | os.WCONTINUED | os.WNOHANG | os.WNOWAIT)
    return None if info is None else info.si_code


def start(role: str, *args: object, **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``role`` and wait for its first line ("ready" or a pid). Its stderr
    is not the scenario's: the test reads the scenario's to its end, and roles
    live on until the test kills the sandbox."""
    proc = subprocess.Popen(
        [sys.executable, HERE, role, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        **popen,
    )
    assert proc.stdout is not None
    proc.first_line = proc.stdout.readline().decode().strip()  # type: ignore[attr-defined]
    return proc


def attempt(name: str, target: int, **kwargs: Any) -> str:
    try:
        taut.kill_process_tree(target, **kwargs)
    except ValueError as e:
        return f"{name}: refused: {e}"
    return f"{name}: SIGNALLED"


def report(**facts: Any) -> None:
    print(json.dumps(facts), flush=True)


# -- roles ---------------------------------------------------------------------


def sleeper() -> None:
    block()
    print("ready", flush=True)
    time.sleep(120)


def joiner(group: str) -> None:
    """Joins the process group ``group`` (same session), starts a child in a
    group of its own, prints that child's pid."""
    block()
    os.setpgid(0, int(group))
    child = start("sleeper", preexec_fn=os.setpgrp)
    print(child.pid, flush=True)
    time.sleep(120)


def forker(group: str) -> None:
    """In a group of its own; its child joins ``group``; prints the pids."""
    block()
    child = start("joiner", group)
    print(child.pid, child.first_line, flush=True)  # type: ignore[attr-defined]
    time.sleep(120)


def caller_in_parent_group(sibling: str) -> None:
    """A child in its parent's group aims at its parent, its group leader (the
    parent too), its sibling and itself."""
    lines = [
        attempt("parent", os.getppid(), sig=signal.SIGUSR1),
        attempt("parent with grace", os.getppid(), grace=0.01),
        attempt("group leader", os.getpgrp(), sig=signal.SIGTERM),
        attempt("sibling", int(sibling), sig=signal.SIGUSR1),
        attempt("self", os.getpid(), sig=signal.SIGUSR1),
    ]
    print("\n".join(lines), flush=True)


def caller_in_leaders_group() -> None:
    """A process in a group whose leader is not its ancestor aims at the leader,
    directly and through a deadline."""
    from taut import _core

    lines = [attempt("group leader", os.getpgrp(), sig=signal.SIGTERM)]
    try:
        _core.signal_process_tree_at(_core.Deadline(0.0), os.getpgrp(), signal.SIGKILL)
        lines.append("deadline: ARMED")
    except ValueError as e:
        lines.append(f"deadline: refused: {e}")
    print("\n".join(lines), flush=True)


# -- scenarios (each the leader of a session of its own) ------------------------


def scenario_parent() -> None:
    block()
    sibling = start("sleeper")
    caller = subprocess.run(
        [sys.executable, HERE, "caller_in_parent_group", str(sibling.pid)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    report(
        caller=caller.stdout + caller.stderr,
        same_group=os.getpgid(sibling.pid) == os.getpgrp(),
        me=own_pending(),
        sibling=pending(sibling.pid),
        sibling_stopped=stop_record(sibling.pid),
    )


def scenario_leader() -> None:
    block()
    leader = start("sleeper", preexec_fn=os.setpgrp)
    caller = subprocess.run(
        [sys.executable, HERE, "caller_in_leaders_group"],
        preexec_fn=lambda: os.setpgid(0, leader.pid),
        capture_output=True,
        text=True,
        timeout=60,
    )
    report(
        caller=caller.stdout + caller.stderr,
        me=own_pending(),
        leader=pending(leader.pid),
        leader_stopped=stop_record(leader.pid),
    )


def scenario_links() -> None:
    """We kill a child (group of its own) whose child joined *our* group: that
    one is left alone, its own child (group of its own) is still killed."""
    block()
    x = start("forker", os.getpgrp(), preexec_fn=os.setpgrp)
    y, z = (int(p) for p in x.first_line.split())  # type: ignore[attr-defined]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = taut.kill_process_tree(x.pid, sig=signal.SIGUSR1)
    report(
        found=found,
        warnings=[str(w.message) for w in caught],
        y_in_our_group=os.getpgid(y) == os.getpgrp(),
        pids={"x": x.pid, "y": y, "z": z},
        x=pending(x.pid),
        x_stopped=stop_record(x.pid),
        y=pending(y),
        z=pending(z),
        me=own_pending(),
    )


if __name__ == "__main__":
    globals()[sys.argv[1]](*sys.argv[2:])
