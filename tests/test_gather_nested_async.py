"""A sync gather nested in an async call, on the executor that call runs on:
its calls run inline on the call's thread (one worker cannot deadlock), where
the call's own event loop is running. Its coroutines used to fail there with
"asyncio.run() cannot be called from a running event loop" (and a "never
awaited" warning); they run on a thread and a loop of their own."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
import warnings
from typing import Any

import pytest
from _waiting import LONG

import taut

pytestmark = pytest.mark.timeout(120)

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


async def _inner(tag: str) -> tuple[str, str, bool]:
    await asyncio.sleep(0)
    return tag, request_id.get(), threading.current_thread().name == "taut-nested-coroutine"


async def _failing() -> None:
    await asyncio.sleep(0)
    raise KeyError("from the nested coroutine")


def test_a_nested_sync_gather_runs_coroutines_inside_an_async_call() -> None:
    with taut.ThreadPoolExecutor(1) as pool:

        async def outer() -> list[taut.Outcome]:
            request_id.set("r-7")
            return taut.gather(
                [taut.call(_inner, "a"), taut.call(_inner, "b"), taut.call(_failing)],
                executor=pool,
            )

        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "coroutine ... was never awaited"
            [result] = taut.gather([taut.call(outer)], executor=pool)
    assert result.status == "ok", result
    first, second, failed = result.value
    # Each ran, in the outer call's context, on a thread of its own.
    assert (first.status, first.value) == ("ok", ("a", "r-7", True))
    assert (second.status, second.value) == ("ok", ("b", "r-7", True))
    assert failed.status == "error"
    assert isinstance(failed.error, KeyError)
    assert failed.error.args == ("from the nested coroutine",)


def test_a_tool_batch_nested_in_an_async_tool_runs_its_async_tools() -> None:
    runner = taut.ToolRunner(tool_workers=1)

    async def lookup(query: str) -> str:
        await asyncio.sleep(0)
        return f"found {query}"

    async def agent(topic: str) -> Any:
        [sub] = runner.run([taut.ToolCall("lookup", lookup, {"query": topic})])
        return sub.status, sub.text

    [top] = runner.run([taut.ToolCall("agent", agent, {"topic": "rust"})])
    assert top.status == "ok", top
    assert top.value == ("ok", "found rust")


def test_an_interrupting_deadline_ends_the_wait_for_a_nested_coroutine() -> None:
    # The waiting thread joins the coroutine's thread in slices, so the
    # deadline scope's interrupt lands; the coroutine is left to finish.
    with taut.ThreadPoolExecutor(1) as pool:

        async def hangs() -> str:
            await asyncio.sleep(LONG)
            return "late"

        async def outer() -> list[taut.Outcome]:
            return taut.gather([taut.call(hangs)], executor=pool, timeout=0.2, interrupt=True)

        started = time.monotonic()
        [result] = taut.gather([taut.call(outer)], executor=pool)
        took = time.monotonic() - started
    assert result.status == "ok", result
    [inner] = result.value
    assert inner.status == "timeout" and inner.started
    assert took < LONG / 2
