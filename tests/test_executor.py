"""taut.ThreadPoolExecutor: the pool's own features and the corners where
the standard library is wrong. Compatibility with the stdlib's behaviour is
covered by test_executor_compat.py and the CPython suite runner."""

from __future__ import annotations

import concurrent.futures as cf
import contextvars
import gc
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from typing import Callable

import pytest
from _waiting import LONG, wait_until

import taut
from taut.executor import QueueFull


def run_python(code: str, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


class Gate:
    """Calls that block until the test opens the gate, counting how many run at once."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.lock = threading.Lock()
        self.running = 0
        self.peak = 0
        self.started = 0

    def __call__(self, value=None):
        with self.lock:
            self.running += 1
            self.started += 1
            self.peak = max(self.peak, self.running)
        try:
            assert self.open.wait(LONG), "gate never opened"
            return value
        finally:
            with self.lock:
                self.running -= 1


def test_results_exceptions_and_order():
    with taut.ThreadPoolExecutor(3) as ex:
        futures = [ex.submit(pow, 2, i) for i in range(50)]
        assert [f.result() for f in futures] == [2**i for i in range(50)]
        failing = ex.submit(int, "x")
        with pytest.raises(ValueError, match="invalid literal"):
            failing.result()
        assert isinstance(failing.exception(), ValueError)
        assert ex.submit(lambda *a, **k: (a, k), 1, b=2).result() == ((1,), {"b": 2})


def test_futures_are_concurrent_futures():
    with taut.ThreadPoolExecutor(1) as ex:
        assert isinstance(ex, cf.ThreadPoolExecutor)
        f = ex.submit(lambda: 1)
        assert isinstance(f, cf.Future)
        done, _ = cf.wait([f], timeout=LONG)
        assert done == {f}


def test_ceiling_holds_and_waiting_work_runs_in_fifo_order():
    gate = Gate()
    order: list[int] = []
    with taut.ThreadPoolExecutor(2) as ex:
        blockers = [ex.submit(gate) for _ in range(2)]
        wait_until(lambda: gate.started == 2)
        queued = [ex.submit(order.append, i) for i in range(10)]
        assert ex.stats().queued == 10
        assert len(ex._threads) == 2
        gate.open.set()
        cf.wait(blockers + queued, timeout=LONG)
    assert gate.peak == 2
    # With two workers, two calls may overlap, but each started in order.
    assert sorted(order) == list(range(10))
    assert all(abs(order.index(i) - i) <= 1 for i in range(10))


def test_cancelling_a_queued_future_removes_it_and_wakes_waiters():
    gate = Gate()
    with taut.ThreadPoolExecutor(1) as ex:
        blocker = ex.submit(gate)
        wait_until(lambda: gate.started == 1)
        queued = ex.submit(lambda: "never")
        waited: list[object] = []
        waiter = threading.Thread(target=lambda: waited.append(cf.wait([queued], timeout=LONG)))
        waiter.start()
        assert queued.cancel()
        assert ex.stats().queued == 0
        waiter.join(LONG)
        # What wait() returned, not whether it ended: its own timeout ends it
        # anyway (test_executor_wakeups.py makes sure it was waiting first).
        assert waited == [({queued}, set())]
        assert queued.cancelled()
        gate.open.set()
        blocker.result(LONG)
    assert ex.stats().cancelled == 1


def test_shutdown_cancel_futures_wakes_wait_and_as_completed():
    """The stdlib leaves these waiters hanging (CPython gh-87893)."""
    gate = Gate()
    ex = taut.ThreadPoolExecutor(1)
    blocker = ex.submit(gate)
    wait_until(lambda: gate.started == 1)
    queued = [ex.submit(lambda: None) for _ in range(3)]
    results: dict[str, object] = {}

    def wait_all() -> None:
        results["wait"] = cf.wait(queued, timeout=LONG)

    def drain_as_completed() -> None:
        results["as_completed"] = list(cf.as_completed(queued, timeout=LONG))

    threads = [threading.Thread(target=wait_all), threading.Thread(target=drain_as_completed)]
    for t in threads:
        t.start()
    time.sleep(0.05)  # let both waiters register (not needed for correctness)
    ex.shutdown(wait=False, cancel_futures=True)
    for t in threads:
        t.join(LONG)
        assert not t.is_alive()
    done, not_done = results["wait"]  # type: ignore[misc]
    assert done == set(queued) and not not_done
    assert set(results["as_completed"]) == set(queued)  # type: ignore[arg-type]
    assert all(f.cancelled() for f in queued)
    gate.open.set()
    ex.shutdown(wait=True)
    assert blocker.result() is None


def test_bounded_queue_blocks_then_unblocks_and_try_submit_raises():
    gate = Gate()
    with taut.ThreadPoolExecutor(1, max_queue=2) as ex:
        ex.submit(gate)
        wait_until(lambda: gate.started == 1)
        ex.submit(gate)
        ex.submit(gate)
        with pytest.raises(QueueFull, match="max_queue=2"):
            ex.try_submit(gate)
        submitted = threading.Event()

        def blocked_submit() -> None:
            ex.submit(gate)
            submitted.set()

        t = threading.Thread(target=blocked_submit)
        t.start()
        assert not submitted.wait(0.1)  # still blocked: the queue is full
        gate.open.set()
        assert submitted.wait(LONG)
        t.join(LONG)


def test_shutdown_wakes_blocked_submitters_with_runtime_error():
    gate = Gate()
    ex = taut.ThreadPoolExecutor(1, max_queue=1)
    ex.submit(gate)
    wait_until(lambda: gate.started == 1)
    ex.submit(gate)
    errors: list[BaseException] = []

    def blocked_submit() -> None:
        try:
            ex.submit(gate)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=blocked_submit)
    t.start()
    time.sleep(0.05)
    ex.shutdown(wait=False)
    t.join(LONG)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    assert str(errors[0]) == "cannot schedule new futures after shutdown"
    gate.open.set()
    ex.shutdown(wait=True)


def test_idle_workers_retire_and_come_back_on_demand():
    with taut.ThreadPoolExecutor(3, idle_timeout=0.05) as ex:
        list(ex.map(time.sleep, [0.01] * 3))
        wait_until(lambda: ex.stats().workers == 0 and not ex._threads)
        assert ex.submit(lambda: 5).result(LONG) == 5
        wait_until(lambda: ex.stats().completed == 4)


def test_a_fresh_pool_spins_for_the_floor_window():
    # Workers spin for three measured wake-ups of a parked thread, 50-250 µs;
    # until one is measured, 50 µs: a pool that spins too little parks and so
    # learns its wake-ups, one that spun too much would never park to learn
    # it should not (rust/pool.rs tests the measuring and its bounds).
    with taut.ThreadPoolExecutor(2) as ex:
        assert ex._core.spin_window() == pytest.approx(50e-6)


def test_resize_grows_at_once_and_shrinks_after_running_work():
    gate = Gate()
    with taut.ThreadPoolExecutor(1) as ex:
        futures = [ex.submit(gate) for _ in range(4)]
        wait_until(lambda: gate.started == 1)
        ex.resize(3)
        wait_until(lambda: gate.started == 3)
        assert ex._max_workers == 3
        ex.resize(1)
        gate.open.set()
        cf.wait(futures, timeout=LONG)
        wait_until(lambda: ex.stats().workers == 1)
        assert gate.peak == 3
    with pytest.raises(ValueError, match="greater than 0"):
        taut.ThreadPoolExecutor(1).resize(0)


def test_queue_positions_are_exact_and_clear_on_start():
    gate = Gate()
    events: dict[int, list[object]] = {i: [] for i in range(4)}
    with taut.ThreadPoolExecutor(1) as ex:
        blocker = ex.submit(gate)
        wait_until(lambda: gate.started == 1)
        futures = [
            ex.submit_tracked(
                lambda: None,
                on_wait=events[i].append,
                on_start=lambda i=i: events[i].append("start"),
            )
            for i in range(4)
        ]
        assert [ex.position(f) for f in futures] == [1, 2, 3, 4]
        futures[1].cancel()
        assert [ex.position(f) for f in futures[2:]] == [2, 3]
        gate.open.set()
        cf.wait([blocker, *futures], timeout=LONG)
    assert events[0] == [1, "start"]
    assert events[1] == [2]  # cancelled: never started
    assert events[2] == [3, 2, 1, "start"]
    assert events[3] == [4, 3, 2, 1, "start"]


def test_queue_notices_for_n_waiting_calls_are_o_n_not_n_squared():
    # Every start used to report a new position to every waiting call:
    # N calls behind one worker got about N*N/2 notices (2 million for
    # N = 2000, and as many position computations under the pool's lock).
    # Now each call hears every position from 10 down, and above that only
    # round ones (20, 50, 100, 200, 500, ...): under 20 notices a call.
    n = 2000
    gate = Gate()
    events: dict[int, list[object]] = {i: [] for i in range(n)}
    with taut.ThreadPoolExecutor(1) as ex:
        blocker = ex.submit(gate)
        wait_until(lambda: gate.started == 1)
        futures = [
            ex.submit_tracked(
                lambda: None,
                on_wait=events[i].append,
                on_start=lambda i=i: events[i].append("start"),
            )
            for i in range(n)
        ]
        gate.open.set()
        _done, not_done = cf.wait([blocker, *futures], timeout=LONG)
    assert not not_done
    total = sum(len(e) for e in events.values())
    assert total < 30 * n, total
    for i, e in events.items():
        positions = e[:-1]
        assert e[0] == i + 1 and e[-1] == "start", (i, e)
        assert positions == sorted(positions, reverse=True), (i, e)  # type: ignore[type-var]
        # Every position from 10 down is heard (or from where it began).
        assert positions[-min(i + 1, 10) :] == list(range(min(i + 1, 10), 0, -1)), (i, e)
    assert events[1999][:-1] == [2000, 1000, 500, 200, 100, 50, 20, *range(10, 0, -1)]
    assert events[14][:-1] == [15, *range(10, 0, -1)]


def test_tracked_call_that_starts_at_once_gets_only_start():
    events: list[object] = []
    with taut.ThreadPoolExecutor(2) as ex:
        ex.submit_tracked(
            lambda: None, on_wait=events.append, on_start=lambda: events.append("s")
        ).result(LONG)
    assert events == ["s"]


@pytest.mark.parametrize("name", ["on_wait", "on_start"])
def test_tracked_call_refuses_a_callback_that_is_not_callable(name):
    # on_wait=5 was accepted; each notice then failed, logged, on some thread.
    ran = []
    with taut.ThreadPoolExecutor(1) as ex:
        with pytest.raises(TypeError, match=rf"{name} must be a callable or None, got 5 \(int\)"):
            ex.submit_tracked(ran.append, 1, **{name: 5})
    assert ran == []


def test_positions_under_concurrent_submission_are_a_permutation():
    gate = Gate()
    first_position: dict[int, int] = {}
    lock = threading.Lock()
    with taut.ThreadPoolExecutor(1) as ex:
        blocker = ex.submit(gate)
        wait_until(lambda: gate.started == 1)

        def submit_many(base: int) -> None:
            for i in range(base, base + 50):

                def on_wait(pos: int, i: int = i) -> None:
                    with lock:
                        first_position.setdefault(i, pos)

                ex.submit_tracked(lambda: None, on_wait=on_wait)

        threads = [threading.Thread(target=submit_many, args=(k * 50,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(first_position.values()) == list(range(1, 201))
        gate.open.set()
        blocker.result(LONG)


def test_in_worker_and_stats():
    with taut.ThreadPoolExecutor(2) as ex, taut.ThreadPoolExecutor(1) as other:
        assert not ex.in_worker()
        assert ex.submit(ex.in_worker).result(LONG)
        assert not other.submit(ex.in_worker).result(LONG)
        ex.submit(int, "x").exception(LONG)
        # Counters move just after the future completes: wait for them.
        wait_until(lambda: ex.stats().running == 0)
        stats = ex.stats()
        assert (stats.completed, stats.failed, stats.max_workers) == (1, 1, 2)


def test_propagate_context():
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("submitter")
    with taut.ThreadPoolExecutor(1, propagate_context=True) as ex:
        assert ex.submit(var.get).result(LONG) == "submitter"
    with taut.ThreadPoolExecutor(1) as ex:
        assert ex.submit(var.get).result(LONG) == "unset"


def test_abandon_replaces_the_worker_and_interrupt_raises_inside_the_call():
    release = threading.Event()

    def stuck() -> str:
        release.wait(LONG)
        return "late"

    def busy_python() -> None:
        while True:  # pure Python: an async exception lands here
            pass

    with taut.ThreadPoolExecutor(1) as ex:
        hung = ex.submit(stuck)
        wait_until(hung.running)
        assert ex.abandon(hung)
        assert ex.submit(lambda: "replacement ran").result(LONG) == "replacement ran"
        assert ex.stats().abandoned == 1
        release.set()
        assert hung.result(LONG) == "late"

        spinning = ex.submit(busy_python)
        wait_until(spinning.running)
        assert ex.interrupt(spinning, TimeoutError)
        assert isinstance(spinning.exception(LONG), TimeoutError)
        assert ex.submit(lambda: 1).result(LONG) == 1
        finished = ex.submit(lambda: None)
        finished.result(LONG)
        assert not ex.abandon(finished)
        assert not ex.interrupt(finished, TimeoutError)


def test_an_abandoned_call_leaves_running_and_is_counted_as_it_ends():
    # The accounting PoolStats documents: every call in exactly one of
    # queued, running, completed, failed, cancelled, except an abandoned
    # call while it still runs; it is counted as it ends, and abandoned
    # counts it throughout.
    release = threading.Event()
    ex = taut.ThreadPoolExecutor(1)
    try:
        assert ex.submit(abs, -1).result(LONG) == 1
        hung = ex.submit(release.wait, LONG)
        wait_until(hung.running)
        assert ex.abandon(hung)
        stats = ex.stats()
        assert (stats.running, stats.completed, stats.abandoned) == (0, 1, 1), stats
        release.set()
        assert hung.result(LONG) is True
        wait_until(lambda: ex.stats().completed == 2)
        stats = ex.stats()
        assert (stats.running, stats.queued, stats.failed, stats.abandoned) == (0, 0, 0, 1)
    finally:
        release.set()
        ex.shutdown()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="max_workers must be greater than 0"):
        taut.ThreadPoolExecutor(0)
    with pytest.raises(
        TypeError, match=r"max_workers must be an integer or None, got True \(bool\)"
    ):
        taut.ThreadPoolExecutor(True)
    with pytest.raises(ValueError, match=r"max_queue must be an integer >= 0.*got -1"):
        taut.ThreadPoolExecutor(1, max_queue=-1)
    with pytest.raises(ValueError, match=r"idle_timeout must not be NaN, got nan \(float\)"):
        taut.ThreadPoolExecutor(1, idle_timeout=float("nan"))
    with pytest.raises(ValueError, match=r"idle_timeout must be a positive number.*got 0 \(int\)"):
        taut.ThreadPoolExecutor(1, idle_timeout=0)
    with pytest.raises(TypeError, match="initializer must be a callable"):
        taut.ThreadPoolExecutor(1, initializer=5)  # type: ignore[arg-type]
    # "no" is truthy: it was taken as True.
    with pytest.raises(TypeError, match=r"propagate_context must be a bool, got 'no' \(str\)"):
        taut.ThreadPoolExecutor(1, propagate_context="no")  # type: ignore[arg-type]


@pytest.mark.parametrize("exc_type", [SystemExit, KeyboardInterrupt])
def test_a_done_callback_raising_a_base_exception_does_not_break_the_pool(exc_type, caplog):
    # Before: the worker loop died and the pool was broken for good: the call
    # queued behind, and every later one, failed with BrokenThreadPool (on
    # taut.default_executor() that is every bounded run and gather).
    gate = threading.Event()

    def callback(_):
        raise exc_type("from a done callback")

    with taut.ThreadPoolExecutor(1) as ex:
        first = ex.submit(gate.wait, LONG)
        first.add_done_callback(callback)  # not done yet: runs on the worker
        queued = ex.submit(abs, -2)
        gate.set()
        assert first.result(LONG) is True
        assert queued.result(LONG) == 2
        assert ex.submit(abs, -3).result(LONG) == 3
    assert "from a done callback" in caplog.text


def test_huge_timeouts_never_overflow():
    with taut.ThreadPoolExecutor(1) as ex:
        assert ex.submit(lambda: 3).result(timeout=10**400) == 3
        assert list(ex.map(abs, [-1], timeout=1e300)) == [1]


def test_dropped_executor_lets_its_workers_exit():
    ex = taut.ThreadPoolExecutor(2)
    ex.submit(lambda: None).result(LONG)
    threads = list(ex._threads)
    ref = weakref.ref(ex)
    del ex
    gc.collect()
    assert ref() is None
    for t in threads:
        t.join(LONG)
        assert not t.is_alive()


def test_stress_every_outcome_arrives_exactly_once():
    n = 1_000_000
    rng = random.Random(7)
    fail = [rng.random() < 0.1 for _ in range(n)]
    seen = bytearray(n)

    def task(i: int) -> int:
        if fail[i]:
            raise KeyError(i)
        return i

    def record(f: cf.Future[int]) -> None:
        exc = f.exception()
        i = exc.args[0] if exc is not None else f.result()
        seen[i] += 1

    with taut.ThreadPoolExecutor(4) as ex:
        for i in range(n):
            ex.submit(task, i).add_done_callback(record)
    assert seen.count(1) == n
    assert ex.stats().failed == sum(fail)
    assert ex.stats().completed == n - sum(fail)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_gets_fresh_workers():
    result = run_python(
        """
        import os, sys, taut
        ex = taut.ThreadPoolExecutor(2)
        assert ex.submit(lambda: 1).result() == 1
        pid = os.fork()
        if pid == 0:
            ok = ex.submit(lambda x: x * 2, 21).result(timeout=20) == 42
            ok = ok and sorted(ex.map(abs, [-1, -2])) == [1, 2]
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        print("parent", ex.submit(lambda: 7).result())
        """
    )
    assert result.returncode == 0, result.stderr
    assert "child 0" in result.stdout and "parent 7" in result.stdout


@pytest.mark.parametrize("blocked_in", ["result", "shutdown"])
def test_ctrl_c_lands_while_blocked(blocked_in):
    code = f"""
        import sys, threading, taut
        ex = taut.ThreadPoolExecutor(1)
        gate = threading.Event()
        f = ex.submit(gate.wait, 60)
        try:
            # Inside the try: however late the signal comes, it lands here.
            print("ready", flush=True)
            if {blocked_in!r} == "result":
                f.result()
            else:
                ex.shutdown(wait=True)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        gate.set()
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)  # let it block (if the signal came first it still lands)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=LONG)
    assert "interrupted" in out
    assert proc.returncode == 0


