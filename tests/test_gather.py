"""taut.call / taut.gather / taut.agather: the gather contract (docs/CONTRACTS.md)."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import re
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import pytest

import taut
from taut.gather import GatherRejected, Outcome, Scheduler, Submission

pytestmark = pytest.mark.timeout(60)

LONG = 20.0  # what "never finishes on its own" means in these tests


class Counter:
    """Counts runs and the most calls running at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: list[Any] = []
        self.active = 0
        self.peak = 0

    def __enter__(self) -> None:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.active -= 1

    def record(self, value: Any) -> None:
        with self.lock:
            self.runs.append(value)


class Record(NamedTuple):
    position: int
    call_id: str
    status: str
    value: object
    error: BaseException | None


class MemJournal:
    """The taut.journal.Journal protocol over a list that outlives the object
    (as a file outlives a process): one object per run, cursor from 0."""

    def __init__(self, slots: list[list[Any]] | None = None) -> None:
        self.slots: list[list[Any]] = slots if slots is not None else []
        self._cursor = 0
        self.fail_complete = False
        self.log: list[tuple[str, Any]] = []

    def reserve(self, call_ids: Sequence[str]) -> list[Record | None]:
        self.log.append(("reserve", list(call_ids)))
        out: list[Record | None] = []
        for i, cid in enumerate(call_ids):
            pos = self._cursor + i
            if pos < len(self.slots):
                cid0, status, value, error = self.slots[pos]
                if cid0 == cid:
                    out.append(
                        None if status == "pending" else Record(pos, cid, status, value, error)
                    )
                    continue
                del self.slots[pos:]
            self.slots.append([cid, "pending", None, None])
            out.append(None)
        self._cursor += len(call_ids)
        return out

    def complete(
        self, position: int, call_id: str, status: str, value: object, error: BaseException | None
    ) -> None:
        if self.fail_complete:
            raise OSError("disk full")
        self.log.append(("complete", position))
        assert self.slots[position][0] == call_id
        self.slots[position] = [call_id, status, value, error]


@pytest.fixture
def pool() -> Iterator[cf.ThreadPoolExecutor]:
    ex = cf.ThreadPoolExecutor(8, thread_name_prefix="test-gather")
    yield ex
    ex.shutdown(wait=False, cancel_futures=True)


# --------------------------------------------------------------------- ordering


def test_outcomes_come_back_in_input_order_with_values_and_errors(pool: Any) -> None:
    def work(i: int) -> int:
        time.sleep(0.002 * (5 - i))  # later inputs finish first
        if i == 2:
            raise ValueError("two")
        return i * 10

    outcomes = taut.gather([taut.call(work, i) for i in range(5)], executor=pool)
    assert [o.status for o in outcomes] == ["ok", "ok", "error", "ok", "ok"]
    assert [o.value for o in outcomes] == [0, 10, None, 30, 40]
    assert isinstance(outcomes[2].error, ValueError)
    assert [o.call_id for o in outcomes] == [
        f"{__name__}.{work.__qualname__}#{i}" for i in range(5)
    ]
    assert all(o.started and o.elapsed_s >= 0 for o in outcomes)


def test_explicit_call_ids_are_kept(pool: Any) -> None:
    outcomes = taut.gather(
        [taut.call(str, 1, call_id="a"), taut.call(str, 2, call_id="b")], executor=pool
    )
    assert [(o.call_id, o.value) for o in outcomes] == [("a", "1"), ("b", "2")]


def test_max_parallel_bounds_running_calls(pool: Any) -> None:
    counter = Counter()

    def work(i: int) -> int:
        with counter:
            time.sleep(0.01)
        return i

    outcomes = taut.gather([taut.call(work, i) for i in range(8)], max_parallel=2, executor=pool)
    assert [o.value for o in outcomes] == list(range(8))
    assert counter.peak <= 2


def test_without_max_parallel_all_run_at_once(pool: Any) -> None:
    barrier = threading.Barrier(5, timeout=LONG)
    outcomes = taut.gather([taut.call(barrier.wait) for _ in range(5)], executor=pool)
    assert sorted(o.value for o in outcomes) == [0, 1, 2, 3, 4]


# ------------------------------------------------------------- caching, awaits


def test_repeated_awaits_and_gathers_reuse_the_cached_outcome(pool: Any) -> None:
    counter = Counter()

    def work(x: int) -> int:
        counter.record(x)
        return x + 1

    h = taut.call(work, 1)
    assert h.result() == 2
    assert h.result() == 2
    first = h.outcome()
    outcomes = taut.gather([h, taut.call(work, 5)], executor=pool)
    assert outcomes[0] is first or outcomes[0].value == first.value  # type: ignore[union-attr]
    assert [o.value for o in outcomes] == [2, 6]
    assert counter.runs == [1, 5]
    assert h.done()


def test_single_await_reraises_and_caches_the_error() -> None:
    counter = Counter()

    def boom() -> None:
        counter.record(1)
        raise KeyError("nope")

    h = taut.call(boom)
    for _ in range(3):
        with pytest.raises(KeyError, match="nope"):
            h.result()
    assert counter.runs == [1]
    [o] = taut.gather([h])
    assert o.status == "error" and isinstance(o.error, KeyError)
    assert counter.runs == [1]


def test_error_outcome_from_gather_is_reraised_by_a_later_await(pool: Any) -> None:
    h = taut.call(int, "x")
    [o] = taut.gather([h], executor=pool)
    assert o.status == "error"
    with pytest.raises(ValueError):
        h.result()


