"""A call's exception must not keep the call's frames alive through taut.

The exception's traceback holds the frames it passed through, and so their
locals (a gateway's request data). If one of taut's own frames on that path
also holds what holds the exception (a future, a task), the two make a
reference cycle: the frames then live until the cyclic collector runs, which
in a long-running process can be much later. The standard library frees them
at once (``submit(fn).result()``, ``asyncio.to_thread``), and so must taut.

Each test runs the shape many times with the collector disabled and counts
the locals still alive once the exception is dropped: none may be (a
lopsided allowance of a few absorbs anything a busy machine could leave).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import threading
import time
import types
import weakref
from collections.abc import Callable, Iterator

import pytest

import taut

RUNS = 200
ALLOWED = 5  # of RUNS: a leak keeps every one of them


class _Payload:
    """A local of the failing call: alive while its frame is."""


class _Tracker:
    def __init__(self) -> None:
        self.refs: list[weakref.ref[_Payload]] = []

    def make(self) -> _Payload:
        payload = _Payload()
        self.refs.append(weakref.ref(payload))
        return payload

    def alive(self) -> int:
        return sum(ref() is not None for ref in self.refs)

    def assert_freed(self) -> None:
        alive = self.alive()
        assert alive <= ALLOWED, f"{alive} of {len(self.refs)} payloads alive: {self._holders()}"

    def _holders(self) -> str:
        """For a failure's message: the chain of objects that keeps one live
        payload alive (what to fix), the threads still running, and whether
        the cyclic collector frees the payloads (a cycle) or not (a live
        holder)."""
        chain: list[str] = []
        current: object = next(payload for ref in self.refs if (payload := ref()) is not None)
        seen = {id(self.refs), id(chain)}
        here = _Tracker._holders.__code__
        for _ in range(16):
            seen.add(id(current))
            referrers = [
                r
                for r in gc.get_referrers(current)
                if id(r) not in seen and not (isinstance(r, types.FrameType) and r.f_code is here)
            ]
            if not referrers:
                break
            current = referrers[0]
            described = type(current).__qualname__
            if isinstance(current, types.FrameType):
                code = current.f_code
                described += f" {code.co_name} ({code.co_filename}:{current.f_lineno})"
            elif isinstance(current, types.ModuleType):
                described += f" {current.__name__}"
            chain.append(described)
            del referrers
        del current
        threads = sorted(thread.name for thread in threading.enumerate())
        gc.collect()
        return (
            f"held by {' <- '.join(chain)}; threads {threads}; "
            f"{self.alive()} alive after a collection"
        )


@pytest.fixture
def tracker() -> Iterator[_Tracker]:
    gc.collect()
    gc.disable()
    try:
        yield _Tracker()
    finally:
        gc.enable()


def _fails(make: Callable[[], _Payload]) -> None:
    payload = make()  # noqa: F841 - kept alive by this frame only
    raise ValueError("the call failed")


async def _afails(make: Callable[[], _Payload]) -> None:
    payload = make()  # noqa: F841 - kept alive by this frame only
    await asyncio.sleep(0)
    raise ValueError("the call failed")


def test_run_bounded_sync_frees_the_failed_calls_frames(tracker: _Tracker) -> None:
    for _ in range(RUNS):
        with pytest.raises(ValueError):
            taut.run_bounded_sync(lambda: _fails(tracker.make), 30)
    tracker.assert_freed()


def test_run_bounded_sync_of_a_future_frees_the_failed_calls_frames(tracker: _Tracker) -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        for _ in range(RUNS):
            with pytest.raises(ValueError):
                taut.run_bounded_sync(pool.submit(_fails, tracker.make), 30)
    tracker.assert_freed()


@pytest.mark.parametrize("timeout", [30, None])
def test_run_bounded_async_frees_the_failed_calls_frames(
    tracker: _Tracker, timeout: float | None
) -> None:
    async def main() -> None:
        for _ in range(RUNS):
            with pytest.raises(ValueError):
                await taut.run_bounded_async(_afails(tracker.make), timeout)

    asyncio.run(main())
    tracker.assert_freed()


@pytest.mark.parametrize("timeout", [30, None])
def test_run_bounded_async_of_a_task_frees_the_failed_calls_frames(
    tracker: _Tracker, timeout: float | None
) -> None:
    async def main() -> None:
        for _ in range(RUNS):
            task = asyncio.ensure_future(_afails(tracker.make))
            with pytest.raises(ValueError):
                await taut.run_bounded_async(task, timeout)
            del task

    asyncio.run(main())
    tracker.assert_freed()


@pytest.mark.parametrize("path", ["run", "to_thread", "run_in_executor"])
def test_the_asyncio_path_frees_the_failed_calls_frames(tracker: _Tracker, path: str) -> None:
    async def main(executor: taut.ThreadPoolExecutor) -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(executor)
        for _ in range(RUNS):
            with pytest.raises(ValueError):
                if path == "run":
                    await executor.run(_fails, tracker.make)
                elif path == "to_thread":
                    await taut.to_thread(_fails, tracker.make)
                else:
                    await loop.run_in_executor(executor, _fails, tracker.make)

    with taut.ThreadPoolExecutor(2) as executor:
        asyncio.run(main(executor))
    tracker.assert_freed()


def test_the_standard_library_frees_them_too(tracker: _Tracker) -> None:
    """The yardstick: asyncio.to_thread on the standard library's pool."""

    async def main() -> None:
        for _ in range(RUNS):
            with pytest.raises(ValueError):
                await asyncio.to_thread(_fails, tracker.make)

    asyncio.run(main())
    tracker.assert_freed()


