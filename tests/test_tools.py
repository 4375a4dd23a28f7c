"""taut.ToolRunner: bounded parallel tool calls with queue notices (docs/CONTRACTS.md)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import taut
from taut import QueueNotice, ToolCall, ToolRunner

pytestmark = pytest.mark.timeout(60)

LONG = 20.0


class Gauge:
    """Counts calls running at once; lets a test wait for an exact count."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.active = 0
        self.peak = 0
        self.order: list[Any] = []

    def enter(self, tag: Any = None) -> None:
        with self.cond:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.order.append(tag)
            self.cond.notify_all()

    def leave(self) -> None:
        with self.cond:
            self.active -= 1
            self.cond.notify_all()

    def wait_active(self, n: int) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.active == n, LONG), self.active


@pytest.fixture
def runners() -> Iterator[list[ToolRunner]]:
    made: list[ToolRunner] = []
    yield made
    for r in made:
        r.shutdown(wait=False)


def make(runners: list[ToolRunner], *args: Any, **kwargs: Any) -> ToolRunner:
    kwargs.setdefault("concurrent_batch_timeout", LONG)
    r = ToolRunner(*args, **kwargs)
    runners.append(r)
    return r


def blocking_reads(gauge: Gauge, latch: threading.Event, n: int) -> list[ToolCall]:
    def read(i: int) -> str:
        gauge.enter(i)
        try:
            assert latch.wait(LONG)
            return f"result {i}"
        finally:
            gauge.leave()

    return [ToolCall("read", read, {"i": i}, read_only=True, call_id=f"call-{i}") for i in range(5)]


def run_in_thread(fn: Any, *args: Any, **kwargs: Any) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []

    def target() -> None:
        box.append(fn(*args, **kwargs))

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, box


def test_two_workers_run_at_most_two_of_five_and_keep_order(runners: list[ToolRunner]) -> None:
    runner = make(runners, 2)
    gauge, latch = Gauge(), threading.Event()
    t, box = run_in_thread(runner.run, blocking_reads(gauge, latch, 5))
    gauge.wait_active(2)
    time.sleep(0.1)  # room for a third call to start, if the ceiling leaked
    assert gauge.active == 2
    assert runner.executor.stats().queued == 3
    latch.set()
    t.join(LONG)
    results = box[0]
    assert gauge.peak == 2
    assert [r.call_id for r in results] == [f"call-{i}" for i in range(5)]
    assert [r.text for r in results] == [f"result {i}" for i in range(5)]
    assert all(r.status == "ok" and not r.is_error for r in results)


def test_without_a_ceiling_all_five_run_at_once(runners: list[ToolRunner]) -> None:
    runner = make(runners, 0)
    assert runner.tool_workers == 0
    barrier = threading.Barrier(5, timeout=LONG)

    def read(i: int) -> int:
        barrier.wait()  # only passes if all five run at the same time
        return i

    results = runner.run([ToolCall("read", read, {"i": i}, read_only=True) for i in range(5)])
    assert [r.value for r in results] == [0, 1, 2, 3, 4]
    assert [r.call_id for r in results] == [f"call_{i}" for i in range(5)]


def test_one_worker_and_a_tool_that_starts_a_nested_batch_completes(
    runners: list[ToolRunner],
) -> None:
    runner = make(runners, 1)

    def leaf(i: int) -> str:
        return f"{threading.current_thread().name}:{i}"

    def sub_agent() -> str:
        inner = runner.run([ToolCall("leaf", leaf, {"i": i}, read_only=True) for i in range(3)])
        return ",".join(r.text for r in inner)

    results = runner.run(
        [ToolCall("sub_agent", sub_agent, read_only=True), ToolCall("leaf", leaf, {"i": 9})]
    )
    assert [r.status for r in results] == ["ok", "ok"]
    worker = results[0].text.split(":")[0]
    assert worker.startswith("agent-tool-worker_")
    assert results[0].text == ",".join(f"{worker}:{i}" for i in range(3))


def test_worker_threads_are_named_and_daemon(runners: list[ToolRunner]) -> None:
    runner = make(runners, 3)

    def who() -> tuple[str, bool]:
        t = threading.current_thread()
        return t.name, t.daemon

    [r] = runner.run([ToolCall("who", who, read_only=True)])
    name, daemon = r.value
    assert name.startswith("agent-tool-worker_") and name.split("_")[-1].isdigit()
    assert daemon


