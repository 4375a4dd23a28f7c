"""taut.ToolRunner: bounded parallel tool calls with queue notices (docs/CONTRACTS.md)."""

from __future__ import annotations

import enum
import gc
import re
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
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


def timed_out_after(text: str, tool: str, timeout: float) -> bool:
    """True when ``text`` says ``tool`` timed out after what was left of a
    run ``timeout`` when its group started: more than nothing and at most
    ``timeout`` as shown. The group starts moments after ``run()``, later on
    a busy machine, so the exact figure is not fixed (``_seconds_text``'s
    rounding is tested exactly on its own)."""
    prefix = f"Error executing tool {tool!r}: timed out after "
    if not (text.startswith(prefix) and text.endswith("s")):
        return False
    shown = float(text[len(prefix) : -1])
    return 0 < shown <= round(timeout, 2)


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


def _assert_runs_two_at_a_time(runner: ToolRunner) -> None:
    """Five blocking reads: two run at once, never more, and all five end."""
    gauge, latch = Gauge(), threading.Event()
    t, box = run_in_thread(runner.run, blocking_reads(gauge, latch, 5))
    gauge.wait_active(2)
    time.sleep(0.1)
    assert gauge.active == 2
    latch.set()
    t.join(LONG)
    assert gauge.peak == 2 and len(box[0]) == 5


def test_max_agents_of_planning_constraints_sets_the_ceiling(runners: list[ToolRunner]) -> None:
    constraints = _planning_constraints(max_agents=2)
    runner = make(runners, constraints=constraints)
    assert runner.tool_workers == 2
    _assert_runs_two_at_a_time(runner)
    # a hard limit only lowers an explicit ceiling
    assert make(runners, 5, constraints=constraints).tool_workers == 2
    assert make(runners, 1, constraints=constraints).tool_workers == 1


def test_set_tool_workers_keeps_the_max_agents_of_the_constraints(
    runners: list[ToolRunner],
) -> None:
    # Before: set_tool_workers(10), or 0 for no ceiling, lifted the ceiling
    # past max_agents=2, which the constructor holds as a hard limit: all
    # five calls ran at once.
    runner = make(runners, constraints=_planning_constraints(max_agents=2))
    runner.set_tool_workers(0)
    assert runner.tool_workers == 2
    runner.set_tool_workers(1)
    assert runner.tool_workers == 1  # lowering still works
    runner.set_tool_workers(10)
    assert runner.tool_workers == 2
    _assert_runs_two_at_a_time(runner)


def _planning_constraints(max_agents: int) -> Any:
    from taut.constraints import PlanningConstraints

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
    with pytest.raises(ValueError, match=r"tool_workers must be an integer >= 0.*got -1"):
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
    assert notices[0].text.startswith("Warte auf einen freien Bearbeiter - Position ")


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
        assert timed_out_after(r.text, "hang", 0.1), r.text
    finally:
        latch.set()


def test_base_exceptions_propagate_out_of_the_batch(runners: list[ToolRunner]) -> None:
    runner = make(runners, 2)

    def stop() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.run([ToolCall("stop", stop, read_only=True)])


def test_validation_messages(runners: list[ToolRunner]) -> None:
    with pytest.raises(TypeError, match=r"tool_workers must be an integer, got True \(bool\)"):
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


