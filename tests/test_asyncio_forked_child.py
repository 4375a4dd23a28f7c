"""The event loops of a child forked from inside a running event loop (as
``multiprocessing`` with the fork start method does when a process is
started from async code): the child cannot run the parent's loop (asyncio
refuses it there), it runs loops of its own, and taut's deadlines and
asyncio path must serve those."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

# Forks from inside a task of the parent's loop, after taut has used that
# loop (so it is the loop taut saw last); the child runs asyncio.run() of
# CHILD_MAIN, which must return within its alarm; the parent prints the
# child's exit status.
_FORK_FROM_A_RUNNING_LOOP = """
import asyncio, os, signal, time, warnings
warnings.simplefilter("ignore")  # 3.12+: fork of a multi-threaded process
import taut

{child_main}

async def parent():
    async with taut.fail_after(60):
        await taut.to_thread(abs, -1)
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)
        try:
            ok = asyncio.run(child_main())
        except BaseException:
            os._exit(2)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status))

asyncio.run(parent())
"""

_SCOPE_EXPIRES_ON_TIME = """
async def child_main():
    start = time.monotonic()
    try:
        async with taut.fail_after(0.05):
            await asyncio.sleep(10)
    except TimeoutError:
        return time.monotonic() - start < 5
    return False
"""

_SCOPE_AROUND_A_CALL_EXPIRES_ON_TIME = """
async def child_main():
    ex = taut.ThreadPoolExecutor(1)
    start = time.monotonic()
    try:
        async with taut.fail_after(0.05):
            await ex.run(time.sleep, 10)
    except TimeoutError:
        on_time = time.monotonic() - start < 5
    else:
        return False
    # The child's loop serves the asyncio path too.
    assert await taut.to_thread(abs, -3) == 3
    return on_time
"""


@pytest.mark.parametrize(
    "child_main",
    [_SCOPE_EXPIRES_ON_TIME, _SCOPE_AROUND_A_CALL_EXPIRES_ON_TIME],
    ids=["sleep", "executor call"],
)
def test_a_scope_in_a_loop_of_a_child_forked_from_a_running_loop_expires_on_time(
    child_main: str,
) -> None:
    # Before 3.12, a scope's fast entry takes the loop taut saw last for the
    # running one when that loop's _thread_id names this thread, without
    # asking asyncio (whose lookup makes a getpid() call). In the child the
    # parent's loop still carries the _thread_id of the thread that forked,
    # which is the child's only thread: a scope in a task of the child's own
    # loop was armed on the parent's loop, which never runs there, so its
    # task was not cancelled at the deadline (0.05 s) but ran on (10 s) and
    # the scope raised only at its exit (child exit status 1).
    script = _FORK_FROM_A_RUNNING_LOOP.format(child_main=textwrap.dedent(child_main))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0", f"child exit status {proc.stdout.strip()}: {proc.stderr}"
