"""taut.ThreadPoolExecutor as a drop-in for concurrent.futures.ThreadPoolExecutor:
asyncio interop, mixed futures in wait()/as_completed(), the stdlib's errors and
messages, thread names, and regression tests for what CPython's own suite
(tests/cpython_suite/run_threadpool_suite.py) found."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import copy
import logging
import os
import re
import subprocess
import sys
import textwrap
import threading
import traceback
from concurrent.futures.thread import BrokenThreadPool
from unittest import mock

import pytest
from _waiting import LONG, wait_until

import taut

# Each compared probe runs against both classes in the same run.
_BOTH = [
    pytest.param(cf.ThreadPoolExecutor, id="stdlib"),
    pytest.param(taut.ThreadPoolExecutor, id="taut"),
]

# -- regressions found by CPython's test_concurrent_futures ------------------


def test_threads_set_held_by_caller_does_not_change_while_workers_exit():
    """CPython's test_shutdown_no_wait iterates `executor._threads` while the
    workers exit: the set must not change size under the caller."""
    ex = taut.ThreadPoolExecutor(3)
    gate = threading.Event()
    futures = [ex.submit(gate.wait, LONG) for _ in range(3)]
    threads = ex._threads
    before = set(threads)
    assert len(before) == 3
    gate.set()
    ex.shutdown(wait=True)
    for thread in threads:  # raised "Set changed size during iteration"
        thread.join(LONG)
    assert threads == before
    assert all(f.result() for f in futures)
    assert not ex._threads  # the executor's own view: no live workers


def test_one_call_at_a_time_reuses_one_worker():
    """CPython's test_idle_thread_reuse: a worker that finished is counted
    as idle before it lets go of the GIL, so the waiter's next submit reuses
    it instead of racing it and starting a second thread. The race was lost
    in about one fresh executor in seven; 50 of them make a miss certain."""
    for _ in range(50):
        ex = taut.ThreadPoolExecutor()
        try:
            for i in range(3):
                assert ex.submit(pow, i, 2).result(LONG) == i * i
            assert len(ex._threads) == 1
            assert ex.stats().workers == 1
        finally:
            ex.shutdown(wait=True)


def test_shutdown_cancel_futures_runs_calls_a_worker_was_started_for():
    """CPython's test_cancel_futures_wait_false: a call submitted to a pool
    with room starts a worker for it; `shutdown(cancel_futures=True)` right
    after must let it run (in the stdlib the fresh worker takes it first)
    and cancel only the calls that wait behind running ones."""
    for _ in range(50):
        ex = taut.ThreadPoolExecutor(1)
        first = ex.submit(pow, 2, 3)
        ex.shutdown(wait=True, cancel_futures=True)
        assert not first.cancelled()
        assert first.result(LONG) == 8

    ex = taut.ThreadPoolExecutor(1)
    gate = threading.Event()
    running = ex.submit(gate.wait, LONG)
    wait_until(lambda: running.running())
    waiting = [ex.submit(pow, 2, i) for i in range(3)]
    ex.shutdown(wait=False, cancel_futures=True)
    assert all(f.cancelled() for f in waiting)
    gate.set()
    ex.shutdown(wait=True)
    assert running.result(LONG) is True


def _run_forking_script(code: str) -> list[str]:
    """Run ``code`` (it forks) in a fresh interpreter; the words it printed.
    Python 3.12+ warns about any fork of a multi-threaded process; that
    warning is expected here, anything else on stderr is a failure."""
    result = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout.split()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_cancels_the_parents_queued_calls_quietly():
    """CPython's test_hang_global_shutdown_lock forks with a pool alive: the
    child's fork handler raised AttributeError (PoolCore.drain_after_fork
    was missing), so the queued futures it inherited were never cancelled."""
    code = """
        import os, threading, taut
        ex = taut.ThreadPoolExecutor(1)
        gate = threading.Event()
        running = ex.submit(gate.wait, 30)
        while not running.running():
            pass
        queued = ex.submit(pow, 2, 5)
        pid = os.fork()
        if pid == 0:
            ok = queued.cancelled() and ex.submit(pow, 3, 2).result(timeout=20) == 9
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        gate.set()
        print("child", os.waitstatus_to_exitcode(status), "parent", queued.result(30))
        """
    assert _run_forking_script(code) == ["child", "0", "parent", "32"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_fails_the_parents_running_calls_instead_of_hanging_on_them():
    # A child that waits on a call the parent's worker was running waited
    # for ever: no thread of the child would ever complete it.
    code = """
        import os, signal, threading, taut
        ex = taut.ThreadPoolExecutor(1)
        gate = threading.Event()
        running = ex.submit(gate.wait, 30)
        while not running.running():
            pass
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)  # the child would otherwise hang for good
            try:
                running.result()
                os._exit(3)
            except RuntimeError as exc:
                ok = "does not run in this child process" in str(exc)
            ok = ok and ex.submit(pow, 3, 2).result(timeout=20) == 9
            os._exit(0 if ok else 4)
        _, status = os.waitpid(pid, 0)
        gate.set()
        print("child", os.waitstatus_to_exitcode(status), "parent", running.result(30))
        """
    assert _run_forking_script(code) == ["child", "0", "parent", "True"]


# -- asyncio ------------------------------------------------------------------


def test_set_default_executor_run_in_executor_and_to_thread():
    ex = taut.ThreadPoolExecutor(2, thread_name_prefix="aio")

    async def main() -> tuple[str, bool, int]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ex)  # rejects anything but a ThreadPoolExecutor
        name = await loop.run_in_executor(None, lambda: threading.current_thread().name)
        in_worker = await asyncio.to_thread(ex.in_worker)
        explicit = await loop.run_in_executor(ex, pow, 2, 10)
        return name, in_worker, explicit

    name, in_worker, explicit = asyncio.run(main())
    assert re.fullmatch(r"aio_[01]", name)
    assert in_worker is True
    assert explicit == 1024
    # asyncio.run shut the default executor down (shutdown_default_executor).
    with pytest.raises(RuntimeError, match="cannot schedule new futures after shutdown"):
        ex.submit(pow, 2, 2)


def test_run_in_executor_propagates_exceptions():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        with taut.ThreadPoolExecutor(1) as ex:
            with pytest.raises(ZeroDivisionError):
                await loop.run_in_executor(ex, divmod, 1, 0)
            results = await asyncio.gather(
                *(loop.run_in_executor(ex, pow, i, 2) for i in range(20))
            )
            assert results == [i * i for i in range(20)]

    asyncio.run(main())


def test_wrap_future_result_exception_and_cancel_chaining():
    ex = taut.ThreadPoolExecutor(1)
    gate = threading.Event()
    blocker = ex.submit(gate.wait, LONG)
    queued = ex.submit(pow, 2, 10)

    async def main() -> None:
        wrapped = asyncio.wrap_future(queued)
        wrapped.cancel()
        with pytest.raises(asyncio.CancelledError):
            await wrapped
        # The cancel reaches the concurrent future through a loop callback:
        # let it run before opening the gate, or the worker may start the call.
        await asyncio.sleep(0)
        assert queued.cancelled()
        gate.set()
        assert await asyncio.wrap_future(blocker) is True
        assert await asyncio.wrap_future(ex.submit(pow, 3, 3)) == 27
        with pytest.raises(ZeroDivisionError):
            await asyncio.wrap_future(ex.submit(divmod, 1, 0))

    asyncio.run(main())
    # Cancelling the asyncio side cancelled the queued call and took it out.
    assert queued.cancelled()
    ex.shutdown(wait=True)
    assert ex.stats().queued == 0


# -- wait() and as_completed() with stdlib futures mixed in -------------------


def test_wait_and_as_completed_mix_taut_and_stdlib_futures():
    std = cf.ThreadPoolExecutor(2)
    ours = taut.ThreadPoolExecutor(2)
    std_gate, our_gate = threading.Event(), threading.Event()
    try:
        std_slow = std.submit(std_gate.wait, LONG)
        our_slow = ours.submit(our_gate.wait, LONG)
        our_fast = ours.submit(pow, 2, 3)
        done, pending = cf.wait([std_slow, our_slow, our_fast], LONG, cf.FIRST_COMPLETED)
        assert our_fast in done and {std_slow, our_slow} <= pending

        # The waiter is registered on taut's future before it completes.
        def open_when_waited() -> None:
            wait_until(lambda: bool(our_slow._waiters))
            our_gate.set()

        opener = threading.Thread(target=open_when_waited)
        opener.start()
        done, pending = cf.wait([std_slow, our_slow], LONG, cf.FIRST_COMPLETED)
        opener.join(LONG)
        assert done == {our_slow} and pending == {std_slow}

        our_fail = ours.submit(divmod, 1, 0)
        std_gate2 = threading.Event()
        std_slow2 = std.submit(std_gate2.wait, LONG)
        done, pending = cf.wait([std_slow, std_slow2, our_fail], LONG, cf.FIRST_EXCEPTION)
        assert our_fail in done and pending == {std_slow, std_slow2}

        std_fail = std.submit(divmod, 1, 0)
        our_slow2 = ours.submit(our_gate.wait, LONG)  # gate already open
        everything = [std_slow, std_slow2, our_slow, our_fast, our_fail, std_fail, our_slow2]
        std_gate.set()
        std_gate2.set()
        seen = list(cf.as_completed(everything, timeout=LONG))
        assert sorted(map(id, seen)) == sorted(map(id, everything))
        done, pending = cf.wait(everything, LONG, cf.ALL_COMPLETED)
        assert done == set(everything) and not pending
        assert isinstance(our_fail.exception(), ZeroDivisionError)
        assert isinstance(std_fail.exception(), ZeroDivisionError)
    finally:
        std_gate.set()
        our_gate.set()
        std.shutdown(wait=True)
        ours.shutdown(wait=True)


def test_shutdown_cancel_futures_wakes_blocked_wait_and_as_completed():
    """CPython gh-87893: the stdlib never notifies waiters of the futures
    that shutdown(cancel_futures=True) cancels, so these would block forever."""
    ex = taut.ThreadPoolExecutor(1)
    gate = threading.Event()
    running = ex.submit(gate.wait, LONG)
    wait_until(running.running)
    queued = [ex.submit(pow, 2, i) for i in range(4)]
    done_std = cf.Future()
    done_std.set_result("stdlib")
    outcomes: dict[str, object] = {}

    def all_completed() -> None:
        outcomes["wait"] = cf.wait([done_std, *queued])  # no timeout

    def first_completed_of_queued() -> None:
        outcomes["first"] = cf.wait(queued, return_when=cf.FIRST_COMPLETED)

    def each() -> None:
        outcomes["as_completed"] = list(cf.as_completed(queued))

    # Daemons: if the bug is back they block forever, and must not hold up exit.
    waiters = [
        threading.Thread(target=t, daemon=True)
        for t in (all_completed, first_completed_of_queued, each)
    ]
    for t in waiters:
        t.start()
    # Every waiter is blocked on the queued futures before shutdown.
    wait_until(lambda: all(len(f._waiters) == 3 for f in queued))
    ex.shutdown(wait=False, cancel_futures=True)
    for t in waiters:
        t.join(LONG)
        assert not t.is_alive(), "a waiter was never woken"
    assert outcomes["wait"] == ({done_std, *queued}, set())
    done, _ = outcomes["first"]  # type: ignore[misc]
    assert done and done <= set(queued)
    assert sorted(map(id, outcomes["as_completed"])) == sorted(map(id, queued))  # type: ignore[call-overload]
    assert all(f.cancelled() for f in queued)
    gate.set()
    ex.shutdown(wait=True)
    assert running.result() is True


# -- the stdlib's errors and messages -----------------------------------------


def _error_of(call) -> tuple[type[BaseException], str]:
    try:
        call()
    except BaseException as exc:
        return type(exc), str(exc)
    raise AssertionError(f"{call!r} raised nothing")


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda cls: cls(max_workers=0), id="max_workers=0"),
        pytest.param(lambda cls: cls(max_workers=-1), id="max_workers=-1"),
        pytest.param(lambda cls: cls(1, initializer=42), id="initializer-not-callable"),
        pytest.param(lambda cls: cls(1).submit(), id="submit-without-fn"),
    ],
)
def test_constructor_and_submit_errors_equal_the_stdlib(make):
    ours = _error_of(lambda: make(taut.ThreadPoolExecutor))
    theirs = _error_of(lambda: make(cf.ThreadPoolExecutor))
    assert ours == theirs


def test_submit_after_shutdown_equals_the_stdlib():
    def submit_after_shutdown(cls):
        ex = cls(1)
        ex.submit(pow, 2, 2).result(LONG)
        ex.shutdown()
        return _error_of(lambda: ex.submit(pow, 2, 2))

    ours = submit_after_shutdown(taut.ThreadPoolExecutor)
    assert ours == submit_after_shutdown(cf.ThreadPoolExecutor)
    assert ours == (RuntimeError, "cannot schedule new futures after shutdown")


def test_failing_initializer_breaks_the_pool_like_the_stdlib(caplog):
    def failing_init() -> None:
        raise ValueError("initializer failed on purpose")

    def scenario(cls):
        caplog.clear()
        ex = cls(2, initializer=failing_init)
        try:
            first = ex.submit(pow, 2, 2)
            error = first.exception(LONG)
            wait_until(lambda: ex._broken)
            later = _error_of(lambda: ex.submit(pow, 2, 2))
        finally:
            ex.shutdown(wait=True)
        logged = [
            (r.name, r.levelname, r.getMessage(), r.exc_info[0] if r.exc_info else None)
            for r in caplog.records
        ]
        return type(error), str(error), later, sorted(set(logged))

    with caplog.at_level(logging.CRITICAL, logger="concurrent.futures"):
        ours = scenario(taut.ThreadPoolExecutor)
        theirs = scenario(cf.ThreadPoolExecutor)
    assert ours == theirs
    assert ours[0] is BrokenThreadPool
    assert ours[1] == "A thread initializer failed, the thread pool is not usable anymore"
    assert ours[2] == (BrokenThreadPool, ours[1])
    assert ours[3] == [("concurrent.futures", "CRITICAL", "Exception in initializer:", ValueError)]


# -- thread names and workers that survive any exception ----------------------


def _names_of_workers(ex, count: int) -> set[str]:
    # Each call waits for all the others to run: so they run on `count`
    # different threads (one worker cannot take two, as it could once a
    # plain gate opened before every call had started).
    together = threading.Barrier(count)
    futures = [
        ex.submit(lambda: (together.wait(LONG), threading.current_thread().name)[1])
        for _ in range(count)
    ]
    return {f.result(LONG) for f in futures}


def test_thread_names_follow_the_stdlib_pattern():
    with taut.ThreadPoolExecutor(3, thread_name_prefix="SpecialPool") as ex:
        assert _names_of_workers(ex, 3) == {"SpecialPool_0", "SpecialPool_1", "SpecialPool_2"}
        assert {t.name for t in ex._threads} == {"SpecialPool_0", "SpecialPool_1", "SpecialPool_2"}
    ids = []
    for _ in range(2):
        with taut.ThreadPoolExecutor(2) as ex:
            names = _names_of_workers(ex, 2)
            matches = [re.fullmatch(r"ThreadPoolExecutor-(\d+)_([01])", n) for n in names]
            assert all(matches), names
            assert {m.group(2) for m in matches} == {"0", "1"}  # type: ignore[union-attr]
            ids.append({m.group(1) for m in matches})  # type: ignore[union-attr]
    assert len(ids[0]) == len(ids[1]) == 1 and ids[0] != ids[1]
    # As in the stdlib, an empty prefix means the default one.
    with taut.ThreadPoolExecutor(1, thread_name_prefix="") as ex:
        (name,) = _names_of_workers(ex, 1)
        assert re.fullmatch(r"ThreadPoolExecutor-\d+_0", name)


def test_default_thread_names_never_repeat_a_stdlib_pools():
    # One numbering for both kinds of pool: a taut pool and a stdlib pool
    # made in turn never both call their threads "ThreadPoolExecutor-N_0"
    # (two counters, each from 0, did).
    prefixes = []
    for _ in range(3):
        for cls in (cf.ThreadPoolExecutor, taut.ThreadPoolExecutor):
            with cls(1) as ex:
                prefixes.append(ex._thread_name_prefix)
    numbers = [int(re.fullmatch(r"ThreadPoolExecutor-(\d+)", p).group(1)) for p in prefixes]  # type: ignore[union-attr]
    # Made one after the other, in one thread: the next number each time.
    assert numbers == list(range(numbers[0], numbers[0] + 6)), prefixes


class _PrefixFailingOnce:
    """A thread name prefix whose str() fails the first ``failures`` times:
    anything that stops a worker thread from being made."""

    def __init__(self, failures: int = 1) -> None:
        self.failures = failures

    def __str__(self) -> str:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("no thread this time")
        return "Prefix"


@pytest.mark.parametrize("cls", _BOTH)
def test_a_worker_that_could_not_start_leaves_its_call_queued_for_the_next(cls):
    ex = cls(1, thread_name_prefix=_PrefixFailingOnce())
    try:
        with pytest.raises(RuntimeError, match="no thread this time"):
            ex.submit(pow, 2, 2)  # queued, but no worker for it
        # The next submit starts a worker, which runs both.
        assert ex.submit(pow, 3, 2).result(LONG) == 9
        assert {t.name for t in ex._threads} == {"Prefix_0"}
    finally:
        ex.shutdown(wait=True)


def test_workers_that_could_not_start_give_back_every_place():
    # resize() starts several workers at once: when the first cannot be
    # made, its place is given back, and so are the others' (they would
    # most likely fail alike, and owed they would count as workers, and as
    # on their way to the queued calls): the next caller asks for them again.
    ex = taut.ThreadPoolExecutor(1, thread_name_prefix=_PrefixFailingOnce(0))
    gate = threading.Event()
    try:
        futures = [ex.submit(gate.wait, LONG) for _ in range(4)]
        ex._thread_name_prefix = _PrefixFailingOnce(1)  # type: ignore[assignment]
        with pytest.raises(RuntimeError, match="no thread this time"):
            ex.resize(4)
        assert (ex.stats().workers, len(ex._threads)) == (1, 1)
        ex.resize(3)  # asks for two starts again, and makes them
        wait_until(lambda: ex.stats().running == 3)
        assert ex.stats().workers == len(ex._threads) == 3
        gate.set()
        assert all(f.result(LONG) for f in futures)
    finally:
        gate.set()
        ex.shutdown(wait=True)


class _Custom(BaseException):
    pass


def _raise(exc: BaseException) -> None:
    raise exc


def test_any_base_exception_in_a_call_leaves_the_worker_alive():
    with taut.ThreadPoolExecutor(1) as ex:
        ident = ex.submit(threading.get_ident).result(LONG)
        (worker,) = ex._threads
        for exc in (KeyboardInterrupt(), SystemExit(2), GeneratorExit(), _Custom()):
            f = ex.submit(_raise, exc)
            assert f.exception(LONG) is exc
            with pytest.raises(type(exc)):
                f.result()
            assert ex.submit(threading.get_ident).result(LONG) == ident
        assert worker.is_alive() and ex._threads == {worker}
        assert ex.stats().failed == 4


# -- map: through a subclass's submit, buffersize (3.14's) ---------------------

_STDLIB_HAS_BUFFERSIZE = sys.version_info >= (3, 14)


@pytest.mark.parametrize("base", _BOTH)
def test_map_goes_through_a_subclass_submit(base):
    # Libraries override submit (to wrap every call: context, tracing,
    # metrics) and expect map to use it, as the stdlib's map does.
    class Counting(base):  # type: ignore[misc, valid-type]
        submitted = 0

        def submit(self, fn, /, *args, **kwargs):
            type(self).submitted += 1
            return super().submit(fn, *args, **kwargs)

    with Counting(2) as ex:
        assert list(ex.map(abs, [1, -2, 3])) == [1, 2, 3]
    assert Counting.submitted == 3


@pytest.mark.parametrize("cls", _BOTH)
def test_map_goes_through_a_submit_patched_onto_the_instance(cls):
    # What tests do: mock.patch.object(executor, "submit", wraps=executor.submit).
    with cls(2) as ex:
        with mock.patch.object(ex, "submit", wraps=ex.submit) as submit:
            assert list(ex.map(abs, [1, -2, 3])) == [1, 2, 3]
        assert submit.call_count == 3


@pytest.mark.parametrize(
    "base",
    [
        pytest.param(
            cf.ThreadPoolExecutor,
            id="stdlib",
            marks=pytest.mark.skipif(not _STDLIB_HAS_BUFFERSIZE, reason="buffersize is 3.14+"),
        ),
        pytest.param(taut.ThreadPoolExecutor, id="taut"),
    ],
)
def test_map_buffersize_reads_an_endless_input_as_results_are_read(base):
    read = []

    def endless():
        n = 0
        while True:
            read.append(n)
            yield n
            n += 1

    with base(2) as ex:
        results = ex.map(abs, endless(), buffersize=3)
        assert len(read) == 3  # submitted ahead: exactly the buffer
        assert [next(results) for _ in range(5)] == [0, 1, 2, 3, 4]
        assert len(read) == 8  # one more read for each result taken
        results.close()  # what is still queued is cancelled, nothing more is read
        assert len(read) == 8


@pytest.mark.parametrize(
    "base",
    [
        pytest.param(
            cf.ThreadPoolExecutor,
            id="stdlib",
            marks=pytest.mark.skipif(not _STDLIB_HAS_BUFFERSIZE, reason="buffersize is 3.14+"),
        ),
        pytest.param(taut.ThreadPoolExecutor, id="taut"),
    ],
)
def test_map_buffersize_of_zero_or_less_is_the_stdlibs_value_error(base):
    with base(1) as ex:
        for bad in (0, -1):
            with pytest.raises(ValueError, match=r"^buffersize must be None or > 0$"):
                ex.map(abs, [1], buffersize=bad)
        assert list(ex.map(abs, [-1, -2], buffersize=None)) == [1, 2]


def test_map_buffersize_of_the_wrong_type_names_it():
    # The standard library's words (3.14: "buffersize must be an integer or
    # None", which its own tests match), then the value.
    with taut.ThreadPoolExecutor(1) as ex:
        for bad in (1.0, "2", True):
            with pytest.raises(TypeError, match=r"^buffersize must be an integer or None, got "):
                ex.map(abs, [1], buffersize=bad)


def test_default_max_workers_counts_the_cpus_this_process_may_use(monkeypatch):
    # The stdlib's default from 3.13: os.process_cpu_count() (CPU affinity,
    # PYTHON_CPU_COUNT), not the machine's os.cpu_count().
    monkeypatch.setattr(os, "process_cpu_count", lambda: 1, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    ex = taut.ThreadPoolExecutor()
    try:
        assert ex._max_workers == 5
    finally:
        ex.shutdown()
    if sys.version_info >= (3, 13):
        with cf.ThreadPoolExecutor() as theirs:
            assert theirs._max_workers == ex._max_workers


# -- where taut is better than the stdlib (README, "Where the standard library
# is wrong"): each checked against the stdlib in the same run ----------------


def _shutdown_from_inside(cls, where: str):
    ex = cls(2)
    done = threading.Event()
    outcome = []

    def shut_down(_future=None):
        try:
            ex.shutdown(wait=True)
            outcome.append("returned")
        except Exception as exc:
            outcome.append(f"{type(exc).__name__}: {exc}")
        done.set()

    try:
        if where == "call":
            ex.submit(shut_down)
        else:
            # Done on the worker, so that its callback runs there.
            gate = threading.Event()
            ex.submit(gate.wait, LONG).add_done_callback(shut_down)
            gate.set()
        assert done.wait(LONG)
    finally:
        ex.shutdown(wait=True)
    return outcome


@pytest.mark.parametrize("where", ["call", "done-callback"])
def test_shutdown_wait_on_a_worker_of_the_executor_waits_for_the_others(where, caplog):
    with caplog.at_level(logging.CRITICAL, logger="concurrent.futures"):
        assert _shutdown_from_inside(cf.ThreadPoolExecutor, where) == [
            "RuntimeError: cannot join current thread"
        ]
    assert _shutdown_from_inside(taut.ThreadPoolExecutor, where) == ["returned"]


def _settle_by_hand(cls, when: str, patience: float):
    ex = cls(1)
    started, release = threading.Event(), threading.Event()
    try:
        first = ex.submit(lambda: (started.set(), release.wait(LONG)))
        if when == "while-running":
            assert started.wait(LONG)
            first.set_result("by hand")
            settled = first
        else:
            settled = ex.submit(pow, 2, 2)  # queued behind `first`
            settled.set_exception(ValueError("by hand"))
        release.set()
        # Does the pool still run calls? (The stdlib's only worker died.)
        after = ex.submit(pow, 3, 2)
        finished, _ = cf.wait([after], timeout=patience)
        return settled._state, bool(finished)
    finally:
        release.set()
        ex.shutdown(wait=False)


@pytest.mark.parametrize("when", ["while-running", "while-queued"])
def test_a_future_settled_by_hand_keeps_its_outcome_and_the_pool_runs_on(when, caplog):
    with caplog.at_level(logging.CRITICAL + 1):
        # The stdlib's call never runs: a short look tells.
        assert _settle_by_hand(cf.ThreadPoolExecutor, when, 1.0) == ("FINISHED", False)
    assert _settle_by_hand(taut.ThreadPoolExecutor, when, LONG) == ("FINISHED", True)


@pytest.mark.parametrize("how", ["set_result", "set_exception"])
@pytest.mark.parametrize("waited", [False, True])
def test_a_call_settled_by_hand_while_queued_is_skipped_quietly(how, waited, caplog):
    # Its outcome is decided: the worker skips it as it skips a cancelled
    # call. taut logged CRITICAL "Future ... in unexpected state" (the base
    # set_running_or_notify_cancel's) and counted the call as failed.
    ran = []
    ex = taut.ThreadPoolExecutor(1)
    release = threading.Event()
    try:
        first = ex.submit(release.wait, LONG)
        settled = ex.submit(ran.append, "ran")
        if waited:
            # wait()/as_completed() make the Condition: the other start path.
            assert settled._condition is not None
        with caplog.at_level(logging.DEBUG):
            getattr(settled, how)(ValueError("by hand") if how == "set_exception" else "by hand")
            release.set()
            assert ex.submit(pow, 3, 2).result(timeout=LONG) == 9
            wait_until(lambda: ex.stats().running == 0)
        assert first.result(timeout=0) is True and ran == []
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
        s = ex.stats()
        # Three calls, each counted once: the skipped one as cancelled (it never ran).
        assert (s.completed, s.failed, s.cancelled) == (2, 0, 1), s
    finally:
        release.set()
        ex.shutdown(wait=True)


@pytest.mark.parametrize("raises", [False, True])
def test_a_call_settled_by_hand_while_running_counts_as_what_it_did(raises, caplog):
    # It ran: its own outcome is what the pool counts; the future keeps the
    # one set by hand, and nothing is logged.
    def call():
        started.set()
        release.wait(LONG)
        if raises:
            raise KeyError("from the call")

    ex = taut.ThreadPoolExecutor(1)
    started, release = threading.Event(), threading.Event()
    try:
        running = ex.submit(call)
        assert started.wait(LONG)
        with caplog.at_level(logging.DEBUG):
            running.set_result("by hand")
            release.set()
            wait_until(lambda: ex.stats().running == 0)
        assert running.result(timeout=0) == "by hand"
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
        s = ex.stats()
        assert (s.completed, s.failed, s.cancelled) == ((0, 1, 0) if raises else (1, 0, 0)), s
    finally:
        release.set()
        ex.shutdown(wait=True)


@pytest.mark.parametrize("error", [RuntimeError, KeyError])
@pytest.mark.parametrize("cls", _BOTH)
def test_map_over_an_input_that_fails_midway_runs_the_calls_it_submitted(cls, error):
    # The stdlib's map submits a call per item read; an error of the input
    # itself reaches the caller, and the calls submitted before it still
    # run. taut's map took a RuntimeError of the input for its pool refusing
    # a call and cancelled every call still queued (ran [0] of [0, 1, 2];
    # KeyError was fine).
    gate = threading.Event()
    ran: list[int] = []

    def items():
        yield from range(3)
        raise error("the input broke")

    def record(item: int) -> None:
        assert gate.wait(LONG)
        ran.append(item)

    ex = cls(1)
    try:
        with pytest.raises(error, match="the input broke"):
            ex.map(record, items())
    finally:
        gate.set()
        ex.shutdown(wait=True)
    assert ran == [0, 1, 2]


@pytest.mark.parametrize("cls", _BOTH)
def test_map_refused_midway_by_a_shutdown_runs_the_calls_it_submitted_before(cls):
    # A shutdown (without cancel_futures) lets the calls already accepted
    # run; one that lands in the middle of a map refuses the rest of it.
    # The stdlib's map raises the refusal and the calls it submitted before
    # run; taut's cancelled them (ran [] where the stdlib ran [0, 1]).
    gate = threading.Event()
    ran: list[int] = []

    def items():
        yield 0
        yield 1
        ex.shutdown(wait=False)
        yield 2

    def record(item: int) -> None:
        assert gate.wait(LONG)
        ran.append(item)

    ex = cls(1)
    try:
        with pytest.raises(RuntimeError, match="cannot schedule new futures after shutdown"):
            ex.map(record, items())
    finally:
        gate.set()
        ex.shutdown(wait=True)
    assert ran == [0, 1]


@pytest.mark.parametrize("cls", _BOTH)
def test_map_on_a_shut_down_executor_fails_with_its_first_call_only(cls):
    ex = cls(1)
    ex.shutdown()
    assert list(ex.map(abs, [])) == []  # nothing to run: no error
    with pytest.raises(RuntimeError, match=r"^cannot schedule new futures after shutdown$"):
        ex.map(abs, [1])


class _BrokenRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr failed")


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("exc_type", lambda: taut.ThreadPoolExecutor(1).interrupt(taut.Future(), _BrokenRepr())),
        ("_work_queue.put", lambda: taut.ThreadPoolExecutor(1)._work_queue.put(_BrokenRepr())),
        ("clock", lambda: taut.PlanningConstraints(time_budget=30).start(clock=_BrokenRepr())),
        ("fn", lambda: taut.ToolCall("t", _BrokenRepr())),
        ("arguments", lambda: taut.ToolCall("t", abs, _BrokenRepr())),
        ("name", lambda: taut.ToolCall(_BrokenRepr(), abs)),
        ("calls[0]", lambda: taut.ToolRunner(1).run([_BrokenRepr()])),
    ],
)
def test_a_value_whose_repr_raises_still_gets_the_parameters_type_error(name, call):
    with pytest.raises(TypeError, match=r"<unrepresentable> \(_BrokenRepr\)"):
        call()


def _traceback_of(call) -> str:
    try:
        call()
    except Exception as exc:
        return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    raise AssertionError("no exception")


def _refusals(cls):
    shut = cls(1)
    shut.shutdown()
    broken = cls(1, initializer=_raise, initargs=(ValueError("init"),))
    broken.submit(pow, 2, 2).exception(LONG)
    wait_until(lambda: broken._broken)
    try:
        return {
            "after shutdown": _traceback_of(lambda: shut.submit(pow, 2, 2)),
            "broken": _traceback_of(lambda: broken.submit(pow, 2, 2)),
        }
    finally:
        broken.shutdown()


@pytest.mark.parametrize("cls", _BOTH)
def test_a_refused_submit_raises_one_error_not_a_chain(cls, caplog):
    with caplog.at_level(logging.CRITICAL + 1):
        shown = _refusals(cls)
    for case, text in shown.items():
        assert "During handling of the above exception" not in text, (case, text)
    assert shown["after shutdown"].endswith(
        "RuntimeError: cannot schedule new futures after shutdown\n"
    )
    assert "BrokenThreadPool: A thread initializer failed" in shown["broken"]


@pytest.mark.parametrize("cls", _BOTH)
def test_cancelling_a_copy_of_a_queued_future_leaves_the_original_to_run(cls):
    # copy.copy of a future is a future of its own: cancelling it cancels
    # only the copy. taut's copy kept the original's queue entry, so its
    # cancel took the original's call out of the queue: the call never ran
    # and the original stayed pending for good.
    ex = cls(1)
    release = threading.Event()
    try:
        first = ex.submit(release.wait, LONG)
        queued = ex.submit(pow, 2, 5)
        twin = copy.copy(queued)
        assert twin.cancel() and twin.cancelled()
        assert not queued.done()
        release.set()
        assert queued.result(timeout=LONG) == 32
        assert first.result(timeout=LONG) is True
    finally:
        release.set()
        ex.shutdown(wait=True)


@pytest.mark.parametrize("cls", _BOTH)
def test_shutdown_cancel_futures_cancels_calls_whose_workers_are_in_the_initializer(cls):
    # A worker takes no call before its initializer returns: every call
    # queued then is still pending, and shutdown(cancel_futures=True)
    # cancels it. taut kept the calls the fresh workers had been started
    # for, and ran them after the shutdown.
    release = threading.Event()
    ran = []
    ex = cls(2, initializer=release.wait, initargs=(LONG,))
    try:
        futures = [ex.submit(ran.append, i) for i in range(3)]
        ex.shutdown(wait=False, cancel_futures=True)
        assert [f.cancelled() for f in futures] == [True, True, True]
    finally:
        release.set()
        ex.shutdown(wait=True)
    assert ran == []


def test_settling_a_copy_leaves_the_originals_result_waiters_to_the_original():
    # The copy shared the gates of the threads parked in the original's
    # result(): settling the copy released them, and the original's
    # set_result then raised RuntimeError("release unlocked lock") before
    # running its callbacks. (The standard library's set_result does not
    # raise there.)
    original = taut.Future()
    got = []
    waiter = threading.Thread(target=lambda: got.append(original.result(LONG)))
    waiter.start()
    wait_until(lambda: original._result_gates)  # parked in result()
    twin = copy.copy(original)
    twin.set_result("twin")
    called = []
    original.add_done_callback(called.append)
    original.set_result("original")
    waiter.join(LONG)
    assert got == ["original"]
    assert called == [original]
    assert twin.result(timeout=0) == "twin"


@pytest.mark.parametrize("cls", _BOTH)
def test_a_subclass_with_its_own_eq_and_no_hash_works_on_every_path(cls):
    # The standard library's pool never hashes or compares itself. taut's
    # constructor put it in a WeakSet (TypeError: unhashable type), and the
    # asyncio path listed executors owing a worker wake-up with `in`, whose
    # == raised here after the call was queued (the caller got the error,
    # the call ran anyway).
    class Pool(cls):
        def __eq__(self, other):
            raise RuntimeError("__eq__ called")

        __hash__ = None

    first, second = Pool(2), Pool(2)
    try:
        assert first.submit(pow, 2, 3).result(timeout=LONG) == 8
        assert list(second.map(abs, [-1, -2], timeout=LONG)) == [1, 2]

        async def both() -> list[int]:
            loop = asyncio.get_running_loop()
            calls = [loop.run_in_executor(ex, abs, -i) for i in range(20) for ex in (first, second)]
            return await asyncio.gather(*calls)

        assert asyncio.run(both()) == [i for i in range(20) for _ in (first, second)]
        if cls is taut.ThreadPoolExecutor:

            async def run_both() -> list[int]:
                calls = [ex.run(abs, -i) for i in range(20) for ex in (first, second)]
                return await asyncio.gather(*calls)

            assert asyncio.run(run_both()) == [i for i in range(20) for _ in (first, second)]
    finally:
        first.shutdown(wait=True)
        second.shutdown(wait=True)


class _PatchedThreading:
    """What gevent's and eventlet's monkey-patching modules answer once
    ``threading`` is patched, so that ``Thread.start`` makes a greenlet on
    the caller's OS thread. (A real greenlet worker would hang this test:
    it blocks the only OS thread waiting for calls.)"""

    def is_module_patched(self, name):  # gevent.monkey
        return name == "threading"

    def is_monkey_patched(self, name):  # eventlet.patcher
        return name == "thread"


@pytest.mark.parametrize(
    ("module", "library"), [("gevent.monkey", "gevent"), ("eventlet.patcher", "eventlet")]
)
def test_a_worker_is_refused_under_greenlet_monkey_patched_threading(monkeypatch, module, library):
    """Regression: with threading monkey-patched by gevent (``patch_all()``)
    or eventlet, a taut worker is a greenlet that blocks the process's only
    OS thread in the Rust core: the first ``result()`` hung for good (so did
    ``asyncio.to_thread`` with a taut default executor), where the standard
    library's workers yield. The worker start is refused with an error that
    says why, and the call is taken back out of the queue."""
    monkeypatch.setitem(sys.modules, module, _PatchedThreading())
    ex = taut.ThreadPoolExecutor(2)
    try:
        with pytest.raises(RuntimeError, match=f"monkey-patched by {library}"):
            ex.submit(pow, 2, 3)
        assert ex.stats().queued == 0
        assert not ex._threads

        async def run_one():
            return await ex.run(pow, 2, 4)

        with pytest.raises(RuntimeError, match="greenlets"):
            asyncio.run(run_one())
        assert ex.stats().queued == 0
        # Unpatched again (the pool is not broken): workers start as usual.
        monkeypatch.delitem(sys.modules, module)
        assert ex.submit(pow, 2, 5).result(LONG) == 32
    finally:
        ex.shutdown()


def test_threading_patched_after_the_workers_started_keeps_the_pool_working(monkeypatch):
    """Workers already running are OS threads: only a new start is refused."""
    ex = taut.ThreadPoolExecutor(1)
    try:
        assert ex.submit(pow, 2, 2).result(LONG) == 4
        monkeypatch.setitem(sys.modules, "gevent.monkey", _PatchedThreading())
        assert ex.submit(pow, 2, 6).result(LONG) == 64
    finally:
        ex.shutdown()


_CALLBACK_THREAD_UNDER_GREENLETS = """
import concurrent.futures, sys, time, taut
class Patched:
    def is_module_patched(self, name):
        return name == "threading"
