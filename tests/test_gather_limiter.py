"""gather(..., limiter=...) and ToolRunner(..., limiter=...) (issue 11 §2): a
ceiling shared beyond one pool, waited for within the deadline."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _waiting import wait_until

import taut
from taut.gather import limits


class Gauge:
    """How many calls run at once, and the most ever seen."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.ran: list[int] = []

    def work(self, i: int, seconds: float = 0.05) -> int:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.ran.append(i)
        time.sleep(seconds)
        with self.lock:
            self.now -= 1
        return i


@pytest.fixture
def pool() -> Iterator[taut.ThreadPoolExecutor]:
    with taut.ThreadPoolExecutor(8) as ex:
        yield ex


def test_a_bounded_semaphore_caps_the_calls_running_at_once(pool: Any) -> None:
    gauge, limiter = Gauge(), threading.BoundedSemaphore(2)
    outs = taut.gather([taut.call(gauge.work, i) for i in range(8)], executor=pool, limiter=limiter)
    assert [o.value for o in outs] == list(range(8))
    assert gauge.most <= 2
    assert limiter.acquire(timeout=0) and limiter.acquire(timeout=0)  # every slot came back
    free = Gauge()  # the same batch without the limiter does overlap more
    taut.gather([taut.call(free.work, i, 0.3) for i in range(8)], executor=pool)
    assert free.most > 2


def test_no_slot_before_the_deadline_is_not_started_and_never_runs(pool: Any) -> None:
    gauge, limiter = Gauge(), threading.BoundedSemaphore(1)
    limiter.acquire()  # someone else holds the only slot
    began = time.monotonic()
    outs = taut.gather(
        [taut.call(gauge.work, i) for i in range(3)], executor=pool, timeout=0.3, limiter=limiter
    )
    assert time.monotonic() - began < 10  # the caller returns on time
    assert [o.status for o in outs] == ["not_started"] * 3
    assert not any(o.started for o in outs)
    limiter.release()
    time.sleep(0.3)
    assert gauge.ran == []  # and they never run afterwards


def test_the_async_gather_waits_for_slots_without_blocking_its_loop(pool: Any) -> None:
    gauge, limiter = Gauge(), threading.BoundedSemaphore(1)
    ticks: list[float] = []

    async def main() -> list[taut.Outcome]:
        async def tick() -> None:
            for _ in range(5):
                ticks.append(time.monotonic())
                await asyncio.sleep(0.02)

        ticker = asyncio.ensure_future(tick())
        outs = await taut.agather(
            [taut.call(gauge.work, i, 0.1) for i in range(3)], executor=pool, limiter=limiter
        )
        await ticker
        return outs

    outs = asyncio.run(main())
    assert [o.value for o in outs] == [0, 1, 2]
    assert gauge.most == 1
    assert len(ticks) == 5  # the loop kept running while the batch waited for slots


def test_limiter_is_validated() -> None:
    with pytest.raises(TypeError, match="limiter must have acquire"):
        taut.gather([taut.call(int, "1")], limiter=object())
    with pytest.raises(TypeError, match="limiter must have acquire"):
        taut.ToolRunner(1, limiter=3)


class _BrokenRepr:
    def __repr__(self) -> str:
        raise RuntimeError("from the argument's __repr__")


def test_a_limiter_or_handle_with_a_broken_repr_is_refused_by_name() -> None:
    # Before: the object's own RuntimeError, naming neither limiter nor handles.
    with pytest.raises(TypeError, match=r"^limiter must have .*<unrepresentable> \(_BrokenRepr\)"):
        taut.gather([taut.call(int, "1")], limiter=_BrokenRepr())
    handle = taut.call(int, "1")
    with pytest.raises(TypeError, match=r"^handles\[1\] is not a taut call handle, got <unrep"):
        taut.gather([handle, _BrokenRepr()])  # type: ignore[list-item]
    assert not handle.done() and handle.result() == 1  # left cold, still runs


