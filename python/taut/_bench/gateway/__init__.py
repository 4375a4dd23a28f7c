"""Gateway-shaped benchmarks (issue 8 §3): what a service that awaits
``run_in_executor``/``to_thread`` from an event loop, or serves requests a
few milliseconds apart, sees. Every row is measured against the standard
library in the same run (interleaved rounds, medians); where CPU matters the
process CPU seconds (``time.process_time``: every thread) are reported per
call next to the wall time, because spinning buys latency with CPU.

(a) asyncio fan-out: many small calls awaited from one loop, a bounded number
    in flight (an ``asyncio.Semaphore``), with the inline floor: the same
    tasks and semaphore with the call run on the loop, no thread at all.
(b) paced load: one request every 2 ms, sync and from a loop.
(c) loop stall: a 1 ms ticker while five 0.2 s calls go to a one-worker pool
    whose queue holds one call.
(d) a deadline scope that does not expire, per request.
(e) a gRPC sync server on each executor, driven from another process.
The I/O-shaped load (sleeps on 64 workers against plain threads) is row (f)
of the executor area.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import dataclasses
import functools
import json
import re
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Sequence
from typing import Any, Callable, NamedTuple

import taut
from taut._bench import Row, paired_row

WORKERS = 8  # pool size of the fan-out, paced and gRPC cases


def work() -> int:
    """The tiny handler of every case: about a microsecond of Python."""
    return sum(range(20))


class Sample(NamedTuple):
    """One measurement: wall seconds and process CPU seconds, per call."""

    wall: float
    cpu: float


def interleaved(runners: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[Any]]:
    """Each runner once per round, alternating, every sample kept in round
    order (round i of every runner ran under the same neighbours' load)."""
    samples: dict[str, list[Any]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, fn in runners.items():
            samples[name].append(fn())
    return samples


def _row(
    case: str,
    baseline_name: str,
    base: Sequence[float],
    mine: Sequence[float],
    *,
    unit: str = "s",
    better: str = "lower",
    target: str,
    limit: float | None,
    note: str = "",
) -> Row:
    """A row from paired per-round samples. ``limit``: the ratio (of the
    medians) the target allows, in the row's direction; None for an
    informational row. The only place that builds a Row here, so a change of
    the shared Row API lands in one function."""
    def within(row: Row) -> bool:
        assert limit is not None
        return row.ratio <= limit if better == "lower" else row.ratio >= limit

    return paired_row(
        key="gateway." + _slug(case),
        case=case,
        baseline_name=baseline_name,
        baseline=base,
        taut=mine,
        unit=unit,
        better=better,
        target=target,
        met=None if limit is None else within,
        note=note,
    )


def _slug(case: str) -> str:
    """A stable key from a display name: its words and fixed numbers (calls
    in flight, workers), without the load size, which --quick changes."""
    text = re.sub(r"[\d,]+ (calls|requests|unary rpcs)", "", case.lower())
    return "_".join(re.findall(r"[a-z0-9_]+", text.replace(".", "_")))


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs"


# -- (a) asyncio fan-out -----------------------------------------------------------

FANOUT_KINDS = (
    "stdlib",
    "taut run_in_executor",
    "taut.to_thread",
    "executor.run",
    "inline",
    "suspend",
)


def fanout_task(
    kind: str, loop: asyncio.AbstractEventLoop, workers: int = WORKERS
) -> tuple[Callable[[asyncio.Semaphore], Awaitable[int]], cf.ThreadPoolExecutor | None]:
    """The body of one fan-out task for ``kind`` (it takes the semaphore),
    and the executor to shut down afterwards (None: none, or the loop's
    default executor, which the loop shuts down itself).

    Two floors without any thread: ``inline`` calls ``work`` on the loop
    (the task never suspends, so the semaphore never makes anyone wait);
    ``suspend`` also runs it on the loop but awaits a future that a loop
    callback settles, so each task suspends once and the semaphore queues
    the others, as with any call that leaves the loop. What a thread hop
    can get down to is the second; the first is below any of them."""
    ex: cf.ThreadPoolExecutor | None = None
    call: Callable[[], Awaitable[int]]
    if kind == "stdlib":
        ex = cf.ThreadPoolExecutor(workers)
        call = functools.partial(loop.run_in_executor, ex, work)
    elif kind == "taut run_in_executor":
        ex = taut.ThreadPoolExecutor(workers)
        call = functools.partial(loop.run_in_executor, ex, work)
    elif kind == "taut.to_thread":
        # As a gateway would: the taut executor is the loop's default.
        loop.set_default_executor(taut.ThreadPoolExecutor(workers))
        call = functools.partial(taut.to_thread, work)
    elif kind == "executor.run":
        tex = taut.ThreadPoolExecutor(workers)
        ex = tex
        call = functools.partial(tex.run, work)
    elif kind == "inline":

        async def inline(sem: asyncio.Semaphore) -> int:
            async with sem:
                return work()

        return inline, None
    elif kind == "suspend":

        async def suspend(sem: asyncio.Semaphore) -> int:
            async with sem:
                settled: asyncio.Future[int] = loop.create_future()
                loop.call_soon(settled.set_result, work())
                return await settled

        return suspend, None
    else:
        raise ValueError(f"unknown fan-out kind {kind!r}")

    async def one(sem: asyncio.Semaphore) -> int:
        async with sem:
            return await call()

    return one, ex


async def fan_out(
    one: Callable[[asyncio.Semaphore], Awaitable[int]], n: int, in_flight: int
) -> None:
    """``n`` tasks at once, at most ``in_flight`` inside the semaphore."""
    sem = asyncio.Semaphore(in_flight)
    await asyncio.gather(*[one(sem) for _ in range(n)])


def fanout(kind: str, n: int, in_flight: int, workers: int = WORKERS) -> Sample:
    """``n`` calls of ``work`` by ``kind`` (see :func:`fanout_task`), at most
    ``in_flight`` at a time, in a fresh loop; wall and CPU per call."""

    async def main() -> Sample:
        one, ex = fanout_task(kind, asyncio.get_running_loop(), workers)
        # Workers started (and the loop's channel made) outside the timing.
        await fan_out(one, 4 * workers, in_flight)
        wall, cpu = time.perf_counter(), time.process_time()
        await fan_out(one, n, in_flight)
        sample = Sample((time.perf_counter() - wall) / n, (time.process_time() - cpu) / n)
        if ex is not None:
            ex.shutdown(wait=True)
        return sample

    return asyncio.run(main())


def bench_fanout(quick: bool) -> list[Row]:
    n = 4_000 if quick else 20_000
    rounds = 3 if quick else 5
    rows: list[Row] = []
    for in_flight in (256, 16):
        s = interleaved(
            {k: functools.partial(fanout, k, n, in_flight) for k in FANOUT_KINDS}, rounds
        )
        wall = {k: [x.wall for x in v] for k, v in s.items()}
        cpu = {k: [x.cpu for x in v] for k, v in s.items()}
        mw = {k: statistics.median(v) for k, v in wall.items()}
        mc = {k: statistics.median(v) for k, v in cpu.items()}
        head = f"(a) fan-out {n:,} calls, {in_flight} in flight, {WORKERS} workers:"
        base = "stdlib run_in_executor"
        tt = "taut.to_thread"

        def cpu_note(kind: str, mc: dict[str, float] = mc) -> str:
            return f"CPU/call {_us(mc[kind])} vs {_us(mc['stdlib'])} stdlib"

        rows += [
            _row(
                f"{head} {tt}",
                base,
                wall["stdlib"],
                wall[tt],
                target="<= 0.5x",
                limit=0.5,
                note=cpu_note(tt),
            ),
            _row(
                f"{head} {tt} CPU",
                f"{base} CPU",
                cpu["stdlib"],
                cpu[tt],
                target="<= 1.0x CPU",
                limit=1.0,
            ),
            _row(
                f"{head} {tt} vs floor",
                "inline floor (no thread)",
                wall["inline"],
                wall[tt],
                target="<= 2x floor",
                limit=2.0,
                note=f"CPU/call {_us(mc[tt])} vs {_us(mc['inline'])} floor",
            ),
            _row(
                f"{head} suspend floor (no thread)",
                "inline floor (no thread)",
                wall["inline"],
                wall["suspend"],
                target="",
                limit=None,
                note=(
                    "each task awaits a future settled by a loop callback: CPU/call "
                    f"{_us(mc['suspend'])}; {tt} / suspend floor: "
                    f"{mw[tt] / mw['suspend']:.2f}x wall, {mc[tt] / mc['suspend']:.2f}x CPU"
                ),
            ),
            _row(
                f"{head} loop.run_in_executor(taut)",
                base,
                wall["stdlib"],
                wall["taut run_in_executor"],
                target="<= 0.7x",
                limit=0.7,
                note=cpu_note("taut run_in_executor"),
            ),
            _row(
                f"{head} loop.run_in_executor(taut) CPU",
                f"{base} CPU",
                cpu["stdlib"],
                cpu["taut run_in_executor"],
                target="<= 1.0x CPU",
                limit=1.0,
            ),
            _row(
                f"{head} await executor.run",
                base,
                wall["stdlib"],
                wall["executor.run"],
                target="",
                limit=None,
                note=cpu_note("executor.run"),
            ),
        ]
    return rows


# -- (b) paced load ----------------------------------------------------------------

PERIOD = 0.002  # one request every 2 ms


def paced_sync(factory: Callable[[int], cf.ThreadPoolExecutor], n: int) -> Sample:
    """One ``submit(work).result()`` every ``PERIOD``: the median latency of a
    request and the process CPU per request (pacing included, same for both)."""
    with factory(WORKERS) as ex:
        ex.submit(work).result()
        latencies = []
        next_at = time.perf_counter()
        cpu = time.process_time()
        for _ in range(n):
            next_at += PERIOD
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            start = time.perf_counter()
            ex.submit(work).result()
            latencies.append(time.perf_counter() - start)
        cpu = time.process_time() - cpu
    return Sample(statistics.median(latencies), cpu / n)


def paced_async(kind: str, n: int) -> Sample:
    """The same pace from an event loop: ``await loop.run_in_executor`` on
    the stdlib's pool against ``await executor.run`` on taut's."""

    async def main() -> Sample:
        loop = asyncio.get_running_loop()
        call: Callable[[], Any]
        if kind == "stdlib":
            ex: cf.ThreadPoolExecutor = cf.ThreadPoolExecutor(WORKERS)
            call = lambda: loop.run_in_executor(ex, work)  # noqa: E731
        else:
            tex = taut.ThreadPoolExecutor(WORKERS)
            ex = tex
            call = lambda: tex.run(work)  # noqa: E731
        await call()
        latencies = []
        next_at = time.perf_counter()
        cpu = time.process_time()
        for _ in range(n):
            next_at += PERIOD
            delay = next_at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            start = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - start)
        cpu = time.process_time() - cpu
        ex.shutdown(wait=True)
        return Sample(statistics.median(latencies), cpu / n)

    return asyncio.run(main())


def bench_paced(quick: bool) -> list[Row]:
    n = 200 if quick else 500
    rounds = 3 if quick else 5
    s = interleaved(
        {
            "stdlib": lambda: paced_sync(cf.ThreadPoolExecutor, n),
            "taut": lambda: paced_sync(taut.ThreadPoolExecutor, n),
            "stdlib async": lambda: paced_async("stdlib", n),
            "taut async": lambda: paced_async("taut", n),
        },
        rounds,
    )
    rows = []
    for suffix, how, base_how in (
        ("", "submit(work).result()", "stdlib"),
        (" async", "await executor.run(work)", "stdlib run_in_executor"),
    ):
        head = f"(b) paced: {how} every {PERIOD * 1e3:.0f} ms, {n} requests,"
        base, mine = s["stdlib" + suffix], s["taut" + suffix]
        rows += [
            _row(
                f"{head} CPU per request",
                f"{base_how} CPU",
                [x.cpu for x in base],
                [x.cpu for x in mine],
                target="<= 1.0x CPU",
                limit=1.0,
            ),
            _row(
                f"{head} latency (median)",
                base_how,
                [x.wall for x in base],
                [x.wall for x in mine],
                target="no worse (<= 1.0x)",
                limit=1.0,
            ),
        ]
    return rows


# -- (c) loop stall on a full bounded queue -------------------------------------------

STALL_CALLS = 5
STALL_SLEEP = 0.2
TICK = 0.001


def loop_stall(kind: str) -> tuple[float, int]:
    """The worst gap between ticks of a 1 ms ticker while ``STALL_CALLS``
    calls of ``time.sleep(STALL_SLEEP)`` go to a one-worker default executor,
    and how many calls were refused with QueueFull.

    ``stdlib``: ``asyncio.to_thread`` on the stdlib's pool (unbounded queue);
    ``taut.to_thread``: taut's pool with ``max_queue=1``, calls that do not
    fit wait for room on the loop; ``asyncio.to_thread``: the same pool
    through asyncio's own ``to_thread`` (``submit`` on the loop's thread
    refuses a full queue at once); ``idle``: the ticker alone for as long as
    the calls take, this machine's own floor."""

    async def main() -> tuple[float, int]:
        loop = asyncio.get_running_loop()
        if kind == "stdlib":
            loop.set_default_executor(cf.ThreadPoolExecutor(1))
        elif kind != "idle":
            loop.set_default_executor(taut.ThreadPoolExecutor(1, max_queue=1))
        await asyncio.to_thread(int)  # the worker started outside the measurement
        worst = 0.0
        stop = False

        async def ticker() -> None:
            nonlocal worst
            last = time.perf_counter()
            while not stop:
                await asyncio.sleep(TICK)
                now = time.perf_counter()
                worst = max(worst, now - last)
                last = now

        ticking = asyncio.ensure_future(ticker())
        await asyncio.sleep(0.01)  # the ticker is running before the calls start
        if kind == "idle":
            await asyncio.sleep(STALL_CALLS * STALL_SLEEP)
            outcomes: list[Any] = []
        else:
            to_thread = taut.to_thread if kind == "taut.to_thread" else asyncio.to_thread
            outcomes = await asyncio.gather(
                *[to_thread(time.sleep, STALL_SLEEP) for _ in range(STALL_CALLS)],
                return_exceptions=True,
            )
        stop = True
        await ticking
        refused = sum(isinstance(o, taut.QueueFull) for o in outcomes)
        return worst, refused

    return asyncio.run(main())


def bench_loop_stall(quick: bool) -> list[Row]:
    rounds = 1 if quick else 3
    kinds = ("idle", "stdlib", "taut.to_thread", "asyncio.to_thread")
    s = interleaved({k: functools.partial(loop_stall, k) for k in kinds}, rounds)
    worst = {k: [w for w, _ in v] for k, v in s.items()}
    refused = max(r for _, r in s["asyncio.to_thread"])
    note = (
        f"max over {rounds} round(s): taut {max(worst['taut.to_thread']) * 1e3:.1f} ms, "
        f"stdlib {max(worst['stdlib']) * 1e3:.1f} ms, ticker alone "
        f"{max(worst['idle']) * 1e3:.1f} ms; asyncio.to_thread on the taut pool: "
        f"{refused}/{STALL_CALLS} refused at once with QueueFull, worst gap "
        f"{max(worst['asyncio.to_thread']) * 1e3:.1f} ms"
    )
    taut_worst = statistics.median(worst["taut.to_thread"])
    row = _row(
        f"(c) loop stall: {STALL_CALLS} x to_thread(sleep {STALL_SLEEP:g} s), "
        f"1 worker, max_queue=1, worst gap of a {TICK * 1e3:.0f} ms ticker",
        "stdlib (unbounded queue)",
        worst["stdlib"],
        worst["taut.to_thread"],
        target="< 20 ms",
        limit=None,
        note=note,
    )
    # The target is absolute, not a ratio against the stdlib.
    return [dataclasses.replace(row, target="< 20 ms", met=taut_worst < 0.020)]


# -- (d) a deadline scope per request ----------------------------------------------

FAR = 30.0


class _EmptyScope:
    """The cheapest possible ``async with`` written in Python: what any
    scope implemented as a Python class pays before doing anything."""

    async def __aenter__(self) -> _EmptyScope:
        return self

    async def __aexit__(self, *exc: object) -> bool:
        return False


def scope_factory(kind: str) -> Callable[[float], Any]:
    """``taut`` (``taut.fail_after``), ``asyncio`` (``asyncio.timeout``,
    3.11+) or ``empty`` (:class:`_EmptyScope`)."""
    if kind == "taut":
        return taut.fail_after
    if kind == "asyncio":
        timeout: Callable[[float], Any] = asyncio.timeout  # type: ignore[attr-defined,unused-ignore]
        return timeout
    if kind == "empty":
        return lambda _seconds: _EmptyScope()
    raise ValueError(f"unknown scope kind {kind!r}")


async def enter_exit(kind: str, n: int) -> None:
    """``n`` times ``async with <scope>(30): pass``, never expiring."""
    scope = scope_factory(kind)
    for _ in range(n):
        async with scope(FAR):
            pass


def scope_cost(kind: str, n: int) -> Sample:
    """Wall and CPU seconds per scope of :func:`enter_exit`."""

    async def main() -> Sample:
        wall, cpu = time.perf_counter(), time.process_time()
        await enter_exit(kind, n)
        return Sample((time.perf_counter() - wall) / n, (time.process_time() - cpu) / n)

    return asyncio.run(main())


def bench_scope(quick: bool) -> list[Row]:
    if sys.version_info < (3, 11):
        print("gateway (d) skipped: asyncio.timeout needs Python 3.11+", file=sys.stderr)
        return []
    n = 20_000 if quick else 100_000
    s = interleaved(
        {k: functools.partial(scope_cost, k, n) for k in ("asyncio", "taut", "empty")},
        3 if quick else 7,
    )
    wall = {k: [x.wall for x in v] for k, v in s.items()}
    cpu = {k: [x.cpu for x in v] for k, v in s.items()}
    head = f"(d) async with fail_after({FAR:g}) enter+exit, not expiring"
    base = f"asyncio.timeout({FAR:g})"
    return [
        _row(head, base, wall["asyncio"], wall["taut"], target="<= 0.5x", limit=0.5),
        _row(
            f"{head}, CPU", f"{base} CPU", cpu["asyncio"], cpu["taut"], target="<= 0.5x", limit=0.5
        ),
        _row(
            "(d) floor: an empty Python `async with` (no deadline at all), CPU",
            f"{base} CPU",
            cpu["asyncio"],
            cpu["empty"],
            target="",
            limit=None,
            note="what any scope written as a Python class costs before arming anything",
        ),
    ]


# -- (e) gRPC sync server ------------------------------------------------------------

GRPC_METHOD = "/taut.bench.Gateway/Echo"

# The client: another process, grpc.aio, `in_flight` lanes sharing one
# counter. It warms up, says "ready", waits for a line on stdin (the server
# side reads its CPU clock then), and prints the wall time of the run.
_GRPC_CLIENT = """
import asyncio, json, sys, time, grpc
port, n, in_flight = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
async def main():
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(sys.argv[4])
        payload = b"x" * 64
        await asyncio.gather(*[call(payload) for _ in range(2 * in_flight)])
        print("ready", flush=True)
        sys.stdin.readline()
        todo = iter(range(n))
        async def lane():
            for _ in todo:
                assert await call(payload) == payload
        start = time.perf_counter()
        await asyncio.gather(*[lane() for _ in range(in_flight)])
        print(json.dumps(time.perf_counter() - start), flush=True)
asyncio.run(main())
"""


def grpc_missing() -> str | None:
    """Why the gRPC case cannot run, or None."""
    try:
        import grpc  # type: ignore[import-untyped,import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        return "grpcio is not installed (pip install grpcio)"
    return None


def grpc_server_run(
    factory: Callable[[int], cf.ThreadPoolExecutor], n: int, in_flight: int
) -> Sample:
    """``n`` unary RPCs (64 bytes echoed, ``work()`` per call) served by
    ``grpc.server(factory(WORKERS))`` in this process, from a client process
    over 127.0.0.1: seconds per RPC (so 1/RPCs per second) and this (server)
    process's CPU seconds per RPC."""
    import grpc  # type: ignore[import-untyped,import-not-found,unused-ignore]

    def echo(request: bytes, context: Any) -> bytes:
        work()
        return request

    # No serializers: the handler sees and returns raw bytes (no protoc).
    handler = grpc.method_handlers_generic_handler(
        "taut.bench.Gateway", {"Echo": grpc.unary_unary_rpc_method_handler(echo)}
    )
    executor = factory(WORKERS)
    server = grpc.server(executor, handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        client = subprocess.Popen(
            [
                sys.executable,
                "-c",
                textwrap.dedent(_GRPC_CLIENT),
                str(port),
                str(n),
                str(in_flight),
                GRPC_METHOD,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert client.stdin is not None and client.stdout is not None
        try:
            if client.stdout.readline().strip() != "ready":
                raise RuntimeError("gRPC bench client failed to start")
            cpu = time.process_time()
            client.stdin.write("go\n")
            client.stdin.flush()
            line = client.stdout.readline()
            cpu = time.process_time() - cpu
            if not line:
                raise RuntimeError("gRPC bench client died")
            wall: float = json.loads(line)
        finally:
            with contextlib.suppress(OSError):
                client.stdin.close()
            try:
                client.wait(timeout=60)
            except subprocess.TimeoutExpired:
                client.kill()
                client.wait()
    finally:
        server.stop(grace=None).wait()
        executor.shutdown(wait=True)
    return Sample(wall / n, cpu / n)


def bench_grpc(quick: bool) -> list[Row]:
    why = grpc_missing()
    if why is not None:
        print(f"gateway (e) gRPC skipped: {why}", file=sys.stderr)
        return []
    n = 2_000 if quick else 20_000
    in_flight = 48
    s = interleaved(
        {
            "stdlib": lambda: grpc_server_run(cf.ThreadPoolExecutor, n, in_flight),
            "taut": lambda: grpc_server_run(taut.ThreadPoolExecutor, n, in_flight),
        },
        3 if quick else 5,
    )
    head = f"(e) gRPC sync server, {n:,} unary RPCs, {in_flight} in flight, {WORKERS} workers:"
    return [
        _row(
            f"{head} RPCs/s",
            "stdlib ThreadPoolExecutor",
            [1 / x.wall for x in s["stdlib"]],
            [1 / x.wall for x in s["taut"]],
            unit="/s",
            better="higher",
            target="",
            limit=None,
            note="client: grpc.aio in another process over 127.0.0.1",
        ),
        _row(
            f"{head} server CPU per RPC",
            "stdlib ThreadPoolExecutor",
            [x.cpu for x in s["stdlib"]],
            [x.cpu for x in s["taut"]],
            target="<= 1.0x CPU",
            limit=1.0,
        ),
    ]


def run(quick: bool) -> list[Row]:
    return [
        *bench_fanout(quick),
        *bench_paced(quick),
        *bench_loop_stall(quick),
        *bench_scope(quick),
        *bench_grpc(quick),
    ]
