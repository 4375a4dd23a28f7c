"""Issue 9 §1: one gate (taut._checks) for every public timeout and size.

Hostile values (huge ints, ±inf, NaN, sNaN, Fraction, timedelta extremes,
bool, text, numpy scalars, objects whose ``__float__``/``__index__``/
``__gt__``/``__eq__``/``__repr__`` raise an Exception or a
KeyboardInterrupt) go to every public timeout and size parameter. Each must
either be accepted and behave (a huge timeout does not fire within the
test; a huge size is a working pool), or raise ``TypeError``/``ValueError``
naming the parameter and the value's type, or let the value's own
``BaseException`` propagate unchanged. Never ``OverflowError``, never an
exception that escaped from the value.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import taut
from taut import MAX_TIMEOUT, PlanningConstraints, ThreadPoolExecutor, ToolCall, ToolRunner
from taut._checks import MAX_COUNT
from taut._core import _seconds
from taut.testing import MockClock

try:
    import numpy as np
except ImportError:  # pragma: no cover - numpy is in the test extra
    np = None

# A timeout at least this long must not fire within a test (work takes ~10 ms).
NEVER_WITHIN_TEST = 30.0
# The standard library's exact words, which the drop-in executor keeps.
STDLIB_MAX_WORKERS_MESSAGE = "max_workers must be greater than 0"
# Far above pid_max: signalling it can never reach a real process.
NO_SUCH_PID = 10**7


# ---------------------------------------------------------------- hostile values
class _Boom:
    """Base of the hostile values: each raises ``exc`` from one method."""

    exc: BaseException

    def __init__(self, exc_type: type[BaseException]) -> None:
        self.exc = exc_type(f"hostile {type(self).__name__}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.exc).__name__})"

    __hash__ = object.__hash__


class FloatRaises(_Boom):
    def __float__(self) -> float:
        raise self.exc


class IndexRaises(_Boom):
    def __index__(self) -> int:
        raise self.exc


class GtRaises(_Boom):
    """float() says inf and == says it is not: a huge finite value whose sign
    must be asked for."""

    def __float__(self) -> float:
        return math.inf

    def __eq__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        raise self.exc

    __hash__ = object.__hash__


class EqRaises(_Boom):
    def __float__(self) -> float:
        return math.inf

    def __eq__(self, other: object) -> bool:
        raise self.exc

    __hash__ = object.__hash__


class BoolOfGtRaises(_Boom):
    def __float__(self) -> float:
        return math.inf

    def __eq__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> Any:
        exc = self.exc

        class Truth:
            def __bool__(self) -> bool:
                raise exc

        return Truth()

    __hash__ = object.__hash__


class ReprRaises(_Boom):
    """Not a number at all, and even its error message is hostile."""

    def __repr__(self) -> str:
        raise self.exc


HOSTILE_CLASSES = [FloatRaises, IndexRaises, GtRaises, EqRaises, BoolOfGtRaises, ReprRaises]
RAISED = [RuntimeError, ValueError, TypeError, OverflowError, KeyboardInterrupt, SystemExit]

KNOWN: list[object] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    2**31,
    2**32 + 1,
    2**63,
    2**64,
    10**30,
    10**400,
    -(10**400),
    0.5,
    -0.5,
    1e-400,
    5e-324,
    1e300,
    math.inf,
    -math.inf,
    math.nan,
    Decimal("2.5"),
    Decimal("NaN"),
    Decimal("sNaN"),
    Decimal("1e400"),
    Decimal("-1e400"),
    Decimal("Infinity"),
    Fraction(10**400, 3),
    Fraction(-(10**400), 7),
    Fraction(1, 3),
    timedelta.max,
    timedelta.min,
    timedelta(seconds=3),
    30 * 86400,
    "5",
    "PT5M",
    b"5",
    [1],
    1j,
    object(),
    *(cls(exc) for cls in HOSTILE_CLASSES for exc in RAISED),
]
if np is not None:
    KNOWN += [
        np.float64(1.5),
        np.float64("nan"),
        np.float64("inf"),
        np.float32(-2.0),
        np.float16(0.5),
        np.int64(3),
        np.int8(-4),
        np.uint64(2**64 - 1),
        np.bool_(True),
        np.timedelta64(5, "ms"),
        np.timedelta64("NaT"),
        np.datetime64(1, "s"),
    ]


def _numpy_values() -> st.SearchStrategy[object]:
    if np is None:  # pragma: no cover
        return st.nothing()
    return st.one_of(
        st.floats().map(np.float64),
        st.integers(-(2**63), 2**63 - 1).map(np.int64),
        st.integers(0, 2**64 - 1).map(np.uint64),
        st.integers(-(10**6), 10**6).map(lambda n: np.timedelta64(n, "ms")),
    )


hostile_values: st.SearchStrategy[object] = st.one_of(
    st.sampled_from(KNOWN),
    st.integers(),
    st.integers(min_value=2**53).map(lambda n: n ** 8),
    st.integers(max_value=-1).map(lambda n: n**9),
    st.floats(),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.fractions(),
    st.timedeltas(),
    st.builds(lambda cls, exc: cls(exc), st.sampled_from(HOSTILE_CLASSES), st.sampled_from(RAISED)),
    st.text(max_size=4),
    _numpy_values(),
)


# ---------------------------------------------------------------- the parameters
def _reference(value: object) -> float | str | None:
    """What the core gate makes of ``value`` as a relative timeout, or
    ``"invalid"``. Base exceptions are left to the caller's check."""
    try:
        result: float | None = taut.clamp_timeout(value)
    except (TypeError, ValueError):
        return "invalid"
    return result