def test_single_await_applies_no_timeout() -> None:
    # The same kind of call times out in a gather with a short deadline, but a
    # single await waits for it to finish.
    release = threading.Event()
    threading.Timer(0.3, release.set).start()

    def wait() -> str:
        assert release.wait(LONG)
        return "done"

    assert taut.call(wait).result() == "done"


def test_single_await_runs_on_the_calling_thread() -> None:
    assert taut.call(threading.get_ident).result() == threading.get_ident()


def test_coroutine_handle_result_outside_a_loop() -> None:
    async def co(x: int) -> int:
        await asyncio.sleep(0)
        return x * 3

    assert taut.call(co, 4).result() == 12


def test_await_handle_inside_a_loop() -> None:
    runs: list[str] = []

    async def co() -> str:
        runs.append("co")
        return "c"

    def sync() -> str:
        runs.append("sync")
        return "s"

    async def main() -> tuple[str, ...]:
        hc, hs = taut.call(co), taut.call(sync)
        return (await hc, await hc, await hs, await hs)

    assert asyncio.run(main()) == ("c", "c", "s", "s")
    assert runs == ["co", "sync"]


def test_handle_result_inside_a_loop_for_a_coroutine_is_refused() -> None:
    async def co() -> int:
        return 1

    async def main() -> None:
        h = taut.call(co)
        with pytest.raises(RuntimeError, match="await handle"):
            h.result()
        assert await h == 1

    asyncio.run(main())


def test_waiting_for_a_handle_running_on_another_thread(pool: Any) -> None:
    counter = Counter()
    go = threading.Event()

    def work() -> int:
        counter.record(1)
        assert go.wait(LONG)
        return 7

    h = taut.call(work)
    f = pool.submit(h.result)
    while not counter.runs:
        time.sleep(0.001)
    with pytest.raises(GatherRejected, match="already running"):
        taut.gather([h], executor=pool)
    g = pool.submit(h.result)  # waits for the first runner instead of running again
    go.set()
    assert f.result(LONG) == 7 and g.result(LONG) == 7
    assert counter.runs == [1]


# ------------------------------------------------------------- rejections


def _never(*_: Any) -> None:
    raise AssertionError("must not run")


def test_duplicate_handle_is_rejected_before_anything_runs() -> None:
    ran = Counter()
    a = taut.call(ran.record, 1)
    with pytest.raises(GatherRejected, match=r"handles\[2\].*same handle as handles\[0\]"):
        taut.gather([a, taut.call(ran.record, 2), a])
    assert ran.runs == []
    assert not a.done()


def test_duplicate_call_id_is_rejected() -> None:
    with pytest.raises(GatherRejected, match=r"call_id 'x'.*handles\[0\]"):
        taut.gather([taut.call(_never, call_id="x"), taut.call(_never, call_id="x")])


def test_not_a_handle_is_rejected() -> None:
    fut: cf.Future[int] = cf.Future()
    with pytest.raises(TypeError, match=r"handles\[1\] is not a taut call handle.*Future"):
        taut.gather([taut.call(_never), fut])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"iterable of taut\.call"):
        taut.gather(taut.call(_never))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"executor": 5}, r"executor must be a concurrent\.futures\.Executor or None, got 5 "),
        ({"executor": taut.ThreadPoolExecutor}, r"executor must be .*got <class .*\(type\)"),
        ({"journal": 5}, r"journal must have reserve\(\) and complete\(\).*got 5 \(int\)"),
        ({"journal": "run.db"}, r"journal must .*got 'run\.db' \(str\)"),
    ],
)
def test_a_wrong_executor_or_journal_is_refused_naming_it_before_anything_runs(
    kwargs: dict[str, Any], match: str
) -> None:
    # Before: AttributeError: 'int' object has no attribute 'submit' / 'reserve'.
    ran = Counter()
    h = taut.call(ran.record, 1)
    with pytest.raises(TypeError, match=match):
        taut.gather([h], **kwargs)
    with pytest.raises(TypeError, match=match):
        asyncio.run(taut.agather([h], **kwargs))
    with pytest.raises(TypeError, match=match):
        Scheduler(**kwargs)
    assert ran.runs == [] and not h.done()
    assert taut.gather([h])[0].ok  # the handle is still cold and runs once


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        # "no" was truthy: a timed-out worker got interrupted.
        ({"interrupt": "no"}, r"interrupt must be a bool or None, got 'no' \(str\)"),
        # was "'int' object is not callable", from inside the run
        ({"submit": 5}, r"submit must be a callable or None, got 5 \(int\)"),
        ({"on_slot_wait": 5}, r"on_slot_wait must be a callable or None, got 5 \(int\)"),
    ],
)
def test_hostile_gather_options_are_refused_naming_them(kwargs: dict[str, Any], match: str) -> None:
    ran = Counter()
    h = taut.call(ran.record, 1)
    with pytest.raises(TypeError, match=match):
        taut.gather([h], **kwargs)
    assert ran.runs == [] and not h.done()
    with pytest.raises(TypeError, match=r"interrupt must be a bool, got 'no' \(str\)"):
        Scheduler(interrupt="no")  # type: ignore[arg-type]


@pytest.mark.parametrize("handles", [None, 5])
def test_handles_that_are_not_iterable_are_refused_naming_them(handles: Any) -> None:
    # Before: TypeError: 'NoneType' object is not iterable (no parameter named).
    with pytest.raises(TypeError, match=r"handles must be an iterable of taut\.call"):
        taut.gather(handles)