@pytest.mark.parametrize(
    ("make_it", "match"),
    [
        # read_only="no" is truthy: the call ran in parallel with its neighbours.
        (lambda: ToolCall("t", print, read_only="no"), r"read_only must be a bool, got 'no' "),
        (lambda: ToolCall("t", print, read_only=None), r"read_only must be a bool, got None"),
        # A result's call_id goes back to the model as tool_call_id.
        (lambda: ToolCall("t", print, call_id=5), r"call_id must be a str or None, got 5 \(int\)"),
        # These three were accepted: a notice failed later (logged each time),
        # constraints=5 was ignored, interrupt="yes" taken as true.
        (lambda: ToolRunner(1, on_notice=5), r"on_notice must be a callable or None, got 5 "),
        (lambda: ToolRunner(1, constraints=5), r"constraints must .*max_agents.*got 5 \(int\)"),
        (lambda: ToolRunner(1, interrupt="yes"), r"interrupt must be a bool, got 'yes' \(str\)"),
        # These raised TypeError "unhashable type: 'list'" and the text's own
        # RuntimeError from __hash__, naming no parameter.
        (lambda: ToolRunner(1, language=["en"]), r"^language must be 'en' or 'de', got \['en'\] "),
        (lambda: ToolRunner(1, language=None), r"^language must be 'en' or 'de', got None "),
    ],
)
def test_hostile_tool_arguments_are_refused_naming_them(make_it: Any, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        make_it()


class _Tool(str, enum.Enum):
    SEARCH = "search"


class _UnformattableText(str):
    def __format__(self, spec: str) -> str:
        raise RuntimeError("no format")


def test_a_tool_named_by_a_str_enum_is_shown_by_its_text(runners: list[ToolRunner]) -> None:
    # Before (Python 3.11+, where format() of a (str, Enum) member gives its
    # enum name): the model read "Error executing tool 'Tool.SEARCH': ...",
    # a tool it does not know; the result carried the enum member as name.
    def search() -> str:
        raise ValueError("no network")

    (result,) = make(runners, 1).run([ToolCall(_Tool.SEARCH, search, call_id=_Tool.SEARCH)])
    assert result.text == "Error executing tool 'search': no network"
    assert type(result.name) is str and type(result.call_id) is str
    assert (result.name, result.call_id) == ("search", "search")


def test_a_name_whose_format_raises_does_not_lose_the_batch(runners: list[ToolRunner]) -> None:
    # Before: its __format__ raised while the results were made, after every
    # tool had run: run() raised RuntimeError and the results were lost.
    ran: list[str] = []
    calls = [
        ToolCall(_UnformattableText("odd"), lambda: 1 / 0, call_id=_UnformattableText("c1")),
        ToolCall("save", lambda: ran.append("saved") or "saved"),
    ]
    odd, saved = make(runners, 1).run(calls)
    assert odd.text == "Error executing tool 'odd': division by zero"
    assert (saved.status, ran) == ("ok", ["saved"])


def test_an_empty_name_is_a_value_error() -> None:
    # Before: TypeError, though "" is a str (the right type, a wrong value).
    with pytest.raises(ValueError, match=r"^name must be a non-empty str, got '' \(str\)$"):
        ToolCall("", print)
    with pytest.raises(TypeError, match=r"^name must be a non-empty str, got None "):
        ToolCall(None, print)  # type: ignore[arg-type]


class _ClaimsToBeStr:
    """Not a str, though its ``__class__`` says so (isinstance() believes it)."""

    __class__ = property(lambda self: str)  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "<claims str>"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: ToolCall(_ClaimsToBeStr(), print),
            r"^name must be a non-empty str, got <claims str> ",
        ),
        (
            lambda: ToolCall("t", print, call_id=_ClaimsToBeStr()),
            r"^call_id must be a str or None, got <claims str> ",
        ),
        (
            lambda: ToolRunner(1, language=_ClaimsToBeStr()),
            r"^language must be 'en' or 'de', got <claims str> ",
        ),
    ],
)
def test_a_value_that_only_claims_to_be_a_str_is_refused_by_name(make, message) -> None:
    # Before: isinstance() let it through, and str.__str__ then failed with
    # "descriptor '__str__' requires a 'str' object", naming no parameter.
    with pytest.raises(TypeError, match=message):
        make()


def test_an_empty_call_id_is_refused() -> None:
    # Before: one call with call_id="" came back as "call_0", an id the model
    # never gave; two such calls were refused as one id given twice.
    with pytest.raises(ValueError, match=r"^call_id must be a non-empty str or None, got '' "):
        ToolCall("t", print, call_id="")


class _UnhashableText(str):
    def __hash__(self) -> int:
        raise RuntimeError("no hash")


def test_a_language_given_as_a_str_subclass_is_read_as_its_text(
    runners: list[ToolRunner],
) -> None:
    # Before: its __hash__ ran in the lookup of the texts and its
    # RuntimeError came out of the constructor.
    notices: list[QueueNotice] = []
    runner = make(runners, 1, language=_UnhashableText("de"), on_notice=notices.append)
    gate = threading.Event()
    calls = [
        ToolCall("hold", gate.wait, {"timeout": LONG}, read_only=True),
        ToolCall("next", lambda: "ran", read_only=True, call_id="c1"),
    ]

    def open_gate(n: QueueNotice) -> None:
        notices.append(n)
        gate.set()

    runner.run(calls, on_notice=open_gate)
    assert notices[0].text == "Warte auf einen freien Bearbeiter - Position 1"
    with pytest.raises(ValueError, match=r"^language must be one of \['de', 'en'\], got 'fr'$"):
        ToolRunner(1, language=_UnhashableText("fr"))