def _fires_late(value: object) -> bool:
    """True when ``value`` as a relative timeout must not fire within the test."""
    ref = _reference(value)
    return ref is None or (isinstance(ref, float) and ref >= NEVER_WITHIN_TEST)


def _work() -> int:
    time.sleep(0.005)
    return 5


_pool: ThreadPoolExecutor | None = None
_runner: ToolRunner | None = None


def pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(4, thread_name_prefix="gate-test")
    return _pool


def runner() -> ToolRunner:
    global _runner
    if _runner is None:
        _runner = ToolRunner(4)
    return _runner


@pytest.fixture(scope="module", autouse=True)
def _shared_pools() -> Any:
    yield
    global _pool, _runner, _resizable
    for ex in (_pool, _resizable):
        if ex is not None:
            ex.shutdown()
    _pool = _resizable = None
    if _pool is not None:
        _pool.shutdown()
        _pool = None
    if _runner is not None:
        _runner.shutdown()
        _runner = None


# What a future's wait raises when it times out: the builtin TimeoutError from
# CPython 3.11 on, a class of its own before.
FUTURE_TIMEOUT = (TimeoutError, concurrent.futures.TimeoutError)


def _timed_out_ok(value: object, exc: BaseException) -> None:
    """A timeout that fired: only allowed when ``value`` is short."""
    assert isinstance(exc, FUTURE_TIMEOUT), exc
    assert not _fires_late(value), f"{value!r} fired within the test: {exc!r}"


def p_result(value: object) -> None:
    future = pool().submit(_work)
    try:
        assert future.result(timeout=value) == 5  # type: ignore[arg-type]
    except FUTURE_TIMEOUT as exc:
        _timed_out_ok(value, exc)
    finally:
        future.result()


def p_exception(value: object) -> None:
    future = pool().submit(_work)
    try:
        assert future.exception(timeout=value) is None  # type: ignore[arg-type]
    except FUTURE_TIMEOUT as exc:
        _timed_out_ok(value, exc)
    finally:
        future.result()


def p_map(value: object) -> None:
    try:
        assert list(pool().map(lambda _: _work(), [0, 1], timeout=value)) == [5, 5]  # type: ignore[arg-type]
    except FUTURE_TIMEOUT as exc:
        _timed_out_ok(value, exc)


def p_idle_timeout(value: object) -> None:
    ex = ThreadPoolExecutor(1, idle_timeout=value)  # type: ignore[arg-type]
    try:
        assert ex.submit(_work).result() == 5
        if _fires_late(value) and _reference(value) is not None:
            # The worker does not retire at once: it is still counted.
            assert ex.stats().workers == 1
        assert ex._idle_timeout is None or 0 < ex._idle_timeout <= MAX_TIMEOUT
    finally:
        ex.shutdown()