def test_foreign_scheduler_handle_is_rejected() -> None:
    other = Scheduler(name="other-run")
    ran = Counter()
    h_mine = taut.call(ran.record, 1)
    h_other = other.call(ran.record, 2)
    with pytest.raises(GatherRejected, match=r"handles\[1\].*foreign.*other-run"):
        taut.gather([h_mine, h_other])
    with pytest.raises(GatherRejected, match="foreign"):
        other.gather([h_mine])
    assert ran.runs == []
    assert other.gather([h_other])[0].ok


def test_foreign_process_handle_is_rejected() -> None:
    h = taut.call(_never)
    h._pid = -1  # as if inherited through fork
    with pytest.raises(GatherRejected, match="foreign: it was made in process -1"):
        taut.gather([h])


def test_nested_handle_arguments_are_rejected() -> None:
    inner = taut.call(_never)
    with pytest.raises(GatherRejected, match="positional argument 0"):
        taut.call(_never, inner)
    with pytest.raises(GatherRejected, match="keyword argument 'x'"):
        taut.call(_never, x=[inner])
    holder: list[Any] = []
    outer = taut.call(_never, holder)
    holder.append(inner)  # filled in after the handle was made
    with pytest.raises(GatherRejected, match="nested"):
        taut.gather([outer])


def test_a_call_cannot_gather_handles_of_its_own_batch(pool: Any) -> None:
    handles: list[Any] = []
    seen: list[BaseException] = []

    def sneaky() -> None:
        try:
            taut.gather([handles[1]])
        except GatherRejected as exc:
            seen.append(exc)
            raise

    handles.extend([taut.call(sneaky), taut.call(time.sleep, 0)])
    outcomes = taut.gather(handles, executor=pool)
    assert outcomes[0].status == "error"
    assert isinstance(outcomes[0].error, GatherRejected)
    assert "its own batch" in str(seen[0])
    assert outcomes[1].ok


def test_a_nested_gather_cannot_share_the_outer_journal(pool: Any) -> None:
    journal = MemJournal()

    def nested() -> None:
        taut.gather([taut.call(time.sleep, 0)], journal=journal)

    [o] = taut.gather([taut.call(nested)], executor=pool, journal=journal)
    assert o.status == "error" and "enclosing gather" in str(o.error)


def test_nested_gather_on_a_one_worker_pool_runs_inline_and_completes() -> None:
    one = cf.ThreadPoolExecutor(1, thread_name_prefix="one")
    try:

        def sub_agent(n: int) -> list[str]:
            inner = taut.gather(
                [
                    taut.call(lambda i=i: threading.current_thread().name + f"/{i}")
                    for i in range(n)
                ],
                executor=one,
                timeout=LONG,
            )
            return [o.value for o in inner]

        [o] = taut.gather([taut.call(sub_agent, 3)], executor=one, timeout=LONG)
        assert o.ok
        assert o.value == [f"one_0/{i}" for i in range(3)]
    finally:
        one.shutdown(wait=False)


def test_argument_validation_names_the_parameter() -> None:
    h = taut.call(_never)
    with pytest.raises(
        TypeError, match=r"timeout must be a number of seconds or None, got True \(bool\)"
    ):
        taut.gather([h], timeout=True)
    with pytest.raises(ValueError, match=r"timeout must not be NaN, got nan \(float\)"):
        taut.gather([h], timeout=float("nan"))
    with pytest.raises(
        TypeError, match=r"max_parallel must be an integer or None, got 2.0 \(float\)"
    ):
        taut.gather([h], max_parallel=2.0)
    with pytest.raises(
        ValueError, match=r"max_parallel must be an integer >= 1 or None, got 0 \(int\)"
    ):
        taut.gather([h], max_parallel=0)
    with pytest.raises(TypeError, match=r"call_id must be a non-empty str or None, got 3 \(int\)"):
        taut.call(_never, call_id=3)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"call_id must be a non-empty str or None, got '' \(str\)"
    ):
        taut.call(_never, call_id="")

    class ClaimsToBeStr:  # isinstance() believes it; str.__str__ refused it, naming nothing
        __class__ = property(lambda self: str)  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"call_id must be a non-empty str or None, got <"):
        taut.call(_never, call_id=ClaimsToBeStr())

    class Label(str):
        def __format__(self, spec: str) -> str:
            raise RuntimeError("a hostile __format__")

    assert type(taut.call(_never, call_id=Label("x")).call_id) is str
    with pytest.raises(TypeError, match="fn must be callable"):
        taut.call(3)  # type: ignore[arg-type]
    assert not h.done()


def test_negative_timeout_is_already_expired_like_every_taut_timeout() -> None:
    # The gate's rule (clamp_timeout, asyncio.wait_for, concurrent.futures.wait):
    # a negative timeout is a deadline already past, so nothing starts.
    [o] = taut.gather([taut.call(_never)], timeout=-1)
    assert o.status == "not_started"


def test_a_huge_timeout_is_fine(pool: Any) -> None:
    [o] = taut.gather([taut.call(int, "5")], timeout=1e300, executor=pool)
    assert o.value == 5
    [o] = taut.gather([taut.call(int, "6")], timeout=float("inf"), executor=pool)
    assert o.value == 6


async def _doubled(x: int) -> int:
    return 2 * x