def test_tool_runner_says_waiting_for_a_free_slot() -> None:
    limiter = threading.BoundedSemaphore(1)
    notices: list[taut.QueueNotice] = []
    gauge = Gauge()
    calls = [
        taut.ToolCall("t", gauge.work, {"i": i, "seconds": 0.1}, read_only=True, call_id=f"c{i}")
        for i in range(3)
    ]
    for language, text in (
        ("en", "Waiting for a free slot"),
        ("de", "Warte auf einen freien Platz"),
    ):
        notices.clear()
        with taut.ToolRunner(4, limiter=limiter, language=language, on_notice=notices.append) as tr:
            results = tr.run(calls, timeout=30)
        assert [r.status for r in results] == ["ok"] * 3
        waiting = [n for n in notices if n.kind == "waiting"]
        assert waiting and all(n.text == text and n.position is None for n in waiting)
        started = {n.call_id for n in notices if n.kind == "started"}
        assert {n.call_id for n in waiting} == started  # every notice is cleared
    assert gauge.most == 1


# --------------------------------------------------------------------------- Dask

distributed = pytest.importorskip(
    "distributed", reason="Dask distributed is not installed (it comes with the test extra)"
)


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Any]:
    cluster = distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=8,
        processes=False,
        protocol="tcp",  # other OS processes of the fleet connect to it
        host="127.0.0.1",
        dashboard_address=None,
    )
    client = distributed.Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def test_a_dask_semaphore_caps_a_dask_batch(dask_client: Any) -> None:
    gauge = Gauge()
    limiter = distributed.Semaphore(max_leases=2, name=f"taut-test-{uuid.uuid4().hex}")
    outs = taut.gather(
        [taut.call(gauge.work, i, 0.1) for i in range(6)],
        executor=dask_client.get_executor(),
        limiter=limiter,
        timeout=60,
    )
    assert [o.value for o in outs] == list(range(6))
    assert gauge.most <= 2


FLEET_MEMBER = textwrap.dedent(
    """
    import os, sys, time
    import distributed, taut

    address, name, out_dir, who = sys.argv[1:5]
    client = distributed.Client(address)
    limiter = distributed.Semaphore(max_leases=2, name=name)

    def work(i):
        began = time.time()
        time.sleep(0.3)
        with open(os.path.join(out_dir, f"{who}-{i}"), "w") as f:
            f.write(f"{began} {time.time()}")
        return i

    with taut.ThreadPoolExecutor(4) as pool:
        outs = taut.gather([taut.call(work, i) for i in range(4)], executor=pool,
                           limiter=limiter, timeout=120)
    print(",".join(o.status for o in outs), flush=True)
    client.close()
    """
)


@pytest.mark.timeout(300)
def test_two_processes_share_one_named_dask_semaphore(dask_client: Any, tmp_path: Path) -> None:
    name = f"taut-fleet-{uuid.uuid4().hex}"
    address = dask_client.scheduler.address
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", FLEET_MEMBER, address, name, str(tmp_path), who],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in ("p1", "p2")
    ]
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        assert out.strip() == "ok,ok,ok,ok"
    spans = []
    for f in os.listdir(tmp_path):
        began, ended = (float(x) for x in (tmp_path / f).read_text().split())
        spans.append((began, ended))
    assert len(spans) == 8
    # Never more than 2 of the 8 calls of both processes at the same moment.
    events = sorted([(b, 1) for b, _ in spans] + [(e, -1) for _, e in spans])
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    assert most <= 2


def test_the_dask_release_thread_keeps_no_limiter_alive_while_it_waits() -> None:
    # Dask limiters are released on a thread of their own (a blocking RPC);
    # one it released must not live on in that thread's loop variable, with
    # its client, until the next release arrives.
    released = threading.Event()

    class Limiter:
        def release(self) -> None:
            released.set()

    limiter = Limiter()
    freed = weakref.ref(limiter)
    limits._release_soon(limiter)
    released.wait()
    del limiter
    wait_until(lambda: gc.collect() >= 0 and freed() is None)


# A batch nested in a call of an enclosing batch with the same limiter (a
# sub-agent's tool batch) runs under the slot that call holds: it must not
# wait for another one, which its own caller may hold. Each inner deadline
# is long (5 s) next to work that takes milliseconds: without the held slot
# the inner calls would end not_started at it instead of hanging.
NESTED = 5.0


