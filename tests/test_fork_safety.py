"""Fork safety of the executor's Rust worker loop.

A ``fork()`` can land while a worker thread is between releasing the GIL and
taking it back. Anything lazily initialised in that window (a ``PyOnceLock``,
an ``intern!`` string) is then locked for good in the child, and the child's
first worker to touch it hangs (holding ``taut._future._state_lock``, so
every caller of ``result()`` hangs with it). Only a process's first tasks
pass through such initialisations, so each attempt is a fresh interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

_FORK_DURING_FIRST_TASK = textwrap.dedent(
    """
    import os, signal, time, warnings
    warnings.simplefilter("ignore")  # 3.12+: fork of a multi-threaded process
    import taut
    ex = taut.ThreadPoolExecutor(1)
    def noop():
        pass
    ex.submit(noop)
    # Hold the GIL briefly: the worker's first task hands the GIL back and forth
    # with this thread, and the fork lands in the middle of it.
    end = time.perf_counter() + 0.001
    while time.perf_counter() < end:
        pass
    pid = os.fork()
    if pid == 0:
        signal.alarm(4)
        try:
            ok = ex.submit(lambda: 42).result(timeout=3) == 42
        except BaseException:
            os._exit(2)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status))
    """
)



def _assert_child_exited_cleanly(script: str, timeout: float, what: str = "child") -> None:
    """Run ``script`` in a fresh interpreter; it prints its forked child's
    exit status, which must be 0 (as must its own)."""
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0", f"{what}: child exit status {proc.stdout.strip()}"

@pytest.mark.timeout(180)
def test_child_forked_during_the_first_tasks_gets_results() -> None:
    # Without the fix roughly a third of the attempts hang in the child (exit
    # status -14: killed by its alarm, or 2: result() timed out). One at a
    # time: the window depends on two threads of one process trading the GIL.
    for attempt in range(16):
        _assert_child_exited_cleanly(_FORK_DURING_FIRST_TASK, 60, f"attempt {attempt}")


def test_no_lazy_once_cells_in_the_rust_bindings() -> None:
    # The same hazard in its general form: a PyOnceLock (also behind intern!
    # and GILOnceCell) is filled with the GIL released for a moment, so a
    # fork() from another thread can leave it locked in the child. Code that
    # runs on worker, timer or caller threads must not use them.
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rust")
    if not os.path.isdir(root):
        pytest.skip("Rust sources not present (installed from a wheel)")
    offenders = []
    for name in sorted(os.listdir(root)):
        if name.endswith(".rs"):
            with open(os.path.join(root, name), encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    code = line.split("//")[0]
                    if any(word in code for word in ("PyOnceLock", "intern!", "GILOnceCell")):
                        offenders.append(f"{name}:{number}: {line.strip()}")
    assert offenders == []


_FORK_DURING_A_LAZY_IMPORT = textwrap.dedent(
    """
    import importlib.abc, os, signal, sys, threading, time, warnings
    warnings.simplefilter("ignore")  # 3.12+: fork of a multi-threaded process
    import taut

    entered, release = threading.Event(), threading.Event()

    class Stall(importlib.abc.MetaPathFinder):
        # Holds the import of taut's deadline scopes mid-flight (its module
        # locks taken) until `release`, as a slow disk or a busy CPU would.
        def find_spec(self, name, path, target=None):
            if name == "taut.deadline._scope":
                entered.set()
                release.wait()
            return None

    sys.meta_path.insert(0, Stall())
    # Another thread uses taut's deadline scopes for the first time ...
    threading.Thread(target=lambda: taut.move_on_after, daemon=True).start()
    assert entered.wait(30)
    # ... and the import would finish 2 s from now, long after this fork.
    threading.Timer(2.0, release.set).start()
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)  # the child would otherwise hang for good
        with taut.move_on_after(5):
            pass
        os._exit(0)
    for _ in range(300):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            print(os.waitstatus_to_exitcode(status))
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        print("child hung")
    """
)


@pytest.mark.timeout(120)
def test_child_forked_while_another_thread_loads_taut_lazily_can_use_it() -> None:
    # `import taut` loads the deadline scopes, gathers, tool runner, ... on
    # first use. A fork (multiprocessing's default start method on Linux)
    # while another thread is in the middle of such a load used to leave the
    # modules' import locks held in the child by a thread it does not have:
    # the child's first `taut.move_on_after` then waited for ever.
    _assert_child_exited_cleanly(_FORK_DURING_A_LAZY_IMPORT, 90)


_FORK_INSIDE_A_CALL = textwrap.dedent(
    """
    import os, signal, time, warnings
    warnings.simplefilter("ignore")  # 3.12+: fork of a multi-threaded process
    import taut

    ex = taut.ThreadPoolExecutor(2)

    def forks():
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)  # the child would otherwise hang for good
            # The call returns in the child too, on its only thread.
            return "returned in the child"
        for _ in range(300):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return "child hung"

    print(ex.submit(forks).result(timeout=60))
    """
)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["returns", "raises"])
def test_child_forked_inside_a_call_ends_when_the_call_does(how: str) -> None:
    # A call that forks, where the child returns from (or raises out of) the
    # call: the child's only thread is the worker loop of the parent's pool.
    # It used to park there for good, waiting for work from a pool that no
    # longer exists; like a plain thread that forked, it now ends (and the
    # child with it, having no other thread) once the call does.
    script = _FORK_INSIDE_A_CALL
    if how == "raises":
        script = script.replace(
            'return "returned in the child"', 'raise ValueError("raised in the child")'
        )
    _assert_child_exited_cleanly(script, 90)
