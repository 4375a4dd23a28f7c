"""A user's script that type-checks against the standard library, with taut
swapped in. ``tests/test_typing.py`` runs ``mypy --strict`` on it; it also runs
as a plain script. Every annotation here is what a user would write for
``concurrent.futures``; none of them may need a cast or an ignore."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterator
from concurrent.futures import Future, as_completed, wait
from datetime import timedelta

import taut


def square(x: int) -> int:
    return x * x


def greet(name: str, punctuation: str = "!") -> str:
    return f"hello {name}{punctuation}"


def executor_like_the_stdlib() -> int:
    with taut.ThreadPoolExecutor(max_workers=2) as ex:
        fut: Future[int] = ex.submit(square, 3)
        n: int = fut.result()
        ours: taut.Future[int] = ex.submit(square, 4)
        text: str = ex.submit(greet, "ada", punctuation="?").result(timeout=5)
        done: list[int] = [f.result() for f in as_completed([ex.submit(square, 5)])]
        finished, pending = wait([ex.submit(square, 6), ours])
        six: set[int] = {f.result() for f in finished}
        squares: Iterator[int] = ex.map(square, [1, 2, 3])
        greetings: list[str] = list(ex.map(greet, ["a", "b"], ["!", "?"], timeout=10))
        error: BaseException | None = fut.exception()
        fut.add_done_callback(lambda f: print(f.result() + 1))
        stdlib_pool: concurrent.futures.ThreadPoolExecutor = ex
        assert error is None and not pending and stdlib_pool is ex
        return n + sum(done) + sum(six) + sum(squares) + len(text) + len(greetings)


async def executor_with_asyncio() -> int:
    loop = asyncio.get_running_loop()
    with taut.ThreadPoolExecutor(max_workers=1) as ex:
        n: int = await loop.run_in_executor(ex, square, 7)
        m: int = await asyncio.wrap_future(ex.submit(square, 8))
        return n + m


def bounded_runs() -> int:
    result: taut.BoundedResult[int] = taut.run_bounded_sync(lambda: square(2), 1.0)
    value: int = result.unwrap()
    from_future = taut.run_bounded_sync(taut.default_executor().submit(square, 3), 1.0)
    three_squared: int = from_future.unwrap()
    return value + three_squared


async def bounded_async() -> int:
    result = await taut.run_bounded_async(asyncio.sleep(0, result=5), 1.0)
    return result.unwrap()


def constraints() -> float:
    plan = taut.PlanningConstraints(time_budget="PT30M", max_agents=3)
    seconds = taut.PlanningConstraints(time_budget=90)
    delta = taut.PlanningConstraints(time_budget=timedelta(minutes=5), weights={"speed": 0.7})
    unbounded = taut.PlanningConstraints()
    total = 0.0
    for c in (plan, seconds, delta, unbounded):
        total += c.time_budget_s or 0.0
    return total


def scopes() -> bool:
    with taut.move_on_after(1.0) as scope:
        left: float | None = taut.remaining()
        assert left is not None
    expired: bool = scope.expired
    try:
        with taut.fail_after(0, "zero"):
            pass
    except taut.DeadlineExpired as e:
        label: str = e.label
        assert label == "zero"
    return expired


def statuses() -> list[str]:
    outcomes = taut.gather([taut.call(square, 2)], timeout=5)
    kinds: list[str] = []
    for outcome in outcomes:
        status: taut.OutcomeStatus = outcome.status
        if status == "ok":
            kinds.append("ok")
        elif status in ("error", "timeout", "not_started", "cancelled"):
            kinds.append(status)
    tool_status: taut.ToolStatus = "timeout"
    kinds.append(tool_status)
    return kinds


if __name__ == "__main__":
    print(executor_like_the_stdlib())
    print(asyncio.run(executor_with_asyncio()))
    print(bounded_runs(), asyncio.run(bounded_async()))
    print(constraints(), scopes(), statuses())
