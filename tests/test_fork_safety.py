"""Fork safety of the executor's Rust worker loop.

A ``fork()`` can land while a worker thread is between releasing the GIL and
taking it back. Anything lazily initialised in that window (a ``PyOnceLock``,
an ``intern!`` string) is then locked for good in the child, and the child's
first worker to touch it hangs (holding ``taut._future._state_lock``, so
every caller of ``result()`` hangs with it). Only a process's first tasks
pass through such initialisations, so each attempt is a fresh interpreter.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

# The end of a forking script, in the parent: print the child's exit status
# (or "child hung", having killed it after 15 s).
_WAIT_FOR_THE_CHILD = textwrap.dedent(
    """
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


_FORK_DURING_A_LAZY_IMPORT = (
    textwrap.dedent(
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
    """
    )
    + _WAIT_FOR_THE_CHILD
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


_FORK_DURING_A_THIRD_PARTY_IMPORT = (
    textwrap.dedent(
        """
    import importlib.abc, os, signal, sys, tempfile, threading, time, warnings
    warnings.simplefilter("ignore")  # 3.12+: fork of a multi-threaded process
    import taut

    STALLED = sys.argv[1]
    folder = tempfile.mkdtemp()
    files = {
        "yaml": ("c.yaml", "timeouts:\\n  tools:\\n    concurrent_batch: 30\\n"),
        "toml": ("c.toml", "[timeouts.tools]\\nconcurrent_batch = 30\\n"),
        "iso": ("c.json", '{"timeouts": {"tools": {"concurrent_batch": "PT30S"}}}'),
    }
    name, text = files[sys.argv[2]]
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(text)

    def use():
        # taut's own modules are loaded already (below): only the
        # third-party module this use needs is imported in the thread.
        seconds = taut.resolve_timeout("tools.concurrent_batch", default=1.0, config=path)
        assert seconds == 30.0, seconds

    taut.resolve_timeout  # taut.config itself, loaded here
    assert STALLED not in sys.modules, STALLED
    entered, release = threading.Event(), threading.Event()

    class Stall(importlib.abc.MetaPathFinder):
        # Holds the import mid-flight (its module lock taken) until
        # `release`, as a slow disk or a busy CPU would.
        def find_spec(self, name, path, target=None):
            if name == STALLED:
                entered.set()
                release.wait()
            return None

    sys.meta_path.insert(0, Stall())
    threading.Thread(target=use, daemon=True).start()
    assert entered.wait(30)
    # The import would finish 2 s from now, long after this fork.
    threading.Timer(2.0, release.set).start()
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)  # the child would otherwise hang for good
        use()
        os._exit(0)
    """
    )
    + _WAIT_FOR_THE_CHILD
)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("stalled", "config"),
    [
        pytest.param("yaml", "yaml", id="PyYAML"),
        pytest.param("pydantic.type_adapter", "iso", id="pydantic-TypeAdapter"),
        pytest.param(
            "tomllib",
            "toml",
            id="tomllib",
            marks=pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is 3.11+"),
        ),
    ],
)
def test_child_forked_while_another_thread_imports_a_dependency_for_taut(
    stalled: str, config: str
) -> None:
    # taut imports PyYAML, pydantic's parts and tomllib on first use, inside
    # functions. A fork while another thread is in the middle of such an
    # import left its module lock held in the child, by a thread the child
    # does not have: the child's first config read then waited for ever.
    proc = subprocess.run(
        [sys.executable, "-c", _FORK_DURING_A_THIRD_PARTY_IMPORT, stalled, config],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0", f"child exit status {proc.stdout.strip()}"


# Run only by `python -m taut ...` on the main thread, never in a library call.
_COMMAND_LINE_ONLY = ("_bench", "demo.py", "cli.py", "__main__.py")


def test_every_import_inside_a_function_goes_through_the_counted_lazy_load() -> None:
    # The hazard above, for any module: an `import` statement inside a
    # function runs on whatever thread first calls it, maybe while another
    # thread forks. taut._lazy_import.load() is counted, and a fork waits for it.
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
    if not os.path.isdir(root):
        pytest.skip("sources not present (installed from a wheel)")
    offenders = []
    for folder, _, names in os.walk(os.path.join(root, "taut")):
        for name in names:
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, os.path.join(root, "taut"))
            if not name.endswith(".py") or relative.startswith(_COMMAND_LINE_ONLY):
                continue
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
            for function in ast.walk(tree):
                if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(function):
                    if isinstance(node, ast.Import):
                        modules = [alias.name for alias in node.names]
                    elif isinstance(node, ast.ImportFrom) and node.level == 0:
                        modules = [node.module or ""]
                    else:
                        continue
                    # taut's own modules inside functions are loaded already
                    # by then (their package's lazy load is counted).
                    foreign = [m for m in modules if m.split(".")[0] != "taut"]
                    if foreign:
                        offenders.append(f"{relative}:{node.lineno}: import {', '.join(foreign)}")
    assert offenders == []


_FORK_WHILE_ANOTHER_THREAD_HOLDS_TAUTS_LOCKS = (
    textwrap.dedent(
        """
    import os, signal, threading, time, warnings
    warnings.simplefilter("ignore")  # 3.12+: fork of a multi-threaded process
    import taut, taut.config.files, taut.gather
    from taut import _fork_locks

    locks = list(_fork_locks._locks)
    assert len(locks) >= 5, locks
    held, release = threading.Event(), threading.Event()

    def hold():
        # As a thread reading a config file holds the files' lock meanwhile.
        for lock in locks:
            lock.acquire()
        held.set()
        release.wait()
        for lock in locks:
            lock.release()

    threading.Thread(target=hold, daemon=True).start()
    assert held.wait(30)
    threading.Timer(1.0, release.set).start()
    pid = os.fork()  # waits for the holder to let go
    if pid == 0:
        signal.alarm(20)  # the child would otherwise hang for good
        free = all(lock.acquire(timeout=5) for lock in locks)
        os._exit(0 if free else 3)
    """
    )
    + _WAIT_FOR_THE_CHILD
)


@pytest.mark.timeout(120)
def test_child_forked_while_another_thread_holds_tauts_module_locks_gets_them_free() -> None:
    # taut's module-level locks (the config files' cache, the loop wakers,
    # the gather's call states...) copied held into a child, by a thread the
    # child does not have: its first use of them waited for good.
    _assert_child_exited_cleanly(_FORK_WHILE_ANOTHER_THREAD_HOLDS_TAUTS_LOCKS, 90)


_FORK_WHILE_A_BOUNDED_RUN_IS_COUNTED = (
    textwrap.dedent(
        """
    import os, signal, threading, time, warnings
    warnings.simplefilter("ignore")  # 3.12+: fork of a multi-threaded process
    import taut
    from taut.stats import counters

    held, release = threading.Event(), threading.Event()

    def count():
        # As a thread finishing a bounded run holds the counters' lock.
        with counters.lock:
            held.set()
            release.wait()

    threading.Thread(target=count, daemon=True).start()
    assert held.wait(30)
    threading.Timer(1.0, release.set).start()
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)  # the child would otherwise hang for good
        taut.stats()
        taut.run_bounded_sync(int, 1.0)
        os._exit(0)
    """
    )
    + _WAIT_FOR_THE_CHILD
)


@pytest.mark.timeout(120)
def test_child_forked_while_a_bounded_run_is_counted_can_count_and_read_stats() -> None:
    # The process-wide counters of taut.stats() (run_bounded_sync counts
    # every run) had a plain lock: a child forked while another thread held
    # it hung for good in its first stats() or bounded run.
    _assert_child_exited_cleanly(_FORK_WHILE_A_BOUNDED_RUN_IS_COUNTED, 90)


# Module-level locks that their own module's after-fork hook makes anew.
_RENEWED_BY_THEIR_MODULE = {
    ("journal/lease.py", "_lock"),
    ("_lazy_import.py", "_loads"),
    ("executor.py", "_default_lock"),
    ("_future.py", "_state_lock"),
}


def test_every_module_level_lock_is_fork_safe() -> None:
    # The hazard above for any lock made at import: it must come from
    # fork_safe_lock() or be renewed by its module's own after-fork hook.
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
    if not os.path.isdir(root):
        pytest.skip("sources not present (installed from a wheel)")
    found = set()
    for folder, _, names in os.walk(os.path.join(root, "taut")):
        for name in names:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
            for node in tree.body:
                value = getattr(node, "value", None)
                if not isinstance(value, ast.Call):
                    continue
                made = ast.unparse(value.func)
                by_threading = made.startswith("threading.") and made[10:] in (
                    "Lock",
                    "RLock",
                    "Condition",
                )
                if by_threading or made == "FutureStateLock":
                    target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                    rel = os.path.relpath(path, os.path.join(root, "taut")).replace(os.sep, "/")
                    found.add((rel, ast.unparse(target)))
    assert found == _RENEWED_BY_THEIR_MODULE