def _check_gather_outcome(value: object, outcome: Any) -> None:
    if _fires_late(value):
        assert outcome.status == "ok" and outcome.value == 5, outcome
    else:
        assert outcome.status in ("ok", "timeout", "not_started"), outcome


def p_gather_timeout(value: object) -> None:
    [o] = taut.gather([taut.call(_work)], timeout=value, executor=pool())  # type: ignore[arg-type]
    _check_gather_outcome(value, o)


def p_agather_timeout(value: object) -> None:
    async def main() -> Any:
        return await taut.agather([taut.call(_work)], timeout=value, executor=pool())  # type: ignore[arg-type]

    [o] = asyncio.run(main())
    _check_gather_outcome(value, o)


def _check_tool(value: object, result: Any) -> None:
    if _fires_late(value):
        assert result.status == "ok" and result.value == 5, result
    else:
        assert result.status in ("ok", "timeout", "not_started"), result


def _tool(read_only: bool) -> ToolCall:
    return ToolCall("work", _work, read_only=read_only)


def p_concurrent_batch_timeout(value: object) -> None:
    r = ToolRunner(2, concurrent_batch_timeout=value)  # type: ignore[arg-type]
    try:
        [result] = r.run([_tool(True)])
        _check_tool(value, result)
    finally:
        r.shutdown()


def p_sequential_call_timeout(value: object) -> None:
    r = ToolRunner(2, sequential_call_timeout=value)  # type: ignore[arg-type]
    try:
        [result] = r.run([_tool(False)])
        _check_tool(value, result)
    finally:
        r.shutdown()


def p_run_timeout(value: object) -> None:
    [result] = runner().run([_tool(True)], timeout=value)  # type: ignore[arg-type]
    _check_tool(value, result)


def p_budget_child_seconds(value: object) -> None:
    clock = MockClock()
    child = PlanningConstraints(time_budget=100).start(clock=clock).child(value)  # type: ignore[arg-type]
    left = child.remaining()
    assert left is not None and 0 <= left <= 100


def p_time_budget(value: object) -> None:
    seconds = PlanningConstraints(time_budget=value).time_budget_s  # type: ignore[arg-type]
    # A timedelta is kept as given (it round-trips); numbers are clamped.
    limit = timedelta.max.total_seconds() if isinstance(value, timedelta) else MAX_TIMEOUT
    assert seconds is None or 0 <= seconds <= limit


def _scope_behaves(value: object, scope_factory: Callable[..., Any], far: bool) -> None:
    try:
        with scope_factory(value) as scope:
            pass
    except TimeoutError as exc:
        assert not far, f"{value!r} fired within the test: {exc!r}"
        return
    if far:
        assert not scope.expired


def p_fail_after(value: object) -> None:
    _scope_behaves(value, taut.fail_after, _fires_late(value))


def p_move_on_after(value: object) -> None:
    _scope_behaves(value, taut.move_on_after, _fires_late(value))


def _absolute_is_far(value: object) -> bool:
    try:
        at = _seconds(value)
    except (TypeError, ValueError):
        return False
    return at is None or at - time.monotonic() >= NEVER_WITHIN_TEST


def p_fail_at(value: object) -> None:
    _scope_behaves(value, taut.fail_at, _absolute_is_far(value))


def p_move_on_at(value: object) -> None:
    _scope_behaves(value, taut.move_on_at, _absolute_is_far(value))


def p_run_bounded_sync(value: object) -> None:
    result = taut.run_bounded_sync(_work, value, executor=pool())
    if _fires_late(value):
        assert not result.timed_out and result.value == 5


def p_run_bounded_async(value: object) -> None:
    async def work() -> int:
        await asyncio.sleep(0.005)
        return 5

    async def main() -> Any:
        coro = work()
        try:
            return await taut.run_bounded_async(coro, value)
        finally:
            coro.close()  # not awaited when the timeout is refused

    result = asyncio.run(main())
    if _fires_late(value):
        assert not result.timed_out and result.value == 5


def p_blocked_grace(value: object) -> None:
    async def main() -> Any:
        coro = asyncio.sleep(0, 5)
        try:
            return await taut.run_bounded_async(coro, 60, blocked_grace=value)  # type: ignore[arg-type]
        finally:
            coro.close()  # not awaited when blocked_grace is refused

    result = asyncio.run(main())
    assert not result.timed_out and result.value == 5