sys.modules["gevent.monkey"] = Patched()
stdlib = concurrent.futures.ThreadPoolExecutor(2)
done = taut.run_bounded_sync(lambda: 7, 30.0, executor=stdlib)
assert done.value == 7 and not done.timed_out, done
started = time.monotonic()
late = taut.run_bounded_sync(lambda: time.sleep(3), 0.05, executor=stdlib)
assert late.timed_out and time.monotonic() - started < 2.5, late
ran = []
late = taut.run_bounded_sync(
    lambda: time.sleep(3), 0.05, executor=stdlib, on_timeout=lambda: ran.append(1)
)
assert late.timed_out and ran == [1], (late, ran)
try:
    taut._core.Deadline(30.0).call_soon(print)  # needs the callback thread
except RuntimeError as exc:
    assert "timer callbacks cannot run as gevent greenlets" in str(exc), exc
else:
    raise AssertionError("the callback thread started as a greenlet")
try:
    with taut.fail_after(30.0, interrupt=True):  # interrupts need it too
        raise AssertionError("an interrupt scope entered without its callback thread")
except RuntimeError as exc:
    assert "interrupt=True expire by the clock" in str(exc), exc
with taut.move_on_after(0.01) as scope:  # a scope without interrupt works
    time.sleep(0.2)
assert scope.expired and taut.remaining() is None, scope
print("ok")
"""


def test_the_timer_callback_thread_is_refused_under_greenlets_and_run_bounded_sync_still_works():
    """Regression: under gevent's ``patch_all()`` taut's timer callback thread
    (a ``threading.Thread``, so a greenlet) blocked the process's only OS
    thread in the Rust core: ``run_bounded_sync`` with the standard library's
    pool, the README's advice for such a process, hung for good. The thread is
    refused, and run_bounded_sync waits with a timeout instead. In a fresh
    interpreter: the callback thread is started once per process."""
    out = subprocess.run(
        [sys.executable, "-c", _CALLBACK_THREAD_UNDER_GREENLETS],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
