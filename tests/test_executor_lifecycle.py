"""taut.ThreadPoolExecutor's lifecycle at its edges: shutdown called from the
pool's own workers and callbacks, and what a program then does at exit.
Cases that could hang run in a fresh interpreter, bounded by a timeout."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from _waiting import LONG


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=LONG,
    )


def test_workers_that_all_shut_their_own_pool_down_do_not_wait_for_each_other() -> None:
    # Each worker waits in shutdown(wait=True) for the others to exit; two
    # waiting for each other waited for good, and so did the exit hook.
    result = run_python(
        """
        import concurrent.futures as cf, threading, taut
        ex = taut.ThreadPoolExecutor(3)
        both = threading.Barrier(3)
        def shut_down():
            both.wait()
            ex.shutdown(wait=True)
            return "returned"
        futures = [ex.submit(shut_down) for _ in range(3)]
        done, pending = cf.wait(futures, timeout=10)
        print(len(done), len(pending), sorted({f.result() for f in done}))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == "3 0 ['returned']"