def p_run_process(value: object) -> None:
    result = taut.run_process([sys.executable, "-c", "pass"], value)  # type: ignore[arg-type]
    if _fires_late(value):
        assert not result.timed_out and result.returncode == 0


def p_kill_grace(value: object) -> None:
    assert taut.kill_process_tree(NO_SUCH_PID, grace=value) is False  # type: ignore[arg-type]


def p_resolve_default(value: object) -> None:
    got = taut.resolve_timeout("gate.test", default=value, config={})  # type: ignore[arg-type]
    assert got is None or 0 <= got <= MAX_TIMEOUT


_journal_dir = tempfile.mkdtemp(prefix="taut-gate-")


def p_sqlite_journal_timeout(value: object) -> None:
    journal = taut.SqliteJournal(os.path.join(_journal_dir, "j.db"), timeout=value)  # type: ignore[arg-type]
    try:
        # SQLite's busy wait is an int of milliseconds; sqlite3 itself would
        # turn a huge or infinite timeout into 0 (no wait at all).
        assert journal._conn is not None
        [[busy_ms]] = journal._conn.execute("PRAGMA busy_timeout").fetchall()
        if _fires_late(value):
            assert busy_ms >= NEVER_WITHIN_TEST * 1000
        assert 0 <= busy_ms <= 2**31 - 1
    finally:
        journal.close()


def p_mock_clock_advance(value: object) -> None:
    clock = MockClock(0.0)
    clock.advance(value)  # type: ignore[arg-type]
    assert 0 <= clock() <= MAX_TIMEOUT


# Sizes ------------------------------------------------------------------------
def _count_ok(got: int, value: object, minimum: int) -> None:
    assert type(got) is int and minimum <= got <= MAX_COUNT


def p_max_workers(value: object) -> None:
    ex = ThreadPoolExecutor(value)  # type: ignore[arg-type]
    try:
        _count_ok(ex._max_workers, value, 1)
        assert ex.submit(_work).result() == 5
    finally:
        ex.shutdown()


def p_max_queue(value: object) -> None:
    ex = ThreadPoolExecutor(1, max_queue=value)  # type: ignore[arg-type]
    try:
        _count_ok(ex._max_queue, value, 0)
        assert ex.submit(_work).result() == 5
    finally:
        ex.shutdown()


_resizable: ThreadPoolExecutor | None = None


def p_resize(value: object) -> None:
    global _resizable
    if _resizable is None:
        _resizable = ThreadPoolExecutor(1, thread_name_prefix="gate-resize")
    _resizable.resize(value)  # type: ignore[arg-type]
    _count_ok(_resizable._max_workers, value, 1)
    assert _resizable.submit(_work).result() == 5
    _resizable.resize(1)


def p_max_parallel(value: object) -> None:
    outcomes = taut.gather(
        [taut.call(_work), taut.call(_work)],
        max_parallel=value,  # type: ignore[arg-type]
        executor=pool(),
    )
    assert [o.value for o in outcomes] == [5, 5]


def p_agather_max_parallel(value: object) -> None:
    async def main() -> Any:
        return await taut.agather([taut.call(_work)], max_parallel=value, executor=pool())  # type: ignore[arg-type]

    [o] = asyncio.run(main())
    assert o.value == 5


def p_tool_workers(value: object) -> None:
    r = ToolRunner(value)  # type: ignore[arg-type]
    try:
        _count_ok(r.tool_workers, value, 0)
        [result] = r.run([_tool(True)])
        assert result.value == 5
    finally:
        r.shutdown()


def p_set_tool_workers(value: object) -> None:
    r = runner()
    try:
        r.set_tool_workers(value)  # type: ignore[arg-type]
        _count_ok(r.tool_workers, value, 0)
        [result] = r.run([_tool(True)])
        assert result.value == 5
    finally:
        r.set_tool_workers(4)


def p_config_tool_workers(value: object) -> None:
    # A config never raises: a bad value is dropped with a warning.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = ToolRunner(config={"capacity": {"tool_workers": value}})
    try:
        _count_ok(r.tool_workers, value, 0)
        [result] = r.run([_tool(True)])
        assert result.value == 5
    finally:
        r.shutdown()


