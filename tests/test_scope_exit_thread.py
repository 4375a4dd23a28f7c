"""A scope exited on another thread than the one that entered it.

The entering thread's context holds the scope as its innermost one, and no
other thread can change that context: a close from elsewhere left it bounded
by a closed scope, so ``remaining()`` said 0 there for good (even inside a
fresh 60 s scope). The exit is refused instead, as trio refuses it, and the
scope stays open for the right thread to exit."""

from __future__ import annotations

import contextvars
import threading
from typing import Callable

import pytest

import taut
from taut import DeadlineExpired, remaining
from taut.deadline import DeadlineScope
from taut.testing import scope_clock

LONG = 60.0


def _exit_on_another_thread(
    scope: DeadlineScope, run: Callable[[Callable[[], object]], object] = lambda f: f()
) -> BaseException | None:
    """Call ``scope.__exit__`` on a new thread named "other-thread" (through
    ``run``); what it raised, if anything."""
    raised: list[BaseException] = []

    def exit_there() -> None:
        try:
            run(lambda: scope.__exit__(None, None, None))
        except BaseException as e:
            raised.append(e)

    thread = threading.Thread(target=exit_there, name="other-thread")
    thread.start()
    thread.join()
    return raised[0] if raised else None


def _made(kind: str) -> DeadlineScope:
    if kind == "fast":  # the Rust fast entry: relative, real clock
        return taut.move_on_after(LONG, label="handed-over")
    if kind == "interrupt":  # the general path, with the main thread's signal armed
        return taut.fail_after(LONG, label="handed-over", interrupt=True)
    return taut.move_on_at(1e9, label="handed-over")  # the general path


@pytest.mark.parametrize("kind", ["fast", "general", "interrupt"])
def test_an_exit_on_another_thread_is_refused_and_the_scope_stays_open(kind: str) -> None:
    def body() -> None:
        scope = _made(kind)
        scope.__enter__()
        error = _exit_on_another_thread(scope)
        assert isinstance(error, RuntimeError), error
        text = str(error)
        assert "'handed-over'" in text
        assert f"{threading.current_thread().name!r} ({threading.get_ident()})" in text
        assert "'other-thread'" in text
        # Nothing changed: still open and bounding this thread...
        assert not scope._closed
        left = remaining()
        assert left is not None and left > LONG / 2
        # ...which can still exit it, and is then unbounded again.
        assert scope.__exit__(None, None, None) is False
        assert scope._closed and remaining() is None
        with taut.move_on_after(LONG) as fresh:
            assert fresh.remaining() == pytest.approx(remaining(), abs=1.0)

    contextvars.copy_context().run(body)


def test_an_exit_in_a_copy_of_the_context_on_another_thread_is_refused() -> None:
    # The copy holds the scope as its innermost one too (the fast exit's
    # own check passes there): the thread decides, not the context.
    def body() -> None:
        scope = _made("fast")
        scope.__enter__()
        copied = contextvars.copy_context()
        error = _exit_on_another_thread(scope, copied.run)
        assert isinstance(error, RuntimeError), error
        assert not scope._closed
        assert scope.__exit__(None, None, None) is False
        assert remaining() is None

    contextvars.copy_context().run(body)


def test_an_expired_fail_scope_exited_elsewhere_raises_no_deadline_there() -> None:
    def body() -> None:
        with scope_clock() as clock:
            scope = taut.fail_after(5, label="handed-over")
            scope.__enter__()
            clock.advance(6)
            error = _exit_on_another_thread(scope)
            assert isinstance(error, RuntimeError), error
            with pytest.raises(DeadlineExpired):
                scope.__exit__(None, None, None)
        assert remaining() is None

    contextvars.copy_context().run(body)


def test_a_closed_scope_may_be_exited_again_from_anywhere() -> None:
    scope = _made("fast")
    with scope:
        pass
    assert _exit_on_another_thread(scope) is None