def test_run_refuses_a_hostile_batch_or_notice_callback(runners: list[ToolRunner]) -> None:
    runner = make(runners, 1)
    ran: list[int] = []
    call = ToolCall("t", lambda: ran.append(1))
    with pytest.raises(TypeError, match=r"on_notice must be a callable or None, got 5 \(int\)"):
        runner.run([call], on_notice=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"calls must be an iterable of taut\.ToolCall"):
        runner.run(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"calls must be an iterable of taut\.ToolCall"):
        runner.run(call)  # type: ignore[arg-type]
    twice = [
        ToolCall("t", lambda: ran.append(1), call_id="c1"),
        ToolCall("t", lambda: ran.append(2), call_id="c2"),
        ToolCall("t", lambda: ran.append(3), call_id="c1"),
    ]
    with pytest.raises(
        ValueError,
        match=r"^calls\[2\]\.call_id must be unique in the batch, got 'c1', "
        r"the id of calls\[0\] too$",
    ):
        runner.run(twice)
    assert ran == []  # refused before anything ran


class _UnreadableArguments(Mapping[str, Any]):
    """A mapping whose own code raises when it is read."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("cannot read")

    def __iter__(self) -> Iterator[str]:
        return iter(["x"])

    def __len__(self) -> int:
        return 1


@pytest.mark.parametrize("value", ["abc-123", 42, ""])
def test_a_tool_parameter_named_call_id_gets_its_argument(
    runners: list[ToolRunner], value: Any
) -> None:
    # Run as fn(**arguments): the argument call_id is the tool's, not taken as
    # the gather handle's id (the tool failed "missing 1 required positional
    # argument: 'call_id'", or the batch raised TypeError for a non-str value).
    runner = make(runners, 2)

    def lookup(call_id: Any, query: str = "") -> tuple[Any, str]:
        return call_id, query

    (result,) = runner.run(
        [ToolCall("lookup", lookup, {"call_id": value, "query": "q"}, read_only=True, call_id="m1")]
    )
    assert (result.call_id, result.status, result.value) == ("m1", "ok", (value, "q"))


def test_a_tool_taking_keywords_sees_every_argument(runners: list[ToolRunner]) -> None:
    runner = make(runners, 2)

    def tool(**kwargs: Any) -> dict[str, Any]:
        return kwargs

    # call_id and self were keywords of Scheduler.call itself; fn and func of
    # the layers under it.
    arguments = {"call_id": "X", "self": 1, "fn": 2, "func": 3, "a": 4}
    (result,) = runner.run([ToolCall("tool", tool, arguments)])
    assert (result.call_id, result.status, result.value) == ("call_0", "ok", arguments)


def test_parallel_calls_may_pass_the_same_call_id_argument(runners: list[ToolRunner]) -> None:
    # Refused as "call ids must be unique in a gather" when the argument was
    # taken as the handle's id.
    runner = make(runners, 2)
    calls = [
        ToolCall("lookup", lambda call_id: call_id, {"call_id": "same"}, read_only=True)
        for _ in range(2)
    ]
    results = runner.run(calls)
    assert [(r.call_id, r.status, r.value) for r in results] == [
        ("call_0", "ok", "same"),
        ("call_1", "ok", "same"),
    ]


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        (
            {5: "x"},
            TypeError,
            r"^calls\[1\]\.arguments keys must be str \(the tool is called as "
            r"fn\(\*\*arguments\)\), got 5 \(int\)$",
        ),
        (
            {"h": taut.call(print)},
            taut.GatherRejected,
            r"^calls\[1\]\.arguments\['h'\] holds a taut handle, got <taut\.Call .*\(Call\); ",
        ),
        (
            {"hs": [1, taut.call(print)]},
            taut.GatherRejected,
            r"^calls\[1\]\.arguments\['hs'\] holds a taut handle, got \[1, <taut\.Call ",
        ),
        (
            _UnreadableArguments(),
            TypeError,
            r"^calls\[1\]\.arguments must be a readable mapping, got .*\(_UnreadableArguments\)$",
        ),
    ],
    ids=["non-str key", "a handle", "a handle in a list", "unreadable mapping"],
)
def test_bad_arguments_of_a_later_call_are_refused_before_any_call_runs(
    runners: list[ToolRunner], arguments: Any, error: type[BaseException], match: str
) -> None:
    # The first call (a write) ran and the batch raised at the second: the
    # side effect happened and its result was lost.
    runner = make(runners, 2)
    written: list[str] = []

    def write(text: str) -> str:
        written.append(text)
        return "saved"

    calls = [
        ToolCall("write", write, {"text": "note"}, call_id="w"),
        ToolCall("lookup", _echo, arguments, call_id="bad"),
    ]
    with pytest.raises(error, match=match):
        runner.run(calls)
    assert written == []


def test_public_names() -> None:
    assert taut.ToolRunner is ToolRunner and taut.ToolCall is ToolCall


# ------------------------------------------------------------- effective deadlines


def test_the_timeout_text_shows_the_effective_timeout_rounded(runners: list[ToolRunner]) -> None:
    runner = make(runners, 1)
    latch = threading.Event()
    try:
        # What a live budget hands over: never a round number.
        [r] = runner.run([ToolCall("hang", latch.wait, {"timeout": LONG})], timeout=0.2999873)
        assert timed_out_after(r.text, "hang", 0.2999873), r.text
    finally:
        latch.set()
    from taut.tools import _seconds_text

    assert _seconds_text(420) == "420.0s"
    assert _seconds_text(4.999987320999992) == "5.0s"
    assert _seconds_text(1.2) == "1.2s"
    assert _seconds_text(0.25) == "0.25s"
    assert _seconds_text(0.05) == "0.05s"
    assert _seconds_text(0.0) == "0.0s"


def test_a_live_budget_passed_as_the_run_timeout(runners: list[ToolRunner]) -> None:
    budget = taut.PlanningConstraints(time_budget=0.3).start()
    runner = make(runners, 2)
    latch = threading.Event()
    try:
        t0 = time.monotonic()
        [r] = runner.run(
            [ToolCall("hang", latch.wait, {"timeout": LONG}, read_only=True)],
            timeout=budget.remaining(),
        )
        assert time.monotonic() - t0 < LONG / 2
        assert r.timed_out and timed_out_after(r.text, "hang", 0.3), r.text
    finally:
        latch.set()


def test_a_run_timeout_never_lengthens_the_configured_deadline(runners: list[ToolRunner]) -> None:
    # Before: run(timeout=...) replaced the configured deadline, so a long
    # budget let a hung tool run far past tools.concurrent_batch.
    runner = make(runners, 2, concurrent_batch_timeout=0.2, sequential_call_timeout=0.2)
    latch = threading.Event()
    try:
        t0 = time.monotonic()
        results = runner.run(
            [
                ToolCall("hang", latch.wait, {"timeout": LONG}, read_only=True),
                ToolCall("stuck", latch.wait, {"timeout": LONG}),
            ],
            timeout=LONG * 10,
        )
        assert time.monotonic() - t0 < LONG / 2
        assert [r.text for r in results] == [
            "Error executing tool 'hang': timed out after 0.2s",
            "Error executing tool 'stuck': timed out after 0.2s",
        ]
    finally:
        latch.set()


def test_a_run_timeout_bounds_the_whole_batch_not_each_group(runners: list[ToolRunner]) -> None:
    # Two calls that run one after another: the run's deadline is shared, so the
    # second gets only what the first left (here nothing), not a fresh timeout.
    runner = make(runners, 2, sequential_call_timeout=LONG)
    latch = threading.Event()
    ran: list[str] = []
    try:
        t0 = time.monotonic()
        first, second = runner.run(
            [
                ToolCall("stuck", latch.wait, {"timeout": LONG}),
                ToolCall("late", lambda: ran.append("late")),
            ],
            timeout=0.3,
        )
        assert time.monotonic() - t0 < LONG / 2
        assert first.timed_out and first.started
        assert second.timed_out and not second.started and ran == []
        assert second.text == (
            "Error executing tool 'late': timed out after 0.0s "
            "(the deadline had passed before it could start)"
        )
    finally:
        latch.set()


def test_an_enclosing_deadline_scope_bounds_the_batch(runners: list[ToolRunner]) -> None:
    runner = make(runners, 2)  # configured deadline LONG
    latch = threading.Event()
    try:
        t0 = time.monotonic()
        with taut.move_on_after(0.25):
            [r] = runner.run([ToolCall("hang", latch.wait, {"timeout": LONG}, read_only=True)])
        assert time.monotonic() - t0 < LONG / 2
        assert r.timed_out and r.text.startswith("Error executing tool 'hang': timed out after 0.")
        # the scope's remaining time when the batch started: at most its 0.25 s
        assert 0 < float(r.text.rsplit(" ", 1)[1].rstrip("s")) <= 0.25
    finally:
        latch.set()


def test_earliest_of_all_deadlines() -> None:
    from taut.tools import _earliest

    assert _earliest(None, None, None) is None
    assert _earliest(420.0, None, 5.0) == 5.0
    assert _earliest(None, 3.0, None) == 3.0
    assert _earliest(0.2, 30.0, 10.0) == 0.2
    assert _earliest(10.0, -1.5) == 0.0  # a run deadline already past


# ------------------------------------------------------------- defaults


def test_no_config_means_a_bounded_default_ceiling(
    runners: list[ToolRunner], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TAUT_CONFIG", raising=False)
    runner = ToolRunner(concurrent_batch_timeout=LONG)
    runners.append(runner)
    assert runner.tool_workers == taut.config.TOOL_WORKERS_DEFAULT == 32
    assert "tool_workers=32" in repr(runner)
    gauge, latch = Gauge(), threading.Event()

    def read(i: int) -> int:
        gauge.enter(i)
        try:
            assert latch.wait(LONG)
            return i
        finally:
            gauge.leave()

    calls = [ToolCall("read", read, {"i": i}, read_only=True) for i in range(34)]
    t, box = run_in_thread(runner.run, calls)
    gauge.wait_active(32)  # a usual batch still runs all at once ...
    time.sleep(0.1)  # room for a 33rd call to start, if the ceiling leaked
    assert gauge.active == 32 and runner.executor.stats().queued == 2  # ... a runaway one does not
    latch.set()
    t.join(LONG)
    assert [r.value for r in box[0]] == list(range(34))
    # 0 still means no ceiling, from the constructor or the config
    assert make(runners, 0).tool_workers == 0
    assert make(runners, config={"capacity": {"tool_workers": 0}}).tool_workers == 0


def test_help_shows_readable_defaults() -> None:
    import pydoc

    from taut.tools import FROM_CONFIG

    text = pydoc.render_doc(ToolRunner, renderer=pydoc.plaintext)
    assert "<object object" not in text
    # Quoted before 3.14; 3.14's deferred annotations render bare.
    assert re.search(r"concurrent_batch_timeout: '?TimeoutSetting'? = <from config>", text)
    assert repr(FROM_CONFIG) == "<from config>"


def test_from_config_can_be_passed_explicitly(
    runners: list[ToolRunner], monkeypatch: pytest.MonkeyPatch
) -> None:
    from taut.tools import FROM_CONFIG

    monkeypatch.delenv("TAUT_CONFIG", raising=False)
    monkeypatch.setenv("TAUT_CONCURRENT_TOOL_TIMEOUT_S", "12")
    r = make(runners, 1, concurrent_batch_timeout=FROM_CONFIG)
    assert r.batch_timeout() == 12.0 and r.sequential_timeout() == 12.0


# ------------------------------------------------------------- the README's agent turn


def test_the_readme_agent_turn_runs_as_documented(capsys: pytest.CaptureFixture[str]) -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    section = readme.split("### An agent turn: `ToolCall` and `ToolRunner`", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(code, "README.md (agent turn)", "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    expected = [line.removeprefix("# ") for line in code.splitlines() if line.startswith("# c")]
    assert (
        printed[-3:]
        == expected
        == [
            "c1 ok 3 results for 'deadlines'",
            "c2 ok <html of https://example.org>",
            "c3 ok saved",
        ]
    )
    assert namespace["notes"] == ["deadlines fire"]
    assert [m["tool_call_id"] for m in namespace["messages"]] == ["c1", "c2", "c3"]


def _echo(x: Any) -> Any:
    return x


def test_default_result_ids_never_repeat_an_id_the_model_gave(runners: list[ToolRunner]) -> None:
    runner = make(runners, 2)
    calls = [
        ToolCall("a", _echo, {"x": "1"}, call_id="call_1"),  # the model's own id
        ToolCall("b", _echo, {"x": "2"}),  # position 1: "call_1" is taken
        ToolCall("c", _echo, {"x": "3"}, call_id="call_1_1"),
        ToolCall("d", _echo, {"x": "4"}),
    ]
    ids = [r.call_id for r in runner.run(calls)]
    assert len(set(ids)) == 4, ids
    assert ids[0] == "call_1" and ids[2] == "call_1_1" and ids[3] == "call_3"


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")


class _UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


class _ExitingText:
    def __str__(self) -> str:
        raise SystemExit("str() of a value")


class _ExitingTextError(Exception):
    def __str__(self) -> str:
        raise SystemExit("str() of an error")


@pytest.mark.parametrize(
    ("value_cls", "error_cls", "raised_by_str"),
    [
        (_Unprintable, _UnprintableError, RuntimeError),
        (_ExitingText, _ExitingTextError, SystemExit),
    ],
    ids=["exception", "system-exit"],
)
def test_one_unprintable_value_or_error_does_not_lose_the_batch(
    runners: list[ToolRunner], value_cls: type, error_cls: type, raised_by_str: type
) -> None:
    # Before, for SystemExit: run() raised it (and a program not catching it
    # exited), the results of every tool lost, though no tool asked to exit:
    # the value's or the error's __str__ raised it.
    value = value_cls()

    def fails() -> None:
        raise error_cls

    odd, raised, fine = make(runners, 2).run(
        [
            ToolCall("odd", lambda: value, read_only=True),
            ToolCall("raises", fails, read_only=True),
            ToolCall("fine", _echo, {"x": "7"}, read_only=True),
        ]
    )
    assert (odd.status, odd.value, type(odd.error)) == ("error", value, raised_by_str)
    assert odd.text == (
        f"Error executing tool 'odd': its result ({value_cls.__name__}) cannot be shown as "
        f"text: str() raised {raised_by_str.__name__}"
    )
    assert (raised.status, raised.text) == (
        "error",
        f"Error executing tool 'raises': {error_cls.__name__}",
    )
    assert (fine.status, fine.value) == ("ok", "7")


def test_waiting_notices_are_cleared_when_a_tool_interrupts_the_batch(
    runners: list[ToolRunner],
) -> None:
    notices: list[QueueNotice] = []
    both_waiting, gate = threading.Event(), threading.Event()

    def note(n: QueueNotice) -> None:
        notices.append(n)
        if {x.call_id for x in notices if x.kind == "waiting"} == {"c1", "c2"}:
            both_waiting.set()

    def interrupts() -> None:
        assert both_waiting.wait(LONG)
        raise KeyboardInterrupt

    runner = make(runners, 1, on_notice=note)  # one worker: c1 and c2 must wait
    calls = [
        ToolCall("ki", interrupts, read_only=True, call_id="c0"),
        ToolCall("hang", gate.wait, {"timeout": LONG}, read_only=True, call_id="c1"),
        ToolCall("never", gate.wait, {"timeout": LONG}, read_only=True, call_id="c2"),
    ]
    try:
        with pytest.raises(KeyboardInterrupt):
            runner.run(calls)
        cleared = {n.call_id for n in notices if n.clears}
    finally:
        gate.set()
    assert cleared == {"c1", "c2"}  # c2 never starts: only "dropped" clears it
    assert ("dropped", "c2") in [(n.kind, n.call_id) for n in notices]


def test_a_waiting_notice_is_cleared_for_a_call_the_shut_down_pool_refused() -> None:
    # A limiter with one slot: the second tool waits for it ("Waiting for a
    # free worker" is shown). The first tool's end comes with the runner
    # shutting down (a gateway stopping): the second is refused, its outcome
    # 'cancelled' (c458bc2). _run_group clears notices only for 'not_started'
    # outcomes, so the waiting notice stays up for good.
    refused = threading.Event()

    class Limiter:
        """One slot; says when a call was refused one."""

        def __init__(self) -> None:
            self.slot = threading.BoundedSemaphore(1)

        def acquire(self, timeout: float | None = None) -> bool:
            got = self.slot.acquire(timeout=timeout)
            if not got:
                refused.set()
            return got

        def release(self) -> None:
            self.slot.release()

    limiter = Limiter()
    notices: list[tuple[str, str]] = []
    runner = taut.ToolRunner(
        2, limiter=limiter, concurrent_batch_timeout=30, sequential_call_timeout=30
    )

    def first() -> str:
        assert refused.wait(30)  # the second call is waiting for the slot
        runner.shutdown(wait=False)
        return "first"

    def second() -> str:
        return "second"

    try:
        results = runner.run(
            [
                taut.ToolCall("first", first, read_only=True),
                taut.ToolCall("second", second, read_only=True),
            ],
            on_notice=lambda n: notices.append((n.kind, n.call_id)),
        )
    finally:
        runner.shutdown(wait=True)
    assert [r.status for r in results] == ["ok", "error"]
    waiting = {cid for kind, cid in notices if kind == "waiting"}
    cleared = {cid for kind, cid in notices if kind in ("started", "dropped")}
    assert waiting, notices  # the second call did wait for the slot
    assert waiting <= cleared, notices


# ------------------------------------------------- large batches, odd tools

_NOTICE_TEXTS = {
    "en": "Waiting for a free worker - position {}",
    "de": "Warte auf einen freien Bearbeiter - Position {}",
}


@pytest.mark.parametrize("language", ["en", "de"])
def test_notices_of_a_large_batch_grow_linearly_and_keep_their_order(
    runners: list[ToolRunner], language: str
) -> None:
    # Each start used to send a new position to every waiting call: about
    # N*N/2 notices for N calls behind one worker (2 million for 2000).
    # Now a call hears each position from 10 down and above that only the
    # round ones it reaches (20, 50, 100, ...): under 20 notices a call.
    n = 2000
    notices: list[QueueNotice] = []
    release = threading.Event()

    def on_notice(notice: QueueNotice) -> None:
        notices.append(notice)  # one worker: notices come from one thread at a time
        if notice.call_id == f"c{n - 1}":
            release.set()  # every call is queued: let the first one finish

    def tool(i: int) -> int:
        if i == 0:
            assert release.wait(LONG)
        return i

    runner = make(runners, 1, on_notice=on_notice, language=language)
    results = runner.run(
        [ToolCall("t", tool, {"i": i}, read_only=True, call_id=f"c{i}") for i in range(n)]
    )
    assert [(r.status, r.value) for r in results] == [("ok", i) for i in range(n)]
    assert len(notices) < 30 * n, len(notices)
    by_call: dict[str, list[QueueNotice]] = {}
    for notice in notices:
        by_call.setdefault(notice.call_id, []).append(notice)
    assert set(by_call) == {f"c{i}" for i in range(1, n)}  # c0 started at once
    for cid, seen in by_call.items():
        kinds = [x.kind for x in seen]
        assert kinds == ["waiting", *["position"] * (len(seen) - 2), "started"], (cid, kinds)
        positions = [x.position for x in seen[:-1]]
        assert positions == sorted(set(positions), reverse=True), (cid, positions)  # type: ignore[type-var]
        assert positions[-1] == 1, (cid, positions)
        assert [x.text for x in seen[:-1]] == [_NOTICE_TEXTS[language].format(p) for p in positions]
    assert [x.position for x in by_call[f"c{n - 1}"][:-1]] == [
        n - 1,
        1000,
        500,
        200,
        100,
        50,
        20,
        *range(10, 0, -1),
    ]


def test_without_a_listener_no_queue_positions_are_tracked(
    runners: list[ToolRunner], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tracking positions nobody reads cost a full batch O(N*N) all the same.
    runner = make(runners, 1)
    tracked: list[object] = []
    real = runner.executor.submit_tracked

    def counting(*args: Any, **kwargs: Any) -> Any:
        tracked.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(runner.executor, "submit_tracked", counting)
    results = runner.run([ToolCall("t", _echo, {"x": i}, read_only=True) for i in range(20)])
    assert [r.value for r in results] == list(range(20))
    assert tracked == []


class _SlowText:
    def __init__(self, release: threading.Event) -> None:
        self.release = release

    def __str__(self) -> str:
        self.release.wait(LONG)
        return "materialised"


@pytest.mark.parametrize("bound", ["run_timeout", "scope", "configured"])
def test_turning_a_result_into_text_is_part_of_the_call_and_its_deadline(
    runners: list[ToolRunner], bound: str
) -> None:
    # str() of the value ran on the caller's thread after the batch, outside
    # every deadline: run(timeout=0.5) returned after the 5 s a lazy value's
    # str() took.
    release = threading.Event()
    configured = {"concurrent_batch_timeout": 0.2} if bound == "configured" else {}
    runner = make(runners, 2, **configured)
    calls = [
        ToolCall("lazy", lambda: _SlowText(release), read_only=True),
        ToolCall("fine", _echo, {"x": 3}, read_only=True),
    ]
    began = time.monotonic()
    try:
        if bound == "scope":
            with taut.move_on_after(0.2):
                results = runner.run(calls)
        else:
            results = runner.run(calls, timeout=0.2 if bound == "run_timeout" else None)
        took = time.monotonic() - began
    finally:
        release.set()
    assert took < 5.0, took  # against 20 s of str()
    lazy, fine = results
    assert (lazy.status, lazy.started) == ("timeout", True)
    assert timed_out_after(lazy.text, "lazy", 0.2), lazy.text
    assert (fine.status, fine.text) == ("ok", "3")


def test_a_value_turned_into_text_is_kept_as_the_value(runners: list[ToolRunner]) -> None:
    release = threading.Event()
    release.set()
    value = _SlowText(release)
    (result,) = make(runners, 1).run([ToolCall("v", lambda: value)])
    assert (result.status, result.text, result.value) == ("ok", "materialised", value)


def _gen(q: str) -> Iterator[str]:
    yield q


async def _agen(q: str) -> Any:
    yield q


class _GenCall:
    def __call__(self, q: str) -> Iterator[str]:
        yield q


@pytest.mark.parametrize("fn", [_gen, _agen, _GenCall(), lambda q: _gen(q)])
def test_generator_tools_are_refused_not_reported_ok_unrun(
    runners: list[ToolRunner], fn: Any
) -> None:
    # A generator function as a tool came back 'ok' with "<generator object
    # ...>" as its text: its body never ran.
    if fn.__class__.__name__ == "function" and fn.__name__ == "<lambda>":
        # Only its result tells: an error result naming the tool.
        (result,) = make(runners, 1).run([ToolCall("stream", fn, {"q": "x"})])
        assert result.status == "error"
        assert isinstance(result.error, TypeError)
        assert result.text.startswith("Error executing tool 'stream': it returned a generator"), (
            result.text
        )
        return
    with pytest.raises(TypeError, match=r"tool 'stream': fn is an? (async )?generator function"):
        ToolCall("stream", fn, {"q": "x"})


async def _fetched(url: str) -> str:
    return f"<html of {url}>"


def test_a_tool_that_returns_a_coroutine_is_an_error_result(runners: list[ToolRunner]) -> None:
    # It came back 'ok' with "<coroutine object ...>" as its text, never run.
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an unawaited coroutine's warning would fail
        (result,) = make(runners, 1).run(
            [ToolCall("fetch", lambda url: _fetched(url), {"url": "x"})]
        )
        gc.collect()
    assert result.status == "error" and isinstance(result.error, TypeError)
    assert re.match(
        r"Error executing tool 'fetch': function \S*<lambda> "
        r"returned a coroutine \(from _fetched\)",
        result.text,
    ), result.text


def test_an_async_tool_that_returns_a_coroutine_is_an_error_result(
    runners: list[ToolRunner],
) -> None:
    # An async tool that returns another coroutine instead of awaiting it came
    # back 'ok' with "<coroutine object _fetched ...>" as its text; _fetched
    # never ran and Python warned "never awaited" later.
    async def fetch(url: str) -> Any:
        return _fetched(url)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an unawaited coroutine's warning would fail
        (result,) = make(runners, 1).run([ToolCall("fetch", fetch, {"url": "x"})])
        gc.collect()
    assert result.status == "error" and isinstance(result.error, TypeError)
    assert re.match(
        r"Error executing tool 'fetch': function \S*fetch returned a coroutine \(from _fetched\)",
        result.text,
    ), result.text


def test_coroutine_tools_still_run(runners: list[ToolRunner]) -> None:
    async def coro(q: str) -> str:
        return f"coro {q}"

    (result,) = make(runners, 1).run([ToolCall("c", coro, {"q": "x"}, read_only=True)])
    assert (result.status, result.text) == ("ok", "coro x")


# ------------------------------------------------- a pool shut down between groups


def test_pool_shut_down_between_groups_keeps_the_results_of_the_calls_that_ran(
    runners: list[ToolRunner],
) -> None:
    # A runner shut down while its batch runs (here by the batch's own first
    # tool, deterministically; in an app, by another thread closing the
    # agent) cancels the calls not yet started, as a gather does for the
    # calls its pool refuses. Before, the next group's gather took the shut
    # pool for the caller's mistake and raised RuntimeError, losing the
    # result of the tool that had run, side effects and all.
    runner = make(runners, 2)
    ran: list[str] = []

    def close_the_agent() -> str:
        ran.append("close")
        runner.shutdown(wait=False)
        return "closed"

    def save() -> str:
        ran.append("save")
        return "saved"

    first, second = runner.run(
        [ToolCall("close", close_the_agent, call_id="a"), ToolCall("save", save, call_id="b")]
    )
    assert ran == ["close"]
    assert (first.call_id, first.status, first.text) == ("a", "ok", "closed")
    assert (second.call_id, second.status, second.started) == ("b", "error", False)
    assert second.text == "Error executing tool 'save': cancelled"


def test_pool_shut_down_before_the_batch_still_refuses_it(runners: list[ToolRunner]) -> None:
    runner = make(runners, 1)
    runner.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        runner.run([ToolCall("save", lambda: "saved")])


def test_configured_sequential_call_applies_when_only_concurrent_batch_is_given(
    runners: list[ToolRunner], monkeypatch: pytest.MonkeyPatch
) -> None:
    # "read from the config at each batch unless given to the constructor":
    # a runner given only concurrent_batch_timeout still reads
    # tools.sequential_call from the config (config check says it applies).
    # Before, the constructor's concurrent value was taken instead (30.0).
    monkeypatch.delenv("TAUT_CONFIG", raising=False)
    config = {"timeouts": {"tools": {"sequential_call": 7}}}
    r = make(runners, 1, concurrent_batch_timeout=30, config=config)
    assert r.batch_timeout() == 30.0
    assert r.sequential_timeout() == 7.0
    # Not set in the config: the default is the concurrent value, the constructor's.
    r2 = make(runners, 1, concurrent_batch_timeout=30, config={"timeouts": {}})
    assert r2.sequential_timeout() == 30.0
    # Given to the constructor: it wins over the config.
    r3 = make(runners, 1, sequential_call_timeout=2, config=config)
    assert r3.sequential_timeout() == 2.0
