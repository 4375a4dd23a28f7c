"""Outcomes that cannot make the trip back from another process: a return
value or exception that does not pickle where the call ran, or does not
unpickle where the caller is. Each becomes that call's own clear error; no
other call of the batch loses its outcome and the pool stays usable."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pytest
from _remote_calls import (
    ExitsWhenPickled,
    ExitsWhenUnpickled,
    add_one_later,
    calls_add_one_later,
    double,
    mark_then_exit,
    mark_then_sleep,
    raise_comes_back_broken,
    raise_exit_error_when_pickled,
    return_a_lock,
    return_exits_when_pickled,
    return_exits_when_unpickled,
    take,
)

import taut
from taut.gather.remote import Terms


@pytest.fixture
def pool() -> Iterator[cf.ProcessPoolExecutor]:
    # fork: the workers find the test helpers without a sys.path of their own.
    with cf.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as ex:
        yield ex


@pytest.mark.timeout(120)
@pytest.mark.parametrize("timeout", [None, 60.0])
def test_an_exception_that_does_not_unpickle_fails_only_its_own_call(
    pool: cf.ProcessPoolExecutor, timeout: float | None
) -> None:
    # Before: unpickling the result broke the whole ProcessPoolExecutor, and
    # every call of the batch (the finished double(21) too) came back as
    # BrokenProcessPool.
    outcomes = taut.gather(
        [taut.call(raise_comes_back_broken), taut.call(double, 21)],
        executor=pool,
        timeout=timeout,
    )
    failed, fine = outcomes
    assert fine.status == "ok" and fine.value == 42
    assert failed.status == "error" and failed.started
    assert isinstance(failed.error, RuntimeError)
    assert "ComesBackBroken('refused')" in str(failed.error)
    assert "could not be unpickled" in str(failed.error)
    # The pool is not broken.
    assert pool.submit(double, 2).result(timeout=60) == 4


@pytest.mark.timeout(120)
def test_a_return_value_that_does_not_pickle_is_a_clear_error(
    pool: cf.ProcessPoolExecutor,
) -> None:
    # Before: the stdlib's bare "cannot pickle '_thread.lock' object", with
    # started=False for a call that ran.
    failed, fine = taut.gather([taut.call(return_a_lock), taut.call(double, 1)], executor=pool)
    assert fine.value == 2
    assert failed.status == "error" and failed.started
    assert isinstance(failed.error, RuntimeError)
    message = str(failed.error)
    assert "return value" in message and "lock" in message and "could not be pickled" in message


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("handle", "says"),
    [
        (lambda: taut.call(return_exits_when_pickled), "could not be pickled"),
        (lambda: taut.call(raise_exit_error_when_pickled), "could not be pickled"),
        (lambda: taut.call(return_exits_when_unpickled), "could not be unpickled"),
        (lambda: taut.call(take, ExitsWhenPickled()), "could not be pickled"),
        (lambda: taut.call(take, ExitsWhenUnpickled()), "could not be unpickled"),
    ],
    ids=["return-pickle", "raise-pickle", "return-unpickle", "arg-pickle", "arg-unpickle"],
)
@pytest.mark.parametrize("timeout", [None, 60.0])
def test_a_system_exit_while_pickling_fails_only_its_own_call(
    pool: cf.ProcessPoolExecutor, handle: Any, says: str, timeout: float | None
) -> None:
    # Before: a SystemExit raised by pickling or unpickling an outcome (or
    # the arguments) escaped the handlers that turn such failures into the
    # call's own error: the gather raised SystemExit, the whole pool broke
    # (every call BrokenProcessPool), or the gather hung (the pool's feeder
    # thread died with the call unsent).
    failed, fine = taut.gather([handle(), taut.call(double, 21)], executor=pool, timeout=timeout)
    assert fine.status == "ok" and fine.value == 42
    assert failed.status == "error", failed
    assert isinstance(failed.error, RuntimeError), failed
    assert says in str(failed.error) and "SystemExit" in str(failed.error)
    assert pool.submit(double, 2).result(timeout=60) == 4

@pytest.mark.timeout(120)
def test_a_call_that_ends_its_worker_started(tmp_path: Path) -> None:
    # Before: started=False for a call that had run (and ended its worker
    # with os._exit): the pool's BrokenProcessPool came back for a call
    # whose start the caller cannot see.
    d = str(tmp_path)
    with cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        # One worker: the pool hands it the first call and queues one or two
        # more; the rest wait in the pool, never sent to a worker.
        handles = [taut.call(mark_then_exit, d, "exit")]
        handles += [taut.call(mark_then_sleep, d, f"q{i}", 0) for i in range(6)]
        outcomes = taut.gather(handles, executor=pool)
    assert "exit" in os.listdir(d)
    assert all(o.status == "error" for o in outcomes), outcomes
    assert all(isinstance(o.error, BrokenProcessPool) for o in outcomes), outcomes
    assert outcomes[0].started
    # Never pickled, never sent: they did not begin.
    assert not outcomes[-1].started

@pytest.mark.timeout(120)
def test_calls_a_process_pool_never_handed_to_a_worker_are_not_started(tmp_path: Path) -> None:
    # Before: at the deadline every unfinished call on a ProcessPoolExecutor
    # was a 'timeout' (started=True), also those still waiting in the pool
    # that its cancel() had just taken back: a journal kept them as final,
    # and a resumed run never ran them.
    d = str(tmp_path)
    with cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        # One worker: the pool hands it the busy call and queues one or two
        # more; the rest wait in the pool, where cancel() still takes them back.
        handles = [taut.call(mark_then_sleep, d, "busy", 3.0)]
        handles += [taut.call(mark_then_sleep, d, f"q{i}", 0) for i in range(6)]
        outcomes = taut.gather(handles, executor=pool, timeout=1.0)
    ran = set(os.listdir(d))  # the pool has finished all it will ever run
    statuses = [o.status for o in outcomes]
    assert statuses[0] == "timeout"
    assert statuses[-1] == "not_started", statuses
    for name, outcome in zip(["busy"] + [f"q{i}" for i in range(6)], outcomes):
        assert outcome.status in ("timeout", "not_started"), outcome
        if outcome.status == "not_started":
            assert name not in ran and not outcome.started


@pytest.mark.timeout(120)
def test_a_call_that_waited_in_a_process_pool_past_its_deadline_never_begins(
    tmp_path: Path,
) -> None:
    # Before: the pool pickles a call when it queues it for a worker, and the
    # remaining time measured then was counted from when the worker unpickled
    # it: a call that waited 3 s in the queue behind a busy one began 2 s
    # after the batch's 1 s deadline.
    d = str(tmp_path)
    with cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        handles = [taut.call(mark_then_sleep, d, "busy", 3.0)]
        handles += [taut.call(mark_then_sleep, d, f"late{i}", 0) for i in range(2)]
        outcomes = taut.gather(handles, executor=pool, timeout=1.0)
    assert outcomes[0].status == "timeout"
    # The pool has run all it will ever run. (Only the busy call may have
    # begun: on a machine slow enough even it may have arrived too late.)
    assert set(os.listdir(d)) <= {"busy"}


def test_terms_keep_the_callers_deadline_on_one_machine_only() -> None:
    deadline = time.monotonic() + 100.0
    terms = Terms(deadline, None, None, False, "call")
    rebuild, sent = terms.__reduce__()
    time.sleep(0.05)  # time spent pickled, as in a process pool's queue
    here = rebuild(*sent)
    assert here.deadline == pytest.approx(deadline, abs=1e-6)  # the same instant
    # A clock of another machine: counted from arrival (the transit is lost,
    # which only makes the remote deadline later, never earlier).
    elsewhere = rebuild(*sent[:-2], "another-machine:1", sent[-1])
    assert elsewhere.deadline is not None and elsewhere.deadline >= deadline + 0.05


@pytest.mark.timeout(120)
def test_arguments_that_do_not_pickle_fail_with_the_reason(
    pool: cf.ProcessPoolExecutor,
) -> None:
    # Before: "its function or arguments could not be pickled", without
    # saying what could not be.
    [failed] = taut.gather([taut.call(double, threading.Lock())], executor=pool)
    assert failed.status == "error" and not failed.started
    assert isinstance(failed.error, RuntimeError)
    assert "could not be pickled" in str(failed.error)
    assert "cannot pickle '_thread.lock' object" in str(failed.error)
    assert "double" in str(failed.error)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("timeout", [None, 60.0])
def test_a_coroutine_function_runs_in_the_other_process(
    pool: cf.ProcessPoolExecutor, timeout: float | None
) -> None:
    # Before: the worker called the async function and sent back the
    # coroutine object, never awaited: the body never ran and the call failed
    # ("cannot pickle 'coroutine' object"; on Dask the gather hung). On a
    # thread pool the same call runs on its own event loop.
    [outcome] = taut.gather([taut.call(add_one_later, 1)], executor=pool, timeout=timeout)
    assert outcome.status == "ok", outcome
    value, remaining = outcome.value
    assert value == 2
    if timeout is None:
        assert remaining is None
    else:
        assert remaining is not None and 0 < remaining <= timeout


@pytest.mark.timeout(120)
def test_a_plain_function_that_returns_a_coroutine_says_so(pool: cf.ProcessPoolExecutor) -> None:
    # Before: "the return value <coroutine object ...> could not be pickled",
    # and the worker warned the coroutine was never awaited.
    [outcome] = taut.gather([taut.call(calls_add_one_later, 1)], executor=pool)
    assert outcome.status == "error" and isinstance(outcome.error, TypeError), outcome
    assert "calls_add_one_later returned a coroutine (from add_one_later)" in str(outcome.error)
