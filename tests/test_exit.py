"""Interpreter exit with deadlines still pending in non-daemon threads."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


@pytest.mark.timeout(60)
def test_interrupt_scope_in_a_non_daemon_thread_still_fires_at_exit() -> None:
    # The main thread ends at once; the interpreter then joins the worker
    # thread, which only ends when its deadline interrupts it. The timer's
    # Python callback thread must still be serving at that point.
    script = textwrap.dedent(
        """
        import threading, time, taut
        def work():
            try:
                with taut.fail_after(0.2, interrupt=True):
                    while True:
                        pass
            except taut.DeadlineExpired:
                print("interrupted", flush=True)
        threading.Thread(target=work).start()
        time.sleep(0.05)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "interrupted"


@pytest.mark.timeout(60)
def test_bounded_wait_on_a_future_in_a_non_daemon_thread_returns_at_exit() -> None:
    # run_bounded_sync on a future that never completes is woken only by the
    # deadline's Python callback.
    script = textwrap.dedent(
        """
        import concurrent.futures, threading, time, taut
        def work():
            never = concurrent.futures.Future()
            print(taut.run_bounded_sync(never, 0.2).timed_out, flush=True)
        threading.Thread(target=work).start()
        time.sleep(0.05)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"