def test_interpreter_exit_runs_queued_work_and_never_hangs():
    result = run_python(
        """
        import time, taut
        ex = taut.ThreadPoolExecutor(1)
        never_shut = taut.ThreadPoolExecutor(2)
        never_shut.submit(lambda: None)
        ex.submit(time.sleep, 0.2)
        for i in range(3):
            ex.submit(print, "queued", i, flush=True)
        print("main done", flush=True)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["main done", "queued 0", "queued 1", "queued 2"]
    assert result.stderr == ""


def test_an_executor_made_during_interpreter_exit_refuses_work():
    # Its core was never shut down by the exit hook: submit must still see
    # that the interpreter exits, as the standard library's does.
    result = run_python(
        """
        import atexit, taut

        def late():
            ex = taut.ThreadPoolExecutor(1)
            try:
                ex.submit(print, "ran")
            except RuntimeError as exc:
                print("refused:", exc)

        atexit.register(late)
        taut.ThreadPoolExecutor(1).submit(int).result()
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "refused: cannot schedule new futures after interpreter shutdown\n"


def test_a_worker_that_cannot_start_leaves_the_call_unqueued(monkeypatch):
    ex = taut.ThreadPoolExecutor(1)

    def cannot_start() -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(ex, "_spawn", cannot_start)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        ex.submit(int)
    # The caller got the error: the call is taken back out of the queue
    # (left there, it would run anyway, and a retry would run it twice).
    assert ex.stats().queued == 0
    monkeypatch.undo()
    ex.shutdown(wait=False, cancel_futures=True)


class _ThreadStarts:
    """``threading.Thread.start`` patched to fail as it does when no thread
    can start ("can't start new thread") while ``failing`` is set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, failing: bool) -> None:
        self.failing = failing
        real_start = threading.Thread.start

        def start(thread: threading.Thread) -> None:
            if self.failing:
                raise RuntimeError("can't start new thread")
            real_start(thread)

        monkeypatch.setattr(threading.Thread, "start", start)


def test_a_failed_thread_start_refuses_the_call_and_gives_back_its_place(monkeypatch):
    """Regression: Thread.start failing in submit ("can't start new thread")
    left the refused call queued (it ran later: a retry ran it twice), the
    threads never made counted as workers for good, and every later submit
    tried to start one again, raising, though idle workers were there."""
    starts = _ThreadStarts(monkeypatch, failing=False)
    ex = taut.ThreadPoolExecutor(8)
    release = threading.Event()
    refused: list[int] = []
    ran: list[int] = []
    try:
        busy = [ex.submit(release.wait, LONG) for _ in range(2)]
        wait_until(lambda: ex.stats().running == 2)
        starts.failing = True
        for i in range(3):
            with pytest.raises(RuntimeError, match="can't start new thread"):
                ex.submit(refused.append, i)
            s = ex.stats()
            assert (s.workers, s.queued, s.cancelled) == (2, 0, 0), s
        assert len(ex._threads) == 2
        release.set()
        assert all(f.result(LONG) for f in busy)
        wait_until(lambda: ex.stats().idle == 2)
        # Still no thread can start, but two workers are idle: they take
        # the calls, and no submit asks for a thread.
        for i in range(3):
            assert ex.submit(ran.append, i).result(LONG) is None
        assert ran == [0, 1, 2]
        assert ex.stats().workers == len(ex._threads) == 2
        # Threads start again: submits needing more workers get them.
        starts.failing = False
        gate = threading.Event()
        futures = [ex.submit(gate.wait, LONG) for _ in range(4)]
        wait_until(lambda: ex.stats().running == 4)
        assert ex.stats().workers == len(ex._threads) == 4
        gate.set()
        assert all(f.result(LONG) for f in futures)
    finally:
        starts.failing = False
        release.set()
        ex.shutdown(wait=True)
    assert refused == [], "a refused call ran"
    assert ex.stats().workers == 0


def test_a_failed_thread_start_drops_every_start_still_owed(monkeypatch):
    """Regression: of several worker starts owed at once (here by a
    resize), the ones after a failed Thread.start stayed owed: counted as
    workers, and as on their way to the queued calls, and the next submit
    tried (and failed) to start them though the worker was idle."""
    starts = _ThreadStarts(monkeypatch, failing=False)
    ex = taut.ThreadPoolExecutor(1)
    release = threading.Event()
    ran: list[int] = []
    try:
        busy = ex.submit(release.wait, LONG)
        wait_until(lambda: ex.stats().running == 1)
        queued = [ex.submit(ran.append, i) for i in range(2)]  # accepted, waiting
        starts.failing = True
        with pytest.raises(RuntimeError, match="can't start new thread"):
            ex.resize(3)  # owes two starts for the two queued calls
        assert ex.stats().workers == len(ex._threads) == 1
        release.set()
        assert busy.result(LONG)
        for f in queued:  # the one worker takes them in turn
            assert f.result(LONG) is None
        wait_until(lambda: ex.stats().idle == 1)
        assert ex.submit(ran.append, 2).result(LONG) is None
        assert ran == [0, 1, 2]
        assert ex.stats().workers == len(ex._threads) == 1
    finally:
        starts.failing = False
        release.set()
        ex.shutdown(wait=True)


def test_task_raising_base_exception_keeps_the_worker():
    def raise_(exc: BaseException) -> None:
        raise exc

    with taut.ThreadPoolExecutor(1) as ex:
        for exc in (KeyboardInterrupt(), SystemExit(3), GeneratorExit()):
            f = ex.submit(raise_, exc)
            assert f.exception(LONG) is exc
        assert ex.submit(lambda: "alive").result(LONG) == "alive"
        assert len(ex._threads) == 1


def test_bursts_and_pauses_never_strand_a_call():
    """Regression: a worker counted as idle while spinning or about to park
    once left a stale 'notified' count behind, and a later call waited with
    every worker idle. Bursts of calls separated by pauses of every length
    walk workers through all their idle states."""
    rng = random.Random(11)
    stop = time.monotonic() + 4.0
    while time.monotonic() < stop:
        workers = rng.choice([1, 2, 3, 4, 8])
        idle_timeout = rng.choice([None, 0.001, 0.01])
        with taut.ThreadPoolExecutor(workers, idle_timeout=idle_timeout) as ex:
            for _ in range(rng.randint(1, 20)):
                calls = rng.choice([1, 1, 2, 3, 5, 50])
                futures = [ex.submit(time.sleep, rng.choice([0, 0, 0.0001])) for _ in range(calls)]
                _, not_done = cf.wait(futures, timeout=LONG)
                assert not not_done, f"stranded with every worker idle: {ex.stats()}"
                if rng.random() < 0.3:
                    time.sleep(rng.choice([0.00005, 0.0002, 0.002]))


def test_done_callbacks_registered_while_the_call_completes_always_run():
    """Regression: registering a callback (as asyncio.wrap_future does for
    every run_in_executor) raced with the worker's lock-free completion, and
    the callback, so the awaiting coroutine, was lost."""
    n = 200_000
    called = bytearray(n)
    all_called = threading.Event()
    remaining = [n]
    lock = threading.Lock()

    def record(i: int) -> Callable[[cf.Future[object]], None]:
        def callback(_: cf.Future[object]) -> None:
            called[i] += 1
            with lock:
                remaining[0] -= 1
                if remaining[0] == 0:
                    all_called.set()

        return callback

    # Switch threads as often as possible, so that a worker completes calls
    # in the middle of the registration code as often as possible.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with taut.ThreadPoolExecutor(2) as ex:
            for i in range(n):
                ex.submit(int).add_done_callback(record(i))
            assert all_called.wait(LONG), f"{remaining[0]} callbacks never ran"
    finally:
        sys.setswitchinterval(interval)
    assert called.count(1) == n


def test_run_in_executor_one_at_a_time_never_hangs():
    import asyncio

    async def main() -> int:
        loop = asyncio.get_running_loop()
        with taut.ThreadPoolExecutor(4) as ex:
            total = 0
            for i in range(20_000):
                total += await asyncio.wait_for(loop.run_in_executor(ex, abs, -i), LONG)
            return total

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        assert asyncio.run(main()) == sum(range(20_000))
    finally:
        sys.setswitchinterval(interval)


def test_an_orphaned_core_answers_without_touching_its_pool():
    """In a forked child the parent's pool lock may be frozen: futures left
    over from the parent must not block when cancelled or asked for their
    position."""
    from taut._core import PoolCore

    core = PoolCore(1)
    future = taut.Future()
    core.submit(future, int, ())
    seq = future._seq
    assert seq > 0 and core.position(seq) == 1
    core.orphan()
    assert core.remove(seq) is None
    assert core.position(seq) is None


def test_the_only_worker_submitting_into_its_full_queue_is_refused_not_stuck():
    # One worker, its queue full: waiting for room would wait for itself. A
    # watchdog shuts the pool down after LONG, so a submit that waits fails
    # this test (RuntimeError) instead of hanging it.
    gate = Gate()
    outcome: list[str] = []

    def submits_into_its_own_pool() -> None:
        gate()
        try:
            ex.submit(abs, -1)
            outcome.append("submitted")
        except QueueFull as exc:
            outcome.append(str(exc))
        except RuntimeError:
            outcome.append("waited until shutdown")

    ex = taut.ThreadPoolExecutor(1, max_queue=1)
    watchdog = threading.Timer(LONG, lambda: ex.shutdown(wait=False, cancel_futures=True))
    watchdog.start()
    try:
        first = ex.submit(submits_into_its_own_pool)
        wait_until(lambda: gate.started == 1)
        ex.submit(abs, -2)  # fills the queue
        gate.open.set()
        first.result(2 * LONG)
        assert len(outcome) == 1
        assert "max_queue=1" in outcome[0] and "run the call inline" in outcome[0]
        # Said as it is (before: "the other 0 worker(s) of this executor
        # already wait for room").
        assert "this is the executor's only worker" in outcome[0]
    finally:
        watchdog.cancel()
        ex.shutdown()


def test_workers_submitting_into_their_full_queue_wait_only_while_another_can_make_room():
    # Two workers, the queue full. The first to submit waits (the other can
    # still make room); the second would be the last, so it is refused, its
    # call returns, and its worker takes a queued call: the first one's
    # submit then finds room. Nothing waits for good.
    first_gate, second_gate = Gate(), Gate()
    outcomes: dict[str, str] = {}

    def submit_from_worker(name: str, gate: Gate) -> None:
        gate()
        try:
            ex.submit(abs, -1)
            outcomes[name] = "submitted"
        except QueueFull:
            outcomes[name] = "refused"

    ex = taut.ThreadPoolExecutor(2, max_queue=1)
    watchdog = threading.Timer(LONG, lambda: ex.shutdown(wait=False, cancel_futures=True))
    watchdog.start()
    try:
        first = ex.submit(submit_from_worker, "first", first_gate)
        second = ex.submit(submit_from_worker, "second", second_gate)
        wait_until(lambda: first_gate.started == 1 and second_gate.started == 1)
        ex.submit(abs, -2)  # fills the queue
        first_gate.open.set()
        wait_until(lambda: ex._workers_waiting_for_room == 1)
        second_gate.open.set()
        second.result(2 * LONG)
        first.result(2 * LONG)
        assert outcomes == {"first": "submitted", "second": "refused"}
        assert ex._workers_waiting_for_room == 0
    finally:
        watchdog.cancel()
        ex.shutdown()


def test_a_worker_waiting_for_room_is_refused_once_the_pool_shrinks_to_it():
    # Two workers, the queue full; one worker waits in submit() for room
    # (the other could still make it). Then resize(1): the other worker,
    # surplus now, retires after its call instead of taking the queued one,
    # so the waiting worker is the last one and nothing will make room. It
    # must be refused as the last worker is (QueueFull), not wait for good.
    # (Before: it waited for good, and the queued call never ran.)
    submitter_gate, other_gate = Gate(), Gate()
    outcome: list[str] = []

    def submits_into_its_own_pool() -> None:
        submitter_gate()
        try:
            ex.submit(abs, -1)
            outcome.append("submitted")
        except QueueFull:
            outcome.append("refused")
        except RuntimeError:
            outcome.append("waited until shutdown")

    ex = taut.ThreadPoolExecutor(2, max_queue=1)
    watchdog = threading.Timer(LONG, lambda: ex.shutdown(wait=False, cancel_futures=True))
    watchdog.start()
    try:
        submitter = ex.submit(submits_into_its_own_pool)
        ex.submit(other_gate)
        wait_until(lambda: submitter_gate.started == 1 and other_gate.started == 1)
        queued = ex.submit(abs, -2)  # fills the queue
        submitter_gate.open.set()
        wait_until(lambda: ex._workers_waiting_for_room == 1)
        ex.resize(1)
        other_gate.open.set()
        submitter.result(2 * LONG)
        assert outcome == ["refused"]
        assert queued.result(LONG) == 2
    finally:
        watchdog.cancel()
        ex.shutdown()


def test_resize_wakes_a_submitter_blocked_on_a_full_queue():
    gate = Gate()
    with taut.ThreadPoolExecutor(1, max_queue=1) as ex:
        ex.submit(gate)
        wait_until(lambda: gate.started == 1)
        ex.submit(gate)
        submitted = threading.Event()
        t = threading.Thread(target=lambda: (ex.submit(lambda: None), submitted.set()))
        t.start()
        assert not submitted.wait(0.1)
        ex.resize(3)  # the waiting call starts on a new worker: room for one more
        assert submitted.wait(LONG)
        gate.open.set()
        t.join(LONG)


def test_a_default_executor_shut_down_by_its_user_is_replaced_at_its_next_use() -> None:
    # `with taut.default_executor() as ex:` shuts the shared pool down on exit;
    # every later to_thread, bounded run and gather of the process then failed
    # with "cannot schedule new futures after shutdown".
    import asyncio

    with taut.default_executor() as shared:
        assert shared.submit(abs, -1).result(timeout=LONG) == 1
    replacement = taut.default_executor()
    assert replacement is not shared
    assert taut.default_executor() is replacement
    assert replacement.submit(abs, -2).result(timeout=LONG) == 2
    assert asyncio.run(taut.to_thread(abs, -3)) == 3
    assert taut.run_bounded_sync(lambda: 4, LONG).value == 4


@pytest.mark.parametrize("how", ["run", "to_thread", "run_in_executor"])
def test_a_failed_thread_start_on_the_asyncio_path_refuses_the_call(monkeypatch, how):
    """Regression: on the asyncio path (executor.run, to_thread,
    loop.run_in_executor) a failed worker start raised to the awaiting task
    but left its call queued: it ran later, for nobody."""
    import asyncio

    starts = _ThreadStarts(monkeypatch, failing=True)
    ex = taut.ThreadPoolExecutor(2)
    ran: list[int] = []

    async def call(value: int) -> None:
        loop = asyncio.get_running_loop()
        if how == "run":
            await ex.run(ran.append, value)
        elif how == "to_thread":
            loop.set_default_executor(ex)
            await taut.to_thread(ran.append, value)
        else:
            await loop.run_in_executor(ex, ran.append, value)

    async def refused_then_run() -> None:
        with pytest.raises(RuntimeError, match="can't start new thread"):
            await call(1)
        s = ex.stats()
        assert (s.workers, s.queued, s.cancelled) == (0, 0, 0), s
        starts.failing = False
        await call(2)

    try:
        # One loop: asyncio.run shuts its default executor (ex, for to_thread) down.
        asyncio.run(refused_then_run())
        assert ran == [2]
    finally:
        starts.failing = False
        ex.shutdown(wait=True)
    assert ran == [2]
