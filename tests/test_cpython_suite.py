"""CPython's own tests (Debian's libpython3.11-testsuite) pass with taut
swapped in: the ThreadPoolExecutor tests with taut.ThreadPoolExecutor, and
the asyncio tests with taut.ThreadPoolExecutor as asyncio's default executor.
The runners live in tests/cpython_suite/; each runs in a subprocess of its
own because it swaps classes (for the asyncio suite, process-wide) and the
tests start and fork processes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

RUNNERS = Path(__file__).parent / "cpython_suite"
MISSING_EXIT = 3  # the runner's exit status when the Debian suite is absent
# The 3.11 module selects 64 tests; a broken import or selection must not
# pass with a handful.
MIN_TESTS = 60
# The asyncio package holds about 2,350 tests on 3.11.
MIN_ASYNCIO_TESTS = 2000


def _run(runner: str, timeout: float) -> str:
    """Run one runner; its whole output, once it passed."""
    proc = subprocess.run(
        [sys.executable, str(RUNNERS / runner)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = proc.stdout + proc.stderr
    if proc.returncode == MISSING_EXIT:
        pytest.fail(
            "CPython's test suite is missing: install Debian's libpython3.11-testsuite "
            "(apt-get install -y libpython3.11-testsuite)\n" + output,
            pytrace=False,
        )
    assert proc.returncode == 0, output
    assert re.search(r"^OK\b", proc.stderr, re.MULTILINE), output
    return output


def _tests_run(output: str) -> int:
    ran = re.search(r"^Ran (\d+) tests? in ", output, re.MULTILINE)
    assert ran is not None, output
    return int(ran.group(1))


@pytest.mark.timeout(900)
def test_cpython_threadpool_suite_passes_with_taut() -> None:
    output = _run("run_threadpool_suite.py", timeout=840)
    assert "against taut.ThreadPoolExecutor" in output, output
    assert _tests_run(output) >= MIN_TESTS, output


@pytest.mark.timeout(900)
def test_cpython_asyncio_suite_passes_with_taut_as_the_default_executor() -> None:
    # It found that a call raising concurrent.futures.CancelledError reached
    # its awaiting task unconverted (test_run_coroutine_threadsafe_task_cancelled).
    output = _run("run_asyncio_suite.py", timeout=840)
    assert "with taut.ThreadPoolExecutor as the default executor" in output, output
    assert _tests_run(output) >= MIN_ASYNCIO_TESTS, output
    made = re.search(r"^executors made from taut.ThreadPoolExecutor: (\d+)$", output, re.MULTILINE)
    assert made is not None and int(made.group(1)) > 0, output
