"""CPython's own ThreadPoolExecutor tests (Debian's libpython3.11-testsuite)
pass with taut.ThreadPoolExecutor swapped in. The runner lives in
tests/cpython_suite/run_threadpool_suite.py; it runs in a subprocess of its
own because it swaps classes inside the imported test module and its tests
start and fork processes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

RUNNER = Path(__file__).parent / "cpython_suite" / "run_threadpool_suite.py"
MISSING_EXIT = 3  # the runner's exit status when the Debian suite is absent
# The 3.11 module selects 64 tests; a broken import or selection must not
# pass with a handful.
MIN_TESTS = 60


@pytest.mark.timeout(900)
def test_cpython_threadpool_suite_passes_with_taut():
    proc = subprocess.run(
        [sys.executable, str(RUNNER)],
        capture_output=True,
        text=True,
        timeout=840,
    )
    output = proc.stdout + proc.stderr
    if proc.returncode == MISSING_EXIT:
        pytest.fail(
            "CPython's test suite is missing: install Debian's libpython3.11-testsuite "
            "(apt-get install -y libpython3.11-testsuite)\n" + output,
            pytrace=False,
        )
    assert proc.returncode == 0, output
    assert "against taut.ThreadPoolExecutor" in proc.stdout, output
    ran = re.search(r"^Ran (\d+) tests? in ", proc.stderr, re.MULTILINE)
    assert ran is not None, output
    assert int(ran.group(1)) >= MIN_TESTS, output
    assert re.search(r"^OK$", proc.stderr, re.MULTILINE), output
