"""A signal handler runs in the main thread between any two bytecodes, also
while that thread is inside a future's own bookkeeping: one that cancels
calls (a graceful shutdown on SIGTERM, say) must neither wait for itself
nor leave the interrupted waiter asleep."""

from __future__ import annotations

import subprocess
import sys

import pytest

# The handler is made to land exactly inside result()'s registration of its
# waiter (under the futures' state lock): a profile hook raises the signal at
# the `append` of the waiter's gate, which needs a waiter already there (a
# second thread). faulthandler ends a hang, with every thread's stack.
_PROBE = """
import faulthandler, signal, sys, threading, time
import concurrent.futures as cf
import taut
from taut import _future

faulthandler.dump_traceback_later(30, exit=True)
target = sys.argv[1]
ex = taut.ThreadPoolExecutor(1)
gate = threading.Event()
running = ex.submit(gate.wait, 120)
queued = ex.submit(abs, -1)
waited = queued if target == "waited" else running
outcome = {}


def on_signal(signum, frame):
    outcome["cancelled"] = queued.cancel()


signal.signal(signal.SIGUSR1, on_signal)


def wait_too():
    try:
        waited.exception(120)
    except cf.CancelledError:
        pass


first_waiter = threading.Thread(target=wait_too)
first_waiter.start()
while not waited._result_gates:
    time.sleep(0.001)
fired = []


def hook(frame, event, arg):
    if (
        event == "c_call"
        and not fired
        and frame.f_code is _future.Future._wait_until_done.__code__
        and getattr(arg, "__name__", "") == "append"
    ):
        fired.append(1)
        signal.raise_signal(signal.SIGUSR1)


sys.setprofile(hook)
try:
    waited.result(None if target == "waited" else 0.5)
except cf.CancelledError:
    outcome["result"] = "cancelled"
except cf.TimeoutError:
    outcome["result"] = "timeout"
finally:
    sys.setprofile(None)
gate.set()
ex.shutdown()
first_waiter.join(120)
print(bool(fired), outcome["cancelled"], outcome["result"])
"""


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        # Waiting on a running call, the handler cancels a queued one: with
        # a plain state lock it waited for the lock its own thread held.
        ("another", "True True timeout"),
        # The handler cancels the very call being waited on, before the
        # waiter's gate is in the list: the waiter must see it at once.
        ("waited", "True True cancelled"),
    ],
)
def test_a_signal_handler_cancelling_a_call_while_the_main_thread_waits(
    target: str, expected: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, target], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == expected.split(), (done.stdout, done.stderr)