def test_max_agents_of_planning_constraints_sets_the_ceiling(runners: list[ToolRunner]) -> None:
    constraints = _planning_constraints(max_agents=2)
    runner = make(runners, constraints=constraints)
    assert runner.tool_workers == 2
    gauge, latch = Gauge(), threading.Event()
    t, box = run_in_thread(runner.run, blocking_reads(gauge, latch, 5))
    gauge.wait_active(2)
    time.sleep(0.1)
    assert gauge.active == 2
    latch.set()
    t.join(LONG)
    assert gauge.peak == 2 and len(box[0]) == 5
    # a hard limit only lowers an explicit ceiling
    assert make(runners, 5, constraints=constraints).tool_workers == 2
    assert make(runners, 1, constraints=constraints).tool_workers == 1


def _planning_constraints(max_agents: int) -> Any:
    try:
        from taut.constraints import PlanningConstraints  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # until the constraints module lands, the same shape

        class PlanningConstraints:  # type: ignore[no-redef]
            def __init__(self, max_agents: int) -> None:
                self.max_agents = max_agents

    return PlanningConstraints(max_agents=max_agents)


def test_many_calls_beyond_the_ceiling_are_never_refused(runners: list[ToolRunner]) -> None:
    runner = make(runners, 2)
    results = runner.run([ToolCall("n", lambda i=i: i * 2, read_only=True) for i in range(60)])
    assert [r.value for r in results] == [i * 2 for i in range(60)]


def test_set_tool_workers_changes_the_ceiling(runners: list[ToolRunner]) -> None:
    runner = make(runners, 1)
    runner.set_tool_workers(0)
    barrier = threading.Barrier(4, timeout=LONG)
    results = runner.run([ToolCall("b", barrier.wait, read_only=True) for _ in range(4)])
    assert sorted(r.value for r in results) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match=r"tool_workers must be an int >= 0.*got -1"):
        runner.set_tool_workers(-1)


# ------------------------------------------------------------- notices


def test_queue_notices_start_at_one_update_and_clear(runners: list[ToolRunner]) -> None:
    notices: list[QueueNotice] = []
    lock = threading.Lock()

    def on_notice(n: QueueNotice) -> None:
        with lock:
            notices.append(n)

    runner = make(runners, 1, on_notice=on_notice)
    gauge, latch = Gauge(), threading.Event()
    t, box = run_in_thread(runner.run, blocking_reads(gauge, latch, 3)[:3])
    gauge.wait_active(1)
    deadline = time.monotonic() + LONG
    while len(notices) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    latch.set()
    t.join(LONG)
    assert [r.status for r in box[0]] == ["ok"] * 3
    by_call: dict[str, list[tuple[str, Any, str]]] = {}
    for n in notices:
        by_call.setdefault(n.call_id, []).append((n.kind, n.position, n.text))
    assert "call-0" not in by_call  # it started at once: no notice
    assert by_call["call-1"] == [
        ("waiting", 1, "Waiting for a free worker - position 1"),
        ("started", None, ""),
    ]
    assert by_call["call-2"] == [
        ("waiting", 2, "Waiting for a free worker - position 2"),
        ("position", 1, "Waiting for a free worker - position 1"),
        ("started", None, ""),
    ]
    assert all(n.clears == (n.kind == "started") for n in notices)


def test_german_notice_text(runners: list[ToolRunner]) -> None:
    notices: list[QueueNotice] = []
    runner = make(runners, 1, language="de")
    gauge, latch = Gauge(), threading.Event()
    t, _ = run_in_thread(runner.run, blocking_reads(gauge, latch, 2)[:2], on_notice=notices.append)
    gauge.wait_active(1)
    deadline = time.monotonic() + LONG
    while not notices and time.monotonic() < deadline:
        time.sleep(0.005)
    latch.set()
    t.join(LONG)
    assert notices[0].text == "Warte auf einen freien Bearbeiter - Position 1"


def test_a_failing_notice_callback_does_not_break_the_batch(runners: list[ToolRunner]) -> None:
    def bad(n: QueueNotice) -> None:
        raise RuntimeError("ui gone")

    runner = make(runners, 1, on_notice=bad)
    results = runner.run([ToolCall("s", lambda: time.sleep(0.01), read_only=True)] * 3)
    assert [r.status for r in results] == ["ok"] * 3


# ------------------------------------------------------------- deadlines, errors


def test_a_hung_tool_becomes_a_timeout_result_distinct_from_errors(
    runners: list[ToolRunner],
) -> None:
    runner = make(runners, 2, concurrent_batch_timeout=0.2)
    latch = threading.Event()

    def fail() -> None:
        raise RuntimeError("tool failed")

    try:
        t0 = time.monotonic()
        results = runner.run(
            [
                ToolCall("hang", latch.wait, {"timeout": LONG}, read_only=True),
                ToolCall("fail", fail, read_only=True),
                ToolCall("ok", lambda: "fine", read_only=True),
            ]
        )
        assert time.monotonic() - t0 < LONG / 2
        hang, err, ok = results
        assert hang.status == "timeout" and hang.timed_out and hang.is_error and hang.started
        assert hang.text == "Error executing tool 'hang': timed out after 0.2s"
        assert err.status == "error" and not err.timed_out
        assert err.text == "Error executing tool 'fail': tool failed"
        assert isinstance(err.error, RuntimeError)
        assert ok.text == "fine"
        # the hung worker was abandoned: the pool keeps its two workers
        assert runner.executor.stats().abandoned == 1
        assert runner.run([ToolCall("x", lambda: 1, read_only=True)] * 2)[1].value == 1
    finally:
        latch.set()


