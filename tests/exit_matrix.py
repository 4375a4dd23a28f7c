"""The exit-safety matrix: programs that end while taut still has work in
flight, each run in a fresh interpreter, many times.

Every case is a small program that ends normally (exit code 0) right after
giving up on a call, queueing work, or leaving a callback running. Each run
must exit 0, print nothing on stderr, leave no core dump and end within two
seconds plus the program's own work. Before the worker loop became Python, a
call that taut abandoned aborted the process at exit (exit 134 or 139) when
it woke during interpreter finalization.

Runnable on its own with any interpreter that has taut installed (it needs
nothing but the standard library)::

    python tests/exit_matrix.py --runs 20

``tests/test_exit_safety.py`` runs it under pytest.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass

# How long a run may take beyond the program's own work and the time a
# program that only imports taut takes on this machine right now (measured
# in the same run: on a loaded machine starting Python alone can take 1 s).
EXIT_BUDGET = 2.0
# What the pytest run asserts instead: on a busy 2-core machine a clean exit
# can take longer than 2 s, while the failures this guards against are crashes
# and hangs (a hung exit never ends). The command line reports the 2 s figure.
HANG_BUDGET = 10.0

_POLL = """
def poll_forever():
    while True:
        time.sleep(0.05)
"""


@dataclass(frozen=True)
class Case:
    name: str
    script: str
    # Seconds of the program's own work (sleeps and deadlines it waits out).
    own_work: float


CASES = [
    Case(
        "abandoned call polling with time.sleep",
        _POLL
        + """
r = taut.run_bounded_sync(poll_forever, 0.2)
assert r.timed_out
""",
        0.2,
    ),
    Case(
        "abandoned call spinning in pure Python",
        """
def spin_forever():
    n = 0
    while True:
        n += 1
r = taut.run_bounded_sync(spin_forever, 0.2)
assert r.timed_out
""",
        0.2,
    ),
    Case(
        "abandoned call blocked in time.sleep(60)",
        """
r = taut.run_bounded_sync(lambda: time.sleep(60), 0.2)
assert r.timed_out
""",
        0.2,
    ),
    Case(
        "abandoned call blocked in select on a pipe",
        """
import select
rfd, wfd = os.pipe()
r = taut.run_bounded_sync(lambda: select.select([rfd], [], []), 0.2)
assert r.timed_out
""",
        0.2,
    ),
    Case(
        "interrupted call that catches the interrupt and keeps going",
        """
def stubborn():
    while True:
        try:
            while True:
                time.sleep(0.01)
        except BaseException:
            pass
r = taut.run_bounded_sync(stubborn, 0.2, interrupt=True)
assert r.timed_out
""",
        0.2,
    ),
    Case(
        "ToolRunner with a hanging read-only tool, default settings",
        _POLL
        + """
runner = taut.ToolRunner(tool_workers=2, concurrent_batch_timeout=0.3)
results = runner.run([
    taut.ToolCall("hang", lambda: poll_forever(), read_only=True),
    taut.ToolCall("quick", lambda: 42, read_only=True),
])
assert [r.status for r in results] == ["timeout", "ok"], results
""",
        0.3,
    ),
    Case(
        "executor.abandon() on a polling call",
        _POLL
        + """
ex = taut.ThreadPoolExecutor(2)
f = ex.submit(poll_forever)
while not f.running():
    time.sleep(0.001)
assert ex.abandon(f)
""",
        0.0,
    ),
    Case(
        "sys.exit() while calls are queued",
        """
ex = taut.ThreadPoolExecutor(1)
futures = [ex.submit(time.sleep, 0.01) for _ in range(10)]
sys.exit(0)
""",
        0.1,
    ),
    Case(
        "exit from a non-main thread that abandoned a call",
        _POLL
        + """
import threading
running = threading.Event()
def poll_and_say_so():
    running.set()
    poll_forever()
def last_words():
    r = taut.run_bounded_sync(poll_and_say_so, 0.2)
    assert r.timed_out
    sys.exit(0)  # ends this thread; the interpreter exits after it