# -- gathers, handles and tool batches --------------------------------------
# A gather keeps a failed call's exception as its outcome, on purpose; once
# the caller drops the outcomes and handles, the batch must go at once,
# with the frames of its failed calls and the values of the others.


def _returns(make: Callable[[], _Payload]) -> _Payload:
    return make()


def test_gather_frees_a_finished_batch_at_once(tracker: _Tracker) -> None:
    for _ in range(RUNS // 2):
        taut.gather(
            [taut.call(_fails, tracker.make), taut.call(_returns, tracker.make)], timeout=30
        )
    tracker.assert_freed()


def test_gather_without_a_timeout_frees_a_finished_batch_at_once(tracker: _Tracker) -> None:
    for _ in range(RUNS):
        taut.gather([taut.call(_fails, tracker.make)])
    tracker.assert_freed()


@pytest.mark.parametrize("kind", ["sync", "coroutine"])
def test_agather_frees_a_finished_batch_at_once(tracker: _Tracker, kind: str) -> None:
    fn = _fails if kind == "sync" else _afails

    async def main() -> None:
        for _ in range(RUNS):
            await taut.agather([taut.call(fn, tracker.make)], timeout=30)

    asyncio.run(main())
    tracker.assert_freed()


def test_a_handles_result_frees_the_failed_calls_frames(tracker: _Tracker) -> None:
    for _ in range(RUNS):
        with pytest.raises(ValueError):
            taut.call(_fails, tracker.make).result()
    tracker.assert_freed()


@pytest.mark.parametrize("kind", ["sync", "coroutine"])
def test_awaiting_a_handle_frees_the_failed_calls_frames(tracker: _Tracker, kind: str) -> None:
    fn = _fails if kind == "sync" else _afails

    async def main() -> None:
        for _ in range(RUNS):
            with pytest.raises(ValueError):
                await taut.call(fn, tracker.make)

    asyncio.run(main())
    tracker.assert_freed()


def test_an_outcomes_unwrap_frees_the_failed_calls_frames(tracker: _Tracker) -> None:
    handles = [taut.call(_fails, tracker.make) for _ in range(RUNS)]
    outcomes = taut.gather(handles, timeout=30)
    del handles
    for outcome in outcomes:
        with pytest.raises(ValueError):
            outcome.unwrap()
    del outcomes, outcome
    tracker.assert_freed()


def _errors(outcomes: list[taut.Outcome]) -> int:
    return sum(outcome.status == "error" for outcome in outcomes)


@pytest.mark.parametrize("kind", ["gather", "agather"])
def test_a_gather_nested_in_a_call_on_its_pool_frees_the_failed_calls_frames(
    tracker: _Tracker, kind: str
) -> None:
    """Nested in a call on its own pool, a batch runs its calls inline, so a
    failed call's traceback reaches every frame of the gather up the stack
    (``f_back``): before, those frames kept the batch, and every failed
    call's frames lived until the collector ran. (The functions here hold
    no handle or outcome in a local: one that does closes the same cycle
    itself, as any frame holding an exception raised below it.)"""

    def handles() -> list[taut.Call[None]]:
        return [taut.call(_fails, tracker.make) for _ in range(RUNS // 4)]

    def nested(pool: taut.ThreadPoolExecutor) -> int:
        if kind == "gather":
            return _errors(taut.gather(handles(), timeout=30, executor=pool))

        async def main() -> int:
            return _errors(await taut.agather(handles(), timeout=30, executor=pool))

        return asyncio.run(main())

    with taut.ThreadPoolExecutor(2) as pool:
        for _ in range(4):
            assert pool.submit(nested, pool).result(timeout=30) == RUNS // 4
    tracker.assert_freed()


def test_a_tool_batch_frees_its_failed_tools_frames(tracker: _Tracker) -> None:
    with taut.ToolRunner(tool_workers=2) as runner:
        for _ in range(RUNS // 2):
            batch = [
                taut.ToolCall("fails", _fails, {"make": tracker.make}, read_only=True),
                taut.ToolCall("fails_alone", _fails, {"make": tracker.make}),
            ]
            results = runner.run(batch, timeout=30)
            assert [r.status for r in results] == ["error", "error"]
            del results
    tracker.assert_freed()


def test_a_tool_batch_nested_in_a_tool_frees_its_failed_tools_frames(tracker: _Tracker) -> None:
    """A tool that runs a batch on its own runner (a sub-agent): the inner
    tools run inline, and their tracebacks reach the runner's frames."""
    with taut.ToolRunner(tool_workers=2) as runner:

        def sub_agent() -> list[str]:
            batch = [
                taut.ToolCall("fails", _fails, {"make": tracker.make}, read_only=True)
                for _ in range(RUNS // 8)
            ]
            return [result.status for result in runner.run(batch, timeout=30)]

        for _ in range(8):
            [outer] = runner.run([taut.ToolCall("sub_agent", sub_agent, {})], timeout=30)
            assert outer.value == ["error"] * (RUNS // 8)
            del outer
    tracker.assert_freed()


# -- an abandoned worker ------------------------------------------------------


def test_an_abandoned_call_that_fails_frees_its_frames_when_its_thread_ends(
    tracker: _Tracker,
) -> None:
    """The worker of an abandoned call ends once the call returns; a call
    that failed must not stay alive in a cycle with that thread's last frame
    (before: every one did, until the collector ran)."""
    threads: list[threading.Thread] = []

    def fails_when_told(make: Callable[[], _Payload], go: threading.Event) -> None:
        threads.append(threading.current_thread())
        payload = make()  # noqa: F841 - kept alive by this frame only
        go.wait(30)
        raise ValueError("the call failed")

    with taut.ThreadPoolExecutor(2) as executor:
        for _ in range(RUNS // 4):
            go = threading.Event()
            future = executor.submit(fails_when_told, tracker.make, go)
            while not future.running():
                time.sleep(0.001)
            executor.abandon(future)
            go.set()
            with pytest.raises(ValueError):
                future.result(timeout=30)
            del future
        for thread in threads:
            thread.join(30)
            assert not thread.is_alive()
    tracker.assert_freed()
