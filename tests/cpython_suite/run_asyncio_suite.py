"""Run CPython's own asyncio tests with ``taut.ThreadPoolExecutor`` as
asyncio's default executor.

asyncio makes its default executor with ``concurrent.futures.ThreadPoolExecutor``
(looked up when first needed); this runner points that name at taut's class
for the whole process, so every ``run_in_executor(None, ...)``,
``asyncio.to_thread``, ``getaddrinfo``/``getnameinfo`` and
``shutdown_default_executor`` of the suite goes through taut. The reference
suite is ``test/test_asyncio`` as Debian ships it in ``libpython3.11-testsuite``
(see ``debian_suite.py``; nothing of it is copied here).

A test that hangs stops the run after ``HANG_S`` with every thread's
traceback (``faulthandler``), rather than holding up the caller for good.

Usage: ``python tests/cpython_suite/run_asyncio_suite.py [-v] [-k PATTERN] [--stdlib]``
(``--stdlib`` runs the same selection without the swap, as a baseline).
Exit status 0 when every selected test passed, 1 on failures, 3 when the
Debian test suite is not installed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import faulthandler
import sys
import unittest
from typing import Any

import debian_suite

HANG_S = 120.0

# Tests deliberately not run, each with the reason (test id suffix -> why).
_LOOP_NEVER_SEES_READERS = (
    "replaces the loop's selector or reader registration with a mock that never "
    "reports a descriptor ready; taut delivers finished calls through a descriptor "
    "the loop watches (one wake-up per batch instead of call_soon_threadsafe per "
    "call), so under this mock the getaddrinfo() call never reaches the loop"
)
EXCLUDED: dict[str, str] = {
    "BaseEventLoopWithSelectorTests.test_create_connection_ipv6_scope": _LOOP_NEVER_SEES_READERS,
    "BaseEventLoopWithSelectorTests.test_create_connection_no_inet_pton": (
        _LOOP_NEVER_SEES_READERS
    ),
    "BaseEventLoopWithSelectorTests.test_create_connection_service_name": (
        _LOOP_NEVER_SEES_READERS
    ),
    "BaseSelectorEventLoopTests.test_sock_connect_resolve_using_socket_params": (
        _LOOP_NEVER_SEES_READERS
    ),
    "SslProtoHandshakeTests.test_check_hostname_requires_server_hostname": (
        "tests a Debian security patch of the ssl protocol (no executor involved); "
        "it fails with the standard library's executor too on a CPython that lacks "
        "the patch (pyenv's 3.11.7)"
    ),
}
# Exclusions of tests that some Debian builds of the suite carry and others
# do not: 3.11.2-6+deb12u7 no longer has the ssl patch's test.
MAY_BE_ABSENT = {"SslProtoHandshakeTests.test_check_hostname_requires_server_hostname"}

# The suite is about 2,350 tests, some 50 of them skipped on Linux (Windows
# and proactor tests); a broken import or selection must not pass with few.
MIN_RUN = 2000
MAX_SKIPPED = 80


class _Counted:
    """How many executors asyncio made from the swapped-in class: proof
    that the suite ran its executor paths through taut."""

    made = 0


def _swap_in_taut() -> None:
    import taut

    original_init = taut.ThreadPoolExecutor.__init__

    def counting_init(self: Any, *args: Any, **kwargs: Any) -> None:
        _Counted.made += 1
        original_init(self, *args, **kwargs)

    taut.ThreadPoolExecutor.__init__ = counting_init  # type: ignore[method-assign]
    concurrent.futures.ThreadPoolExecutor = taut.ThreadPoolExecutor  # type: ignore[misc]

    async def default_executor_type() -> type:
        await asyncio.to_thread(abs, -1)
        return type(asyncio.get_running_loop()._default_executor)  # type: ignore[attr-defined]

    made = asyncio.run(default_executor_type())
    if made is not taut.ThreadPoolExecutor:
        raise RuntimeError(f"asyncio's default executor is {made!r}, not taut's")


def _select(module: Any, patterns: list[str] | None) -> unittest.TestSuite:
    loader = unittest.TestLoader()
    if patterns:
        loader.testNamePatterns = [p if "*" in p else f"*{p}*" for p in patterns]
    selected = unittest.TestSuite()
    excluded_seen: set[str] = set()

    def add(tests: unittest.TestSuite) -> None:
        for test in tests:
            if isinstance(test, unittest.TestSuite):
                add(test)
                continue
            key = f"{type(test).__name__}.{getattr(test, '_testMethodName', '')}"
            if key in EXCLUDED:
                excluded_seen.add(key)
                print(f"excluded: {key}: {EXCLUDED[key]}")
                continue
            selected.addTest(test)

    add(loader.loadTestsFromModule(module))
    # Another CPython's suite (TAUT_CPYTHON_TEST_DIR) may lack some of them.
    unseen = set(EXCLUDED) - excluded_seen - MAY_BE_ABSENT
    if not patterns and debian_suite.is_debians() and unseen:
        raise RuntimeError(f"exclusions name no test: {sorted(unseen)}")
    return selected


class _HangWatch(unittest.TextTestResult):
    """Re-arms the hang timer as each test starts."""

    def startTest(self, test: unittest.TestCase) -> None:
        faulthandler.dump_traceback_later(HANG_S, exit=True)
        super().startTest(test)


def main(argv: list[str] | None = None) -> int:
    args = debian_suite.parse_args(__doc__, argv)

    suite = debian_suite.suite_dir()
    debian_suite.require(suite, "test_asyncio")
    shim = debian_suite.make_shim(suite)
    if args.stdlib:
        print("baseline run: asyncio's default executor is the standard library's")
    else:
        _swap_in_taut()
        print(
            "running CPython's asyncio tests with taut.ThreadPoolExecutor "
            "as the default executor"
        )
    module = debian_suite.import_from_shim(shim, "test_asyncio")
    print(f"suite: {module.__file__}")

    from test import support

    support.verbose = 1 if args.verbose else 0
    selected = _select(module, args.patterns)
    runner = unittest.TextTestRunner(verbosity=2 if args.verbose else 1, resultclass=_HangWatch)
    result = runner.run(selected)
    faulthandler.cancel_dump_traceback_later()
    problems = []
    if not args.patterns and result.testsRun < MIN_RUN:
        problems.append(f"only {result.testsRun} tests ran (expected at least {MIN_RUN})")
    if len(result.skipped) > MAX_SKIPPED:
        problems.append(f"{len(result.skipped)} tests skipped (at most {MAX_SKIPPED} expected)")
    if not args.stdlib:
        print(f"executors made from taut.ThreadPoolExecutor: {_Counted.made}")
        if not args.patterns and _Counted.made < 50:
            problems.append(f"asyncio made only {_Counted.made} taut executors")
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    return 0 if result.wasSuccessful() and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