def test_a_plain_function_that_returns_a_coroutine_is_an_error_not_ok(pool: Any) -> None:
    # It came back 'ok' with a coroutine object as its value, whose body never
    # ran (and Python warned "never awaited" whenever it was collected).
    made: list[Any] = []

    def make() -> Any:
        made.append(_doubled(1))
        return made[-1]

    async def agathered() -> list[Outcome]:
        return await taut.agather([taut.call(make)], executor=pool)

    outcomes = [*taut.gather([taut.call(make)], executor=pool), *asyncio.run(agathered())]
    for o in outcomes:
        assert o.status == "error" and o.value is None, o
        assert isinstance(o.error, TypeError)
        assert re.search(
            r"make returned a coroutine \(from _doubled\).*pass the async function itself",
            str(o.error),
        ), o.error
    assert len(made) == 2
    # Closed: no "never awaited" warning when it is collected.
    assert all(coro.cr_frame is None for coro in made)
    # The async function itself runs, as ever.
    assert [o.value for o in taut.gather([taut.call(_doubled, 1)], executor=pool)] == [2]


# ------------------------------------------------------------- propagation


def test_base_exceptions_propagate_and_are_not_cached(pool: Any) -> None:
    attempts = Counter()

    def interrupted() -> str:
        attempts.record(1)
        if len(attempts.runs) == 1:
            raise KeyboardInterrupt
        return "second time"

    h = taut.call(interrupted)
    ok = taut.call(int, "1")
    with pytest.raises(KeyboardInterrupt):
        taut.gather([ok, h], executor=pool)
    assert not h.done() and h.outcome() is None
    assert [o.value for o in taut.gather([ok, h], executor=pool)] == [1, "second time"]


def test_system_exit_propagates_from_a_single_await() -> None:
    h = taut.call(_raise, SystemExit(3))
    with pytest.raises(SystemExit):
        h.result()
    assert not h.done()


def _raise(exc: BaseException) -> None:
    raise exc


def test_cancelling_agather_propagates_and_caches_nothing() -> None:
    started = threading.Event()

    async def hang() -> None:
        started.set()
        await asyncio.sleep(LONG)

    async def main() -> tuple[Any, Any]:
        h1, h2 = taut.call(hang), taut.call(asyncio.sleep, 0, "x")
        task = asyncio.ensure_future(taut.agather([h1, h2]))
        while not started.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return h1, h2

    h1, _ = asyncio.run(main())
    assert not h1.done()


