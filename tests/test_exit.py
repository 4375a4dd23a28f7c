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


@pytest.mark.timeout(60)
def test_an_atexit_hook_that_runs_after_tauts_own_is_told_interrupts_have_stopped() -> None:
    # A hook registered before `import taut` runs after taut's exit hooks
    # stopped its callback thread. An interrupt=True scope on another thread
    # (delivered by that thread) used to be armed and never fire: the busy
    # loop below ran for good, and a hook that joined it hung the exit. A
    # deadline's Python callback was dropped unrun. Both now say so at once.
    script = textwrap.dedent(
        """
        import atexit, threading, time

        outcomes = []
        go = threading.Event()

        def busy():
            go.wait()
            try:
                with taut.fail_after(0.05, interrupt=True):
                    end = time.monotonic() + 5
                    while time.monotonic() < end:
                        pass
                    outcomes.append("ran 5 s, never interrupted")
            except taut.DeadlineExpired:
                outcomes.append("expired")
            except RuntimeError as exc:
                outcomes.append(f"refused: {exc}")

        def hook():
            go.set()
            worker.join()
            try:
                taut._core.Deadline(time.monotonic()).call_soon(lambda: None)
                outcomes.append("callback accepted")
            except RuntimeError:
                outcomes.append("callback refused")
            print(outcomes, flush=True)

        atexit.register(hook)
        import taut
        with taut.fail_after(5, interrupt=True):  # taut's callback thread runs
            pass
        # Started now, not in the hook: CPython 3.12.0-3.12.1 start no
        # thread in an atexit hook. A daemon, so exit does not join it first.
        worker = threading.Thread(target=busy, daemon=True)
        worker.start()
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        "[\"refused: taut's deadline callbacks and interrupts have stopped: the interpreter"
        " is exiting (taut's atexit hooks ran)\", 'callback refused']"
    ), proc.stdout