def test_calls_that_never_got_a_worker_time_out_as_not_started(
    runners: list[ToolRunner],
) -> None:
    notices: list[QueueNotice] = []
    runner = make(runners, 1, concurrent_batch_timeout=0.2, on_notice=notices.append)
    latch = threading.Event()
    ran: list[str] = []
    try:
        results = runner.run(
            [
                ToolCall("hang", latch.wait, {"timeout": LONG}, read_only=True),
                ToolCall("late", lambda: ran.append("late"), read_only=True),
            ]
        )
        assert [r.status for r in results] == ["timeout", "timeout"]
        assert results[0].started and not results[1].started
        assert results[1].text.startswith("Error executing tool 'late': timed out after 0.2s")
        assert [n.kind for n in notices] == ["waiting", "dropped"]
        latch.set()
        time.sleep(0.1)
        assert ran == []
    finally:
        latch.set()


def test_other_calls_run_one_after_another_with_a_per_call_deadline(
    runners: list[ToolRunner],
) -> None:
    runner = make(runners, 4, concurrent_batch_timeout=LONG, sequential_call_timeout=0.2)
    gauge = Gauge()
    latch = threading.Event()

    def write(i: int) -> int:
        gauge.enter(i)
        try:
            time.sleep(0.01)
            return i
        finally:
            gauge.leave()

    def stuck() -> None:
        latch.wait(LONG)

    try:
        results = runner.run(
            [
                ToolCall("write", write, {"i": 0}),
                ToolCall("stuck", stuck),
                ToolCall("write", write, {"i": 2}),
                ToolCall("read", write, {"i": 3}, read_only=True),
                ToolCall("read", write, {"i": 4}, read_only=True),
                ToolCall("write", write, {"i": 5}),
            ]
        )
        assert [r.status for r in results] == ["ok", "timeout", "ok", "ok", "ok", "ok"]
        assert results[1].text == "Error executing tool 'stuck': timed out after 0.2s"
        assert gauge.order[:2] == [0, 2] and gauge.order[-1] == 5
        assert sorted(gauge.order[2:4]) == [3, 4]
    finally:
        latch.set()


def test_default_deadlines_and_overrides(
    runners: list[ToolRunner], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TAUT_CONFIG", raising=False)
    monkeypatch.delenv("TAUT_CONCURRENT_TOOL_TIMEOUT_S", raising=False)
    r = ToolRunner(1)
    runners.append(r)
    assert r.batch_timeout() == 420.0 and r.sequential_timeout() == 420.0
    r2 = make(runners, 1, concurrent_batch_timeout=30, sequential_call_timeout=None)
    assert r2.batch_timeout() == 30.0 and r2.sequential_timeout() is None
    r3 = make(runners, 1, concurrent_batch_timeout=12.5)
    assert r3.sequential_timeout() == 12.5


def test_run_timeout_override_bounds_the_batch(runners: list[ToolRunner]) -> None:
    runner = make(runners, 1)
    latch = threading.Event()
    try:
        [r] = runner.run([ToolCall("hang", latch.wait, {"timeout": LONG})], timeout=0.1)
        assert r.text == "Error executing tool 'hang': timed out after 0.1s"
    finally:
        latch.set()


def test_base_exceptions_propagate_out_of_the_batch(runners: list[ToolRunner]) -> None:
    runner = make(runners, 2)

    def stop() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.run([ToolCall("stop", stop, read_only=True)])


def test_validation_messages(runners: list[ToolRunner]) -> None:
    with pytest.raises(ValueError, match=r"tool_workers must be an int >= 0.*got True \(bool\)"):
        ToolRunner(True)
    with pytest.raises(ValueError, match="language must be one of"):
        ToolRunner(1, language="fr")
    with pytest.raises(TypeError, match=r"timeout must be a number of seconds or None, got 'x'"):
        ToolRunner(1, concurrent_batch_timeout="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"arguments must be a mapping"):
        ToolCall("t", print, [1])  # type: ignore[arg-type]
    runner = make(runners, 1)
    with pytest.raises(TypeError, match=r"calls\[0\] must be a taut.ToolCall"):
        runner.run([print])  # type: ignore[list-item]


def test_public_names() -> None:
    assert taut.ToolRunner is ToolRunner and taut.ToolCall is ToolCall
