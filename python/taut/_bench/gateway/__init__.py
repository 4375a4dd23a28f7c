"""Gateway-shaped benchmarks (issue 8 §3): what a service that awaits
``run_in_executor``/``to_thread`` from an event loop, or serves requests a
few milliseconds apart, sees. Every row is measured against the standard
library in the same run (interleaved rounds, medians); where CPU matters the
process CPU seconds (``time.process_time``: every thread) are reported per
call next to the wall time, because spinning buys latency with CPU.

One module per shape:

(a) ``fanout``: asyncio fan-out: many small calls awaited from one loop, a
    bounded number in flight (an ``asyncio.Semaphore``), with the inline
    floor: the same tasks and semaphore with the call run on the loop, no
    thread at all.
(b) ``paced``: paced load: one request every 2 ms, sync and from a loop.
(c) ``loop_stall``: a 1 ms ticker while five 0.2 s calls go to a one-worker
    pool whose queue holds one call.
(d) ``scope``: a deadline scope that does not expire, per request.
(e) ``grpc_echo``: a gRPC sync server on each executor, driven from another
    process.

``common`` holds the handler, the pool size, the per-call sample and the
row builder they share. The I/O-shaped load (sleeps on 64 workers against
plain threads) is row (f) of the executor area.
"""

from __future__ import annotations

from taut._bench import Row
from taut._bench.gateway.common import WORKERS, Sample, _row, _slug, work
from taut._bench.gateway.fanout import FANOUT_KINDS, bench_fanout, fan_out, fanout, fanout_task
from taut._bench.gateway.grpc_echo import bench_grpc, grpc_missing, grpc_server_run
from taut._bench.gateway.loop_stall import STALL_CALLS, bench_loop_stall, loop_stall
from taut._bench.gateway.paced import PERIOD, bench_paced, paced_async, paced_sync
from taut._bench.gateway.scope import bench_scope, enter_exit, scope_cost, scope_factory

# What tests/ and benches/ reach through ``taut._bench.gateway``.
__all__ = [
    "FANOUT_KINDS",
    "PERIOD",
    "STALL_CALLS",
    "WORKERS",
    "Sample",
    "_row",
    "_slug",
    "bench_fanout",
    "bench_grpc",
    "bench_loop_stall",
    "bench_paced",
    "bench_scope",
    "enter_exit",
    "fan_out",
    "fanout",
    "fanout_task",
    "grpc_missing",
    "grpc_server_run",
    "loop_stall",
    "paced_async",
    "paced_sync",
    "run",
    "scope_cost",
    "scope_factory",
    "work",
]


def run(quick: bool) -> list[Row]:
    return [
        *bench_fanout(quick),
        *bench_paced(quick),
        *bench_loop_stall(quick),
        *bench_scope(quick),
        *bench_grpc(quick),
    ]