def p_max_agents(value: object) -> None:
    got = PlanningConstraints(max_agents=value).max_agents  # type: ignore[arg-type]
    assert got is None or 1 <= got <= MAX_COUNT


def p_constraints_max_agents_in_runner(value: object) -> None:
    constraints = PlanningConstraints(max_agents=value)  # type: ignore[arg-type]
    r = ToolRunner(0, constraints=constraints)
    try:
        _count_ok(r.tool_workers, value, 0)
    finally:
        r.shutdown()


def p_budget_child_max_agents(value: object) -> None:
    child = PlanningConstraints(max_agents=3).start().child(max_agents=value)  # type: ignore[arg-type]
    assert child.max_agents is not None and 1 <= child.max_agents <= 3


@dataclass(frozen=True)
class Param:
    name: str  # as the error names it
    apply: Callable[[object], None]
    gate: bool = False  # a relative timeout through clamp_timeout: rejects what it rejects


PARAMS = [
    Param("timeout", p_result, gate=True),
    Param("timeout", p_exception, gate=True),
    Param("timeout", p_map, gate=True),
    Param("idle_timeout", p_idle_timeout),
    Param("timeout", p_gather_timeout, gate=True),
    Param("timeout", p_agather_timeout, gate=True),
    Param("concurrent_batch_timeout", p_concurrent_batch_timeout, gate=True),
    Param("sequential_call_timeout", p_sequential_call_timeout, gate=True),
    Param("timeout", p_run_timeout, gate=True),
    Param("seconds", p_budget_child_seconds),
    Param("time_budget", p_time_budget),
    Param("seconds", p_fail_after, gate=True),
    Param("seconds", p_move_on_after, gate=True),
    Param("deadline", p_fail_at),
    Param("deadline", p_move_on_at),
    Param("timeout", p_run_bounded_sync, gate=True),
    Param("timeout", p_run_bounded_async, gate=True),
    Param("blocked_grace", p_blocked_grace),
    Param("timeout", p_run_process, gate=True),
    Param("grace", p_kill_grace),
    Param("default", p_resolve_default),
    Param("seconds", p_mock_clock_advance),
    Param("timeout", p_sqlite_journal_timeout, gate=True),
    Param("max_workers", p_max_workers),
    Param("max_queue", p_max_queue),
    Param("max_workers", p_resize),
    Param("max_parallel", p_max_parallel),
    Param("max_parallel", p_agather_max_parallel),
    Param("tool_workers", p_tool_workers),
    Param("tool_workers", p_set_tool_workers),
    Param("tool_workers", p_config_tool_workers),
    Param("max_agents", p_max_agents),
    Param("max_agents", p_constraints_max_agents_in_runner),
    Param("max_agents", p_budget_child_max_agents),
]
PARAM_IDS = [p.apply.__name__[2:] for p in PARAMS]


def _value_id(value: object) -> str:
    if isinstance(value, _Boom):
        return f"{type(value).__name__}-{type(value.exc).__name__}"
    text = repr(value)
    return text if len(text) <= 30 else text[:27] + "..."


def _hostile_exc(value: object) -> BaseException | None:
    return value.exc if isinstance(value, _Boom) else None


def check(param: Param, value: object) -> None:
    """Run one parameter with one value and judge what happened."""
    try:
        param.apply(value)
    except (TypeError, ValueError) as exc:
        if _hostile_exc(value) is exc:
            # The value's own Exception must not escape: it is a wrong type.
            raise AssertionError(f"{param.name}: {value!r}'s own {exc!r} escaped") from exc
        assert not isinstance(exc, OverflowError)
        message = str(exc)
        assert param.name in message, f"{param.name} not named in {message!r}"
        if message != STDLIB_MAX_WORKERS_MESSAGE:
            assert type(value).__name__ in message, f"type of {value!r} not named in {message!r}"
        return
    except BaseException as exc:
        if isinstance(exc, Exception) or _hostile_exc(value) is not exc:
            raise AssertionError(f"{param.name}={value!r} raised {exc!r}") from exc
        return  # the value's KeyboardInterrupt/SystemExit, unchanged
    # Accepted: a relative timeout accepts exactly what the core gate accepts.
    if param.gate:
        assert _reference(value) != "invalid", f"{param.name} accepted {value!r}"


