"""(e) a gRPC sync server on each executor (``grpc.server(executor)``),
driven from a ``grpc.aio`` client in another process over 127.0.0.1: RPCs
per second and the server process's CPU per RPC. Skipped, with the reason,
when grpcio is not installed."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import json
import subprocess
import sys
import textwrap
import time
from typing import Any, Callable

import taut
from taut._bench import Row, interleaved_samples
from taut._bench.gateway.common import WORKERS, Sample, _row, work

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
    s = interleaved_samples(
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