def test_cancelled_future_becomes_a_cancelled_outcome() -> None:
    class CancellingExecutor(cf.Executor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
            f: cf.Future[Any] = cf.Future()
            f.cancel()
            f.set_running_or_notify_cancel()
            return f

    h = taut.call(_never)
    [o] = taut.gather([h], executor=CancellingExecutor())
    assert o.status == "cancelled" and not o.started
    assert not h.done()  # not cached: it can run again


# ------------------------------------------------------------- deadlines


def test_deadline_keeps_finished_times_out_started_and_fences_unstarted() -> None:
    one = cf.ThreadPoolExecutor(2, thread_name_prefix="dl")
    latch = threading.Event()
    ran = Counter()

    def quick() -> str:
        ran.record("quick")
        return "quick"

    def hang(name: str) -> str:
        ran.record(name)
        latch.wait(LONG)
        return name

    handles = [
        taut.call(quick),
        taut.call(hang, "h1"),
        taut.call(hang, "h2"),
        taut.call(quick, call_id="late"),
    ]
    try:
        t0 = time.monotonic()
        outcomes = taut.gather(handles, timeout=1.0, max_parallel=3, executor=one)
        took = time.monotonic() - t0
        assert [o.status for o in outcomes] == ["ok", "timeout", "timeout", "not_started"]
        assert outcomes[0].value == "quick"
        assert isinstance(outcomes[1].error, TimeoutError)
        assert outcomes[1].started and not outcomes[3].started
        assert took < LONG / 2
        latch.set()
        time.sleep(0.2)  # give a fenced call every chance to start (it must not)
        assert sorted(ran.runs) == ["h1", "h2", "quick"]
        # timeouts are cached, a not-started call can run again later
        assert handles[1].done() and not handles[3].done()
        with pytest.raises(TimeoutError):
            handles[1].result()
        assert handles[3].result() == "quick"
    finally:
        latch.set()
        one.shutdown(wait=True)


def test_queued_call_picked_up_after_the_fence_does_not_run() -> None:
    # Two calls on one worker, no max_parallel: the second waits in the
    # executor's own queue; at the deadline it is fenced, and it stays unrun
    # even though the stdlib cannot always cancel a queued future.
    one = cf.ThreadPoolExecutor(1, thread_name_prefix="fence")
    latch = threading.Event()
    ran = Counter()
    try:
        outcomes = taut.gather(
            [taut.call(latch.wait, LONG), taut.call(ran.record, "second")],
            timeout=0.1,
            executor=one,
        )
        assert [o.status for o in outcomes] == ["timeout", "not_started"]
        latch.set()
        one.submit(int).result(LONG)  # the worker has drained its queue
        assert ran.runs == []
    finally:
        latch.set()
        one.shutdown(wait=True)


class InlineExecutor(cf.Executor):
    """Runs each call inside submit(), as a busy or synchronous executor may:
    the gather thread only gets control back after the call ended."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        future: cf.Future[Any] = cf.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


def test_no_call_starts_after_the_batch_deadline() -> None:
    # The first call overruns the 0.05 s deadline inside submit(); the calls
    # submitted after it must not begin: they are not_started and never run.
    # The first one finished after the deadline: a timeout, as an inline call.
    ran = Counter()

    def slow(i: int) -> int:
        ran.record(i)
        time.sleep(0.5)
        return i

    outcomes = taut.gather(
        [taut.call(slow, i) for i in range(3)], timeout=0.05, executor=InlineExecutor()
    )
    assert ran.runs == [0]
    assert [o.status for o in outcomes] == ["timeout", "not_started", "not_started"]
    assert [o.started for o in outcomes] == [True, False, False]


def test_agather_starts_no_call_after_the_batch_deadline() -> None:
    ran = Counter()

    def slow(i: int) -> int:
        ran.record(i)
        time.sleep(0.5)
        return i

    async def main() -> list[Outcome]:
        return await taut.agather(
            [taut.call(slow, i) for i in range(3)], timeout=0.05, executor=InlineExecutor()
        )

    outcomes = asyncio.run(main())
    assert ran.runs == [0]
    assert [o.status for o in outcomes] == ["timeout", "not_started", "not_started"]


def test_zero_timeout_starts_nothing(pool: Any) -> None:
    # timeout=0 is a deadline that has already passed, not "no deadline".
    ran = Counter()
    outcomes = taut.gather([taut.call(ran.record, i) for i in range(4)], timeout=0, executor=pool)
    pool.submit(int).result(LONG)
    time.sleep(0.05)  # let any stray worker that picked a call up finish it
    assert ran.runs == []
    assert [o.status for o in outcomes] == ["not_started"] * 4


def test_agather_deadline_and_order() -> None:
    pool = cf.ThreadPoolExecutor(2, thread_name_prefix="ag")
    release = threading.Event()

    async def co(x: int) -> tuple[int, int]:
        await asyncio.sleep(0)
        return x, threading.get_ident()

    async def hang() -> None:
        await asyncio.sleep(LONG)

    def sync(x: int) -> tuple[int, int]:
        return x, threading.get_ident()

    async def main() -> tuple[list[Outcome], int]:
        loop_thread = threading.get_ident()
        outs = await taut.agather(
            [
                taut.call(co, 1),
                taut.call(sync, 2),
                taut.call(hang),
                taut.call(release.wait, LONG),
                taut.call(co, 5),
            ],
            timeout=0.2,
            max_parallel=2,
            executor=pool,
        )
        return outs, loop_thread

    try:
        outs, loop_thread = asyncio.run(main())
        assert [o.status for o in outs] == ["ok", "ok", "timeout", "timeout", "not_started"]
        assert outs[0].value == (1, loop_thread)
        assert outs[1].value[0] == 2 and outs[1].value[1] != loop_thread
    finally:
        release.set()
        pool.shutdown(wait=True)


def test_agather_with_no_work_left_returns_cached() -> None:
    async def main() -> list[Outcome]:
        h = taut.call(int, "3")
        assert h.result() == 3
        return await taut.agather([h])

    assert asyncio.run(main())[0].value == 3


# ------------------------------------------------------------- journal


def test_journal_slots_are_reserved_in_input_order_before_anything_runs(pool: Any) -> None:
    journal = MemJournal()
    seen_at_run: list[int] = []

    def work(i: int) -> int:
        seen_at_run.append(len(journal.slots))
        return i

    taut.gather([taut.call(work, i) for i in range(4)], executor=pool, journal=journal)
    assert journal.log[0] == ("reserve", [f"{__name__}.{work.__qualname__}#{i}" for i in range(4)])
    assert seen_at_run == [4, 4, 4, 4]
    assert [s[1] for s in journal.slots] == ["ok"] * 4


def test_journal_replays_terminal_and_reruns_pending(pool: Any) -> None:
    slots: list[list[Any]] = []
    ran = Counter()

    def work(i: int) -> int:
        ran.record(i)
        if i == 1:
            raise ValueError("one")
        return i

    release = threading.Event()

    def slow(i: int) -> int:
        ran.record(i)
        release.wait(LONG)
        return i

    try:
        first = taut.gather(
            [taut.call(work, 0), taut.call(work, 1), taut.call(slow, 2, call_id="slow")],
            timeout=0.2,
            executor=pool,
            journal=MemJournal(slots),
        )
        assert [o.status for o in first] == ["ok", "error", "timeout"]
        assert [s[1] for s in slots] == ["ok", "error", "timeout"]
        # A rerun (new process, new journal object over the same file): terminal
        # outcomes replay without running, even the timeout.
        ran.runs.clear()
        again = taut.gather(
            [taut.call(work, 0), taut.call(work, 1), taut.call(slow, 2, call_id="slow")],
            executor=pool,
            journal=MemJournal(slots),
        )
        assert ran.runs == []
        assert [(o.status, o.replayed) for o in again] == [
            ("ok", True),
            ("error", True),
            ("timeout", True),
        ]
        assert again[0].value == 0 and isinstance(again[1].error, ValueError)
    finally:
        release.set()


def test_journal_pending_not_started_slots_run_again() -> None:
    one = cf.ThreadPoolExecutor(1, thread_name_prefix="jp")
    slots: list[list[Any]] = []
    latch = threading.Event()
    ran = Counter()
    try:
        out = taut.gather(
            [taut.call(latch.wait, LONG, call_id="block"), taut.call(ran.record, "b", call_id="b")],
            timeout=0.1,
            executor=one,
            journal=MemJournal(slots),
        )
        assert [o.status for o in out] == ["timeout", "not_started"]
        assert [s[1] for s in slots] == ["timeout", "pending"]
        latch.set()
        out = taut.gather(
            [taut.call(latch.wait, LONG, call_id="block"), taut.call(ran.record, "b", call_id="b")],
            executor=one,
            journal=MemJournal(slots),
        )
        assert [o.status for o in out] == ["timeout", "ok"]
        assert ran.runs == ["b"]
    finally:
        latch.set()
        one.shutdown(wait=True)


def test_journal_id_mismatch_truncates_and_reruns_from_there(pool: Any) -> None:
    slots: list[list[Any]] = []
    ran = Counter()
    taut.gather(
        [taut.call(ran.record, i, call_id=f"c{i}") for i in range(3)],
        executor=pool,
        journal=MemJournal(slots),
    )
    ran.runs.clear()
    out = taut.gather(
        [
            taut.call(ran.record, 0, call_id="c0"),
            taut.call(ran.record, 9, call_id="other"),
            taut.call(ran.record, 2, call_id="c2"),
        ],
        executor=pool,
        journal=MemJournal(slots),
    )
    assert [o.replayed for o in out] == [True, False, False]
    assert sorted(ran.runs) == [2, 9]
    assert [s[0] for s in slots] == ["c0", "other", "c2"]


def test_journal_positions_continue_across_gathers(pool: Any) -> None:
    slots: list[list[Any]] = []
    j = MemJournal(slots)
    taut.gather([taut.call(int, "1", call_id="a")], executor=pool, journal=j)
    taut.gather([taut.call(int, "2", call_id="b")], executor=pool, journal=j)
    assert slots == [["a", "ok", 1, None], ["b", "ok", 2, None]]
    ran = Counter()
    j2 = MemJournal(slots)
    out1 = taut.gather([taut.call(ran.record, 1, call_id="a")], executor=pool, journal=j2)
    out2 = taut.gather([taut.call(ran.record, 2, call_id="b")], executor=pool, journal=j2)
    assert (out1[0].value, out2[0].value) == (1, 2)
    assert ran.runs == []


def test_journal_write_failure_reaches_the_caller(pool: Any) -> None:
    journal = MemJournal()
    journal.fail_complete = True
    with pytest.raises(OSError, match="disk full"):
        taut.gather([taut.call(int, "1")], executor=pool, journal=journal)


def test_single_await_with_a_scheduler_journal_reserves_and_replays() -> None:
    # A scheduler's journal also makes single awaits durable: the slot is
    # reserved after the gathered ones, and a rerun replays it without running.
    slots: list[list[Any]] = []
    ran = Counter()
    s = Scheduler(journal=MemJournal(slots))
    s.gather([s.call(ran.record, "a", call_id="a"), s.call(ran.record, "b", call_id="b")])
    assert s.call(lambda: ran.record("c") or "C", call_id="c").result() == "C"
    assert [slot[:2] for slot in slots] == [["a", "ok"], ["b", "ok"], ["c", "ok"]]

    rerun = Scheduler(journal=MemJournal(slots))
    rerun.gather(
        [rerun.call(ran.record, "a", call_id="a"), rerun.call(ran.record, "b", call_id="b")]
    )

    async def again() -> Any:
        return await rerun.call(lambda: ran.record("c") or "X", call_id="c")

    assert asyncio.run(again()) == "C"
    assert sorted(ran.runs) == ["a", "b", "c"]


def test_journal_reserve_failure_runs_nothing(pool: Any) -> None:
    class Broken(MemJournal):
        def reserve(self, call_ids: Sequence[str]) -> list[Record | None]:
            raise OSError("locked")

    ran = Counter()
    h = taut.call(ran.record, 1)
    with pytest.raises(OSError, match="locked"):
        taut.gather([h], executor=pool, journal=Broken())
    assert ran.runs == [] and not h.done()
    assert taut.gather([h], executor=pool)[0].ok


@pytest.mark.parametrize("status", ["pending", "bogus", "cancelled"])
def test_a_journal_replaying_a_status_it_cannot_keep_is_refused(pool: Any, status: str) -> None:
    # Before the Outcome check: an Outcome with that status, passed off as the
    # call's result; then a ValueError from deep inside the gather.
    class Replaying(MemJournal):
        def reserve(self, call_ids: Sequence[str]) -> list[Record | None]:
            return [Record(0, "a", status, None, None)]

    ran = Counter()
    h = taut.call(ran.record, 1, call_id="a")
    with pytest.raises(taut.JournalError, match=rf"call 'a' at position 0 with status {status!r}"):
        taut.gather([h], executor=pool, journal=Replaying())
    assert ran.runs == [] and not h.done()


# ------------------------------------------------------------- Dask


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Any]:
    distributed = pytest.importorskip(
        "distributed", reason="Dask distributed is not installed (it comes with the test extra)"
    )
    Client = distributed.Client

    client = Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=":0")
    yield client
    client.close()


def test_dask_executor_keeps_order_and_errors(dask_client: Any) -> None:
    ex = dask_client.get_executor()
    shared = threading.Event()  # not picklable: the in-process cluster sees the live object

    def work(i: int) -> int:
        shared.set()
        if i == 3:
            raise ValueError("three")
        return i * i

    outcomes = taut.gather([taut.call(work, i) for i in range(5)], executor=ex, timeout=LONG)
    assert [o.status for o in outcomes] == ["ok", "ok", "ok", "error", "ok"]
    assert [o.value for o in outcomes if o.ok] == [0, 1, 4, 16]
    assert shared.is_set()


def test_dask_identical_calls_are_not_deduplicated(dask_client: Any) -> None:
    ran = Counter()
    outcomes = taut.gather(
        [taut.call(ran.record, "same") for _ in range(3)], executor=dask_client.get_executor()
    )
    assert all(o.ok for o in outcomes)
    assert ran.runs == ["same"] * 3


def test_dask_deadline_cancels_remote_work_and_fences_the_rest(dask_client: Any) -> None:
    ex = dask_client.get_executor()
    latch = threading.Event()
    ran = Counter()

    def hang(name: str) -> str:
        ran.record(name)
        latch.wait(LONG)
        return name

    handles = [
        taut.call(hang, "a"),
        taut.call(hang, "b"),
        taut.call(hang, "c"),  # two worker threads: this one waits in Dask
        taut.call(ran.record, "d"),
    ]
    try:
        outcomes = taut.gather(handles, executor=ex, timeout=0.5, max_parallel=3)
        statuses = [o.status for o in outcomes]
        assert statuses[:2] == ["timeout", "timeout"]
        assert statuses[2:] == ["not_started", "not_started"]
        # the remote futures were cancelled, so the cluster holds none of them
        deadline = time.monotonic() + LONG

        def pending() -> list[str]:
            return [k for k, s in dask_client.futures.items() if s.status == "pending"]

        while pending() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not pending()
        latch.set()
        time.sleep(0.3)
        assert sorted(ran.runs) == ["a", "b"]
    finally:
        latch.set()


# ------------------------------------------------------------- taut executor


def test_default_executor_is_tauts_shared_pool() -> None:
    [o] = taut.gather([taut.call(lambda: threading.current_thread().name)])
    assert o.value.startswith("taut-default")


def test_deadline_abandons_the_taut_worker_so_queued_work_proceeds() -> None:
    ex = taut.ThreadPoolExecutor(1, thread_name_prefix="ab")
    latch = threading.Event()
    try:
        [o] = taut.gather([taut.call(latch.wait, LONG)], timeout=0.1, executor=ex)
        assert o.status == "timeout"
        assert ex.stats().abandoned == 1
        # the ceiling of one is free again although the hung call still runs
        assert ex.submit(lambda: "next").result(LONG) == "next"
    finally:
        latch.set()
        ex.shutdown(wait=True)


def test_interrupt_stops_a_timed_out_python_loop() -> None:
    ex = taut.ThreadPoolExecutor(2, thread_name_prefix="intr")
    stopped = threading.Event()

    def spin() -> None:
        try:
            end = time.monotonic() + LONG
            while time.monotonic() < end:
                time.sleep(0.005)
        except TimeoutError:
            stopped.set()
            raise

    try:
        [o] = taut.gather([taut.call(spin)], timeout=0.1, executor=ex, interrupt=True)
        assert o.status == "timeout"
        assert stopped.wait(LONG / 2)
    finally:
        ex.shutdown(wait=True)


def test_nested_gather_on_a_one_worker_taut_pool_runs_inline() -> None:
    ex = taut.ThreadPoolExecutor(1, thread_name_prefix="nest")
    try:

        def sub_agent() -> list[Any]:
            assert ex.in_worker()
            inner = taut.gather(
                [taut.call(threading.current_thread) for _ in range(3)], executor=ex
            )
            return [o.value for o in inner]

        [o] = taut.gather([taut.call(sub_agent)], executor=ex, timeout=LONG)
        assert o.ok and len(set(o.value)) == 1
    finally:
        ex.shutdown(wait=True)


def test_nested_inline_gather_reports_a_call_past_its_deadline_as_timeout() -> None:
    # Inline on a one-worker pool, nothing can cut the first call off, but it
    # was still running at the 0.05 s deadline: timeout (as on a pool), and
    # the call after it never starts.
    ex = taut.ThreadPoolExecutor(1, thread_name_prefix="nest-late")
    ran = Counter()
    try:

        def sub_agent() -> list[Outcome]:
            return taut.gather(
                [taut.call(time.sleep, 0.5), taut.call(ran.record, "late")],
                executor=ex,
                timeout=0.05,
            )

        [o] = taut.gather([taut.call(sub_agent)], executor=ex, timeout=LONG)
        assert o.ok, o
        assert [i.status for i in o.value] == ["timeout", "not_started"]
        assert isinstance(o.value[0].error, TimeoutError) and o.value[0].started
        assert o.value[0].elapsed_s == pytest.approx(0.05, abs=0.01)
        assert ran.runs == []
    finally:
        ex.shutdown(wait=True)


def test_nested_inline_agather_reports_a_call_past_its_deadline_as_timeout() -> None:
    ex = taut.ThreadPoolExecutor(1, thread_name_prefix="anest-late")
    ran = Counter()
    try:

        def sub_agent() -> list[Outcome]:
            async def inner() -> list[Outcome]:
                return await taut.agather(
                    [taut.call(time.sleep, 0.5), taut.call(ran.record, "late")],
                    executor=ex,
                    timeout=0.05,
                )

            return asyncio.run(inner())

        [o] = taut.gather([taut.call(sub_agent)], executor=ex, timeout=LONG)
        assert o.ok, o
        assert [i.status for i in o.value] == ["timeout", "not_started"]
        assert ran.runs == []
    finally:
        ex.shutdown(wait=True)


def test_nested_inline_gather_with_interrupt_stops_the_call_on_time() -> None:
    ex = taut.ThreadPoolExecutor(1, thread_name_prefix="nest-intr")
    try:

        def spin() -> None:
            end = time.monotonic() + LONG
            while time.monotonic() < end:
                time.sleep(0.005)

        def sub_agent() -> tuple[list[Outcome], float]:
            t0 = time.monotonic()
            inner = taut.gather([taut.call(spin)], executor=ex, timeout=0.1, interrupt=True)
            return inner, time.monotonic() - t0

        [o] = taut.gather([taut.call(sub_agent)], executor=ex, timeout=LONG)
        assert o.ok, o
        inner, took = o.value
        assert [i.status for i in inner] == ["timeout"]
        assert took < LONG / 4
    finally:
        ex.shutdown(wait=True)


def test_the_function_and_the_package_are_both_reachable() -> None:
    import importlib

    from taut.gather import Scheduler as SchedulerFromPackage
    from taut.gather import gather as gather_from_package

    package = importlib.import_module("taut.gather")
    assert package.Scheduler is SchedulerFromPackage is taut.Scheduler
    assert taut.gather is gather_from_package  # the attribute is the function
    assert callable(taut.gather) and not isinstance(taut.gather, type(package))
    assert taut.gather([taut.call(abs, -2)])[0].value == 2


def test_a_submit_hook_sees_each_call_and_its_real_start(pool: Any) -> None:
    seen: list[tuple[int, str]] = []
    started: list[int] = []
    gate = threading.Event()

    def submit(executor: Any, job: Submission) -> cf.Future[Any]:
        seen.append((job.index, job.call_id))
        job.on_start(lambda: started.append(job.index))
        return executor.submit(job.runnable())

    handles = [taut.call(gate.wait, LONG, call_id="blocker"), taut.call(abs, -1, call_id="fenced")]
    outcomes = taut.gather(handles, timeout=0.2, max_parallel=1, executor=pool, submit=submit)
    gate.set()
    assert seen == [(0, "blocker")]  # the second call was never handed over
    assert started == [0]
    assert [o.status for o in outcomes] == ["timeout", "not_started"]


@pytest.mark.parametrize("factory", [taut.ThreadPoolExecutor, cf.ThreadPoolExecutor])
def test_a_local_call_sees_the_batch_deadline_through_remaining(factory: Any) -> None:
    # As a call on a Dask worker does (test_gather_remote): taut.remaining()
    # inside the call, and a gather nested in it ends by the outer deadline.
    def nested_timeout() -> float | None:
        [inner] = taut.gather([taut.call(taut.remaining)])
        assert inner.status == "ok"
        return inner.value  # type: ignore[no-any-return]

    with factory(2) as ex:
        bounded = taut.gather(
            [taut.call(taut.remaining), taut.call(nested_timeout)], executor=ex, timeout=60
        )
        [unbounded] = taut.gather([taut.call(taut.remaining)], executor=ex)
    for outcome in bounded:
        assert outcome.status == "ok"
        assert 0 < outcome.value <= 60
    assert unbounded.status == "ok" and unbounded.value is None


@pytest.mark.parametrize(
    ("status", "error", "shown"),
    [
        ("bogus", ValueError, "'bogus' (str)"),
        ("OK", ValueError, "'OK' (str)"),
        ("pending", ValueError, "'pending' (str)"),  # a journal slot's state, not an outcome
        (None, TypeError, "None (NoneType)"),
        (1, TypeError, "1 (int)"),
    ],
)
def test_an_outcome_status_outside_its_set_is_refused(status: Any, error: type, shown: str) -> None:
    # Before: accepted; .ok was False, .cacheable False, and unwrap() raised
    # CancelledError("call 'x' bogus") as if the call had been cancelled.
    rule = "status must be one of 'ok', 'error', 'timeout', 'not_started', 'cancelled'"
    with pytest.raises(error, match="^" + re.escape(f"{rule}, got {shown}")):
        Outcome("x", status)


def test_every_documented_outcome_status_is_accepted() -> None:
    for status in ("ok", "error", "timeout", "not_started", "cancelled"):
        assert Outcome("x", status).status == status


def test_an_error_outcome_without_its_error_unwraps_to_an_error_not_a_cancellation() -> None:
    # Before: CancelledError("call 'x' error"), as if the call had never run;
    # `except CancelledError` code then took a failed call for a cancelled one.
    with pytest.raises(RuntimeError, match="call 'x' failed, and its outcome holds no error"):
        Outcome("x", "error").unwrap()
    with pytest.raises(cf.CancelledError):
        Outcome("x", "cancelled").unwrap()


class _SlottedJournal:
    """A third-party journal that cannot be weakly referenced (``__slots__``
    without ``__weakref__``) and returns plain lists: taut counts its slots
    for it, by the object's id."""

    __slots__ = ("positions",)

    def __init__(self) -> None:
        self.positions: list[int] = []

    def reserve(self, call_ids: Sequence[str]) -> list[Record | None]:
        return [None] * len(call_ids)

    def complete(
        self, position: int, call_id: str, status: str, value: object, error: BaseException | None
    ) -> None:
        self.positions.append(position)


def test_a_new_journal_that_cannot_be_weakly_referenced_starts_at_slot_0() -> None:
    # A new journal object counts its slots from 0 (a rerun walks them from
    # there). One that cannot be weakly referenced was counted by its id, and
    # a new object given the id of one gone (CPython reuses addresses) went on
    # from the old one's count: its slots were 2 and 3, and a rerun of the
    # program found its outcomes nowhere.
    for _ in range(50):
        journal = _SlottedJournal()
        taut.gather([taut.call(abs, -1), taut.call(abs, -2)], journal=journal)
        assert sorted(journal.positions) == [0, 1]
        del journal