@pytest.mark.parametrize("param", PARAMS, ids=PARAM_IDS)
@pytest.mark.parametrize("value", KNOWN, ids=_value_id)
def test_every_parameter_with_known_hostile_values(param: Param, value: object) -> None:
    check(param, value)


@pytest.mark.parametrize("param", PARAMS, ids=PARAM_IDS)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(value=hostile_values)
def test_every_parameter_accepts_or_names_itself(param: Param, value: object) -> None:
    check(param, value)


# ---------------------------------------------------------------- never shortened
def test_a_thirty_day_and_a_century_deadline_are_kept_exactly() -> None:
    for seconds in (30 * 86400, 100 * 365.25 * 86400):
        with taut.move_on_after(seconds) as scope:
            left = taut.remaining()
            assert left is not None and seconds - 60 < left <= seconds
            assert scope.deadline is not None
        assert not scope.expired
        assert taut.clamp_timeout(seconds) == seconds
        with ThreadPoolExecutor(1, idle_timeout=seconds) as ex:
            assert ex._idle_timeout == seconds


def test_a_long_future_wait_is_made_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the OS slice shrunk to 20 ms, a 0.3 s wait is several pieces and
    still lasts its whole timeout; a result that arrives mid-wait is returned."""
    import taut._future as executor_module

    monkeypatch.setattr(executor_module, "OS_WAIT_SLICE", 0.02)
    never: taut.Future = taut.Future()
    started = time.monotonic()
    with pytest.raises(FUTURE_TIMEOUT):
        never.result(timeout=0.3)
    assert time.monotonic() - started >= 0.29
    with pytest.raises(FUTURE_TIMEOUT):
        never.exception(timeout=0.05)
    with ThreadPoolExecutor(1) as ex:
        assert ex.submit(lambda: time.sleep(0.1) or 7).result(timeout=5) == 7


def test_issue_examples() -> None:
    """The values the issue saw fail on main, one by one."""
    assert [o.status for o in taut.gather([taut.call(int, "5")], timeout=10**400)] == ["ok"]
    assert ToolRunner(0, concurrent_batch_timeout=10**400).batch_timeout() == MAX_TIMEOUT
    assert ToolRunner(0, sequential_call_timeout=Decimal(3)).sequential_timeout() == 3.0
    assert ThreadPoolExecutor(idle_timeout=10**400)._idle_timeout == MAX_TIMEOUT
    budget = PlanningConstraints(time_budget=100).start(clock=MockClock())
    assert budget.child(10**400).remaining() == 100
    assert budget.child(timedelta(seconds=5)).remaining() == 5
    with ThreadPoolExecutor(2) as ex:
        assert list(ex.map(abs, [-1], timeout=math.inf)) == [1]
        with pytest.raises(ValueError, match=r"^timeout must not be NaN, got Decimal\('sNaN'\)"):
            ex.submit(abs, 1).result(timeout=Decimal("sNaN"))
        ex.resize(10**400)
        assert ex._max_workers == MAX_COUNT
    for size in (10**400, 2**64):
        with ThreadPoolExecutor(size) as ex:
            assert ex._max_workers == MAX_COUNT
    with ThreadPoolExecutor(1, max_queue=10**400) as ex:
        assert ex._max_queue == MAX_COUNT
    with pytest.raises(KeyboardInterrupt):
        taut.fail_after(FloatRaises(KeyboardInterrupt))
    with pytest.raises(TypeError, match=r"^timeout must be a number") as info:
        taut.gather([taut.call(int, "5")], timeout=GtRaises(RuntimeError))
    assert isinstance(info.value.__cause__, RuntimeError)


def test_config_tool_workers_beyond_any_ceiling_checks_ok_and_runs(tmp_path: Any) -> None:
    path = tmp_path / "taut.yaml"
    path.write_text("capacity:\n  tool_workers: 1000000000000000000000000000000\n")
    assert taut.config.check_config_file(str(path)) == []
    r = ToolRunner(config=str(path))
    try:
        assert r.tool_workers == MAX_COUNT
        assert r.run([_tool(True)])[0].value == 5
    finally:
        r.shutdown()