threading.Thread(target=last_words).start()
# Submitted before the main thread ends: the exit hook (like the standard
# library's) refuses new calls once the interpreter is shutting down.
assert running.wait(5)
""",
        0.2,
    ),
    Case(
        "exit while a deadline's Python callback runs",
        """
started = __import__("threading").Event()
def slow_callback():
    started.set()
    time.sleep(5)
d = taut._core.Deadline(time.monotonic() + 0.05)
d.call_soon(slow_callback)
assert started.wait(5)
""",
        1.05,  # the exit hook waits up to 1 s for the callback thread
    ),
    Case(
        "a daemon thread waits on an abandoned call's result at exit",
        _POLL
        + """
import threading
ex = taut.ThreadPoolExecutor(1)
f = ex.submit(poll_forever)
while not f.running():
    time.sleep(0.001)
threading.Thread(target=f.result, daemon=True).start()
assert ex.abandon(f)
time.sleep(0.05)
""",
        0.05,
    ),
    Case(
        "forked child exits while its parent's pool is busy",
        _POLL
        + """
ex = taut.ThreadPoolExecutor(2)
busy = [ex.submit(poll_forever) for _ in range(2)]
queued = [ex.submit(abs, -1) for _ in range(5)]
import warnings
# CPython 3.12+ warns about fork() in a threaded process: the program's own
# choice here, not taut's output.
warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
pid = os.fork()
if pid == 0:
    # The child: fresh workers on demand, its own work, a normal exit.
    assert ex.submit(pow, 2, 5).result(timeout=10) == 32
    r = taut.run_bounded_sync(poll_forever, 0.1)
    assert r.timed_out
    sys.exit(0)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
for f in busy:
    ex.abandon(f)
""",
        0.1,
    ),
]

_PRELUDE = "import os, sys, time\nimport taut\n"


@dataclass
class Outcome:
    returncode: int
    stderr: str
    seconds: float

    def problem(self, case: Case, startup: float, allowed: float = EXIT_BUDGET) -> str | None:
        if self.returncode != 0:
            return f"exit code {self.returncode}"
        if self.stderr.strip():
            return f"stderr: {self.stderr.strip()[-500:]}"
        budget = startup + case.own_work + allowed
        if self.seconds > budget:
            return f"took {self.seconds:.2f} s (budget {budget:.2f} s)"
        return None


def run_once(case: Case, python: str = sys.executable) -> Outcome:
    script = _PRELUDE + textwrap.dedent(case.script)
    env = dict(os.environ)
    # Core dumps would litter the working directory; the exit code says it.
    start = time.perf_counter()
    proc = subprocess.run(
        [python, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        preexec_fn=_no_core_dumps if os.name == "posix" else None,
    )
    return Outcome(proc.returncode, proc.stderr, time.perf_counter() - start)


def _no_core_dumps() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


# `import taut` loads the agent layer on first use; the cases use it, so the
# baseline loads every public name too (its import time is not exit time).
_STARTUP = Case(
    "start, import taut and its whole API, end", "for _n in taut.__all__: getattr(taut, _n)", 0.0
)


def startup_seconds(python: str = sys.executable) -> float:
    """The slowest of three runs of a program that only imports taut."""
    return max(run_once(_STARTUP, python).seconds for _ in range(3))


def run_case(
    case: Case,
    runs: int,
    startup: float,
    python: str = sys.executable,
    allowed: float = EXIT_BUDGET,
) -> list[str]:
    """Run `case` `runs` times (two at a time); the problems seen."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(lambda _: run_once(case, python), range(runs)))
    return [p for p in (o.problem(case, startup, allowed) for o in outcomes) if p is not None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per case")
    parser.add_argument("--python", default=sys.executable, help="interpreter to test")
    args = parser.parse_args(argv)
    version = subprocess.run(
        [args.python, "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    startup = startup_seconds(args.python)
    print(f"CPython {version}: a run that only imports taut takes {startup:.2f} s", flush=True)
    failed = 0
    for case in CASES:
        problems = run_case(case, args.runs, startup, args.python)
        clean = args.runs - len(problems)
        failed += bool(problems)
        print(f"CPython {version}: {clean}/{args.runs} clean  {case.name}", flush=True)
        for problem in sorted(set(problems)):
            print(f"    {problems.count(problem)}x {problem}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
