"""The Rust fast paths of a deadline scope (``rust/py_scope.rs``): the usual
entry and exit done in one Rust call each, everything else handed to the
Python general path (``_enter_slow``, ``_aenter_slow``, ``_exit``,
``_aexit_slow``).

The other scope tests check behaviour whichever path runs; these check
that the fast paths are the ones taken where they should be (or a slow path
could hide a broken fast one), that what they leave behind is what the
general path would have left, and the corners only they meet: a context
copy, a task that is not asyncio's C task, a reference cycle through the
Rust fields."""

from __future__ import annotations

import asyncio
import contextvars
import copy
import gc
import pickle
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

import taut
from taut.deadline import DeadlineScope, _context

LONG = 30.0
SHORT = 0.01

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def slow_paths(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """How often each general path ran (the fast ones are not Python)."""
    counts = {"enter": 0, "aenter": 0, "exit": 0, "aexit": 0}
    for key, name in (
        ("enter", "_enter_slow"),
        ("aenter", "_aenter_slow"),
        ("exit", "_exit"),
        ("aexit", "_aexit_slow"),
    ):
        original = getattr(DeadlineScope, name)

        def counted(self: DeadlineScope, *args: Any, _o: Any = original, _k: str = key) -> Any:
            counts[_k] += 1
            return _o(self, *args)

        monkeypatch.setattr(DeadlineScope, name, counted)
    yield counts


def test_a_plain_scope_outside_a_loop_takes_the_fast_paths(slow_paths: dict[str, int]) -> None:
    with taut.fail_after(LONG) as outer:
        with taut.move_on_after(LONG / 2) as inner:
            assert _context.innermost.get() is inner
            # The inner deadline bounds; the outer one is its parent.
            assert inner._parent is outer
            assert inner._effective == inner.deadline
            remaining = taut.remaining()
            assert remaining is not None and remaining <= LONG / 2
        assert _context.innermost.get() is outer
    assert _context.innermost.get() is None
    assert slow_paths == {"enter": 0, "aenter": 0, "exit": 0, "aexit": 0}
    assert not outer.expired and not inner.expired
    assert outer._closed and inner._closed
    assert outer._deadline is not None and outer._deadline.cancelled


def test_an_inner_scope_keeps_the_earlier_outer_deadline(slow_paths: dict[str, int]) -> None:
    with taut.fail_after(LONG / 2) as outer, taut.fail_after(LONG) as inner:
        assert inner._effective == outer.deadline
        remaining = taut.remaining()
        assert remaining is not None and remaining <= LONG / 2
    assert slow_paths["enter"] == 0 and slow_paths["exit"] == 0


def test_async_with_takes_the_fast_paths_once_the_loop_is_known(
    slow_paths: dict[str, int],
) -> None:
    async def main() -> list[DeadlineScope]:
        scopes = []
        for _ in range(5):
            async with taut.fail_after(LONG) as scope:
                assert isinstance(scope, DeadlineScope)
                assert scope._task is asyncio.current_task()
                scopes.append(scope)
        return scopes

    scopes = asyncio.run(main())
    # The loop's first scope makes its waker (Python); the rest are Rust only.
    assert slow_paths["aenter"] <= 1
    assert slow_paths["aexit"] == 0 and slow_paths["exit"] == 0
    assert all(s._closed and s.expired is False for s in scopes)


def test_a_fast_scope_still_expires_and_cancels_its_task(slow_paths: dict[str, int]) -> None:
    async def main() -> bool:
        async with taut.fail_after(LONG):  # the loop's waker is made here
            pass
        with pytest.raises(taut.DeadlineExpired):
            async with taut.fail_after(SHORT):
                await asyncio.sleep(LONG)
        async with taut.move_on_after(SHORT) as scope:
            await asyncio.sleep(LONG)
        return scope.expired

    assert asyncio.run(main())
    assert slow_paths["aenter"] == 1  # only the first
    # The expired exits took the general path.
    assert slow_paths["aexit"] == 2


def test_async_exit_returns_nothing_true_and_never_swallows() -> None:
    # `async with` only asks whether __aexit__'s result is true; the fast
    # exit's is None (an await over without a StopIteration), the general
    # path's False.
    async def main() -> None:
        with pytest.raises(KeyError):
            async with taut.move_on_after(LONG):
                raise KeyError("kept")
        scope = taut.fail_after(LONG)
        assert await scope.__aenter__() is scope
        assert await scope.__aexit__(None, None, None) is None

    asyncio.run(main())


def test_the_fast_entrys_awaitable_ends_with_the_scope_when_driven_by_hand() -> None:
    # What `await` reads (StopIteration.value), also for Python code that
    # calls __next__ itself, and again after the first one was caught there.
    async def main() -> None:
        for _ in range(2):
            scope = taut.fail_after(LONG)
            step = scope.__aenter__().__await__()
            with pytest.raises(StopIteration) as stop:
                next(step)
            assert stop.value.value is scope and stop.value.args == (scope,)
            assert await scope.__aexit__(None, None, None) is None

    asyncio.run(main())


def test_exit_in_a_copy_of_the_context_restores_the_parent_there() -> None:
    # The token of the entry belongs to the original context: reset() refuses
    # it in a copy, and the fast exit sets the parent instead, as _restore does.
    with taut.fail_after(LONG) as outer:
        inner = taut.fail_after(LONG)
        inner.__enter__()
        copy = contextvars.copy_context()
        assert copy.run(inner.__exit__, None, None, None) is False
        assert copy[_context.innermost] is outer
        assert inner._closed and inner.expired is False
        # The original context was not touched by the copy's exit.
        assert _context.innermost.get() is inner
        _context.innermost.set(outer)


def test_a_task_that_is_not_asyncios_c_task_takes_the_general_path(
    slow_paths: dict[str, int],
) -> None:
    class PythonTask(asyncio.Task):  # type: ignore[type-arg]
        """A subclass: its cancelling() might run bytecode."""

    async def main() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(lambda loop, coro, **kw: PythonTask(coro, loop=loop, **kw))

        async def scoped(seconds: float) -> bool:
            async with taut.move_on_after(seconds) as scope:
                await asyncio.sleep(LONG if seconds == SHORT else 0)
            return scope.expired

        return (
            await asyncio.create_task(scoped(LONG)),
            await asyncio.create_task(scoped(SHORT)),
        )

    assert asyncio.run(main()) == (False, True)
    assert slow_paths["aenter"] == 2


def test_a_fake_clock_takes_the_general_path(slow_paths: dict[str, int]) -> None:
    now = [1000.0]
    previous = taut.deadline.set_clock(lambda: now[0])
    try:
        with taut.move_on_after(5) as scope:
            now[0] += 10
        assert scope.expired
    finally:
        taut.deadline.set_clock(previous)
    assert slow_paths["enter"] == 1 and slow_paths["exit"] == 1


def test_entering_twice_is_refused_by_the_general_path() -> None:
    scope = taut.fail_after(LONG)
    with scope, pytest.raises(RuntimeError, match="entered only once"):
        scope.__enter__()


def test_a_cycle_through_the_rust_fields_is_collected() -> None:
    # The fields live in Rust: without __traverse__ the collector could not
    # see this cycle, and the scope (and all it holds) would leak.
    scope = taut.fail_after(LONG)
    with scope:
        pass
    scope._parent = scope
    gone = weakref.ref(scope)
    del scope
    gc.collect()
    assert gone() is None


def test_bad_arguments_are_named() -> None:
    with pytest.raises(TypeError, match=r"seconds must be .*got 'soon' \(str\)"):
        taut.fail_after("soon")
    with pytest.raises(TypeError, match=r"label must be a str, got 5 \(int\)"):
        taut.fail_after(1, 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"interrupt must be a bool, got 1 \(int\)"):
        taut.fail_after(1, interrupt=1)  # type: ignore[arg-type]


def test_a_scope_not_entered_copies_and_pickles_as_what_made_it() -> None:
    # As when its fields were Python slots: a template scope can be copied.
    for scope in (taut.fail_after(5, "fetch"), taut.move_on_at(1e9, interrupt=True)):
        for twin in (copy.copy(scope), pickle.loads(pickle.dumps(scope))):
            assert type(twin) is DeadlineScope and twin is not scope
            assert (twin.label, twin._relative, twin._absolute, twin._raise, twin._interrupt) == (
                scope.label,
                scope._relative,
                scope._absolute,
                scope._raise,
                scope._interrupt,
            )
            assert not twin._entered
    entered = taut.fail_after(LONG)
    with entered, pytest.raises(TypeError, match="entered deadline scope cannot be copied"):
        copy.copy(entered)


def test_the_deadline_of_a_fast_entry_is_one_object_for_python() -> None:
    # The fast entry keeps its deadline without a Python object; the first
    # read of `_deadline` makes one, and every later read is that object.
    async def main() -> None:
        async with taut.move_on_after(LONG):
            pass  # the loop is known from here on
        async with taut.move_on_after(LONG) as scope:
            deadline = scope._deadline
            assert deadline is not None and not deadline.cancelled
            assert scope._deadline is deadline
        assert deadline.cancelled and scope._deadline is deadline

    asyncio.run(main())


def test_the_factories_made_in_rust_read_as_python_ones() -> None:
    import inspect

    for factory in (taut.fail_after, taut.move_on_after):
        assert str(inspect.signature(factory)) == "(seconds, label='operation', *, interrupt=False)"
        scope = factory(2.5, "step", interrupt=False)
        assert type(scope) is taut.DeadlineScope
        assert (scope.label, scope._relative, scope._interrupt) == ("step", 2.5, False)
    assert taut.fail_after(1)._raise and not taut.move_on_after(1)._raise
    # A DeadlineScope made with no arguments is unbounded and raises.
    blank = taut.DeadlineScope()
    assert (blank._relative, blank._absolute, blank._raise, blank.label) == (
        None,
        None,
        True,
        "operation",
    )