async def _tick(gauge: Gauge, i: int) -> int:
    with gauge.lock:
        gauge.now += 1
        gauge.most = max(gauge.most, gauge.now)
        gauge.ran.append(i)
    await asyncio.sleep(0.01)
    with gauge.lock:
        gauge.now -= 1
    return i


def test_a_sync_sub_agent_batch_runs_under_the_slot_its_call_holds(pool: Any) -> None:
    gauge, limiter = Gauge(), threading.BoundedSemaphore(1)

    def sub_agent() -> list[str]:
        calls = [taut.call(gauge.work, i, 0.01) for i in range(3)]
        outs = taut.gather(calls, executor=pool, limiter=limiter, timeout=NESTED)
        return [o.status for o in outs]

    [o] = taut.gather([taut.call(sub_agent)], executor=pool, limiter=limiter, timeout=NESTED * 2)
    assert o.value == ["ok"] * 3 and gauge.most == 1
    assert limiter.acquire(timeout=0)  # the slot came back


def test_an_async_sub_agent_batch_runs_under_the_slot_its_call_holds(pool: Any) -> None:
    # Coroutine calls and sync calls (sent to the pool) alike: the enclosing
    # call holds the only slot, and the inner calls run one at a time under it.
    gauge, limiter = Gauge(), threading.BoundedSemaphore(1)

    async def sub_agent() -> list[str]:
        calls = [
            taut.call(_tick, gauge, 0),
            taut.call(gauge.work, 1, 0.01),
            taut.call(_tick, gauge, 2),
        ]
        outs = await taut.agather(calls, executor=pool, limiter=limiter, timeout=NESTED)
        return [o.status for o in outs]

    async def main() -> list[taut.Outcome]:
        return await taut.agather(
            [taut.call(sub_agent)], executor=pool, limiter=limiter, timeout=NESTED * 2
        )

    [o] = asyncio.run(main())
    assert o.value == ["ok"] * 3 and gauge.most == 1
    assert limiter.acquire(timeout=0)


def test_async_sub_agents_stay_within_the_limit(pool: Any) -> None:
    # Two slots, four sub-agents, each with two batches at once (tasks of its
    # own): one inner call at a time per held slot, so never more than two.
    gauge, limiter = Gauge(), threading.BoundedSemaphore(2)

    async def batch(base: int) -> list[str]:
        calls = [taut.call(_tick, gauge, base + i) for i in range(3)]
        outs = await taut.agather(calls, limiter=limiter, timeout=NESTED)
        return [o.status for o in outs]

    async def sub_agent(n: int) -> list[str]:
        first, second = await asyncio.gather(batch(10 * n), batch(10 * n + 5))
        return first + second

    async def main() -> list[taut.Outcome]:
        calls = [taut.call(sub_agent, n) for n in range(4)]
        return await taut.agather(calls, limiter=limiter, timeout=NESTED * 2)

    outs = asyncio.run(main())
    assert [o.value for o in outs] == [["ok"] * 6] * 4
    assert 1 <= gauge.most <= 2 and len(gauge.ran) == 24
    assert limiter.acquire(timeout=0) and limiter.acquire(timeout=0)


def test_an_async_batch_in_a_sync_call_runs_under_its_slot(pool: Any) -> None:
    # A sync call on a worker thread that runs its own loop: the inner batch
    # runs on that thread, inside the call, under the slot it holds.
    gauge, limiter = Gauge(), threading.BoundedSemaphore(1)

    def sub_agent() -> list[str]:
        async def inner() -> list[str]:
            calls = [taut.call(_tick, gauge, 0), taut.call(gauge.work, 1, 0.01)]
            outs = await taut.agather(calls, executor=pool, limiter=limiter, timeout=NESTED)
            return [o.status for o in outs]

        return asyncio.run(inner())

    [o] = taut.gather([taut.call(sub_agent)], executor=pool, limiter=limiter, timeout=NESTED * 2)
    assert o.value == ["ok"] * 2 and gauge.most == 1
    assert limiter.acquire(timeout=0)
