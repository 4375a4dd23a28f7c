"""A gather nested in a gathered call ends by that call's deadline, whatever
timeout it was given (none, or a longer one): the call runs in a scope ending
at its batch's deadline, and a gather honours the scopes around it as a tool
batch does. Its calls still running then are ``timeout``, as they would be
for the outer batch."""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from typing import Any

import pytest
from _waiting import LONG

import taut

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("inner_timeout", [None, LONG])
@pytest.mark.parametrize("factory", [taut.ThreadPoolExecutor, cf.ThreadPoolExecutor])
def test_a_gather_nested_in_a_call_ends_by_that_calls_deadline(
    factory: Any, inner_timeout: float | None
) -> None:
    # Before: the nested gather waited for its own timeout (or for good),
    # and reported 'ok' for a call that ended long after the deadline it
    # was documented to end by, holding the outer worker all that time.
    timeout = 0.5  # ample for the nested gather to start its call
    gate = threading.Event()
    seen: list[tuple[list[str], float]] = []
    nested_done = threading.Event()

    def nested(inner_pool: cf.Executor) -> None:
        t0 = time.monotonic()
        try:
            outs = taut.gather(
                [taut.call(gate.wait, LONG)], executor=inner_pool, timeout=inner_timeout
            )
            seen.append(([o.status for o in outs], time.monotonic() - t0))
        finally:
            nested_done.set()

    with factory(2) as outer_pool, taut.ThreadPoolExecutor(2) as inner_pool:
        try:
            [outer] = taut.gather(
                [taut.call(nested, inner_pool)], executor=outer_pool, timeout=timeout
            )
            assert nested_done.wait(LONG / 2), "the nested gather did not end by the deadline"
        finally:
            gate.set()
    assert outer.status == "timeout"
    [(statuses, took)] = seen
    assert statuses == ["timeout"]
    assert took < LONG / 2
