"""A batch gathered by either driver: the sync ``taut.gather`` or the async
``taut.agather`` (in a fresh event loop), for tests that must hold for both;
and a pool behind a wrapper a batch cannot know by its type."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
from typing import Any

import pytest

import taut

both_drivers = pytest.mark.parametrize("asynchronous", [False, True], ids=["gather", "agather"])


def gather_with(asynchronous: bool, handles: list[Any], **kwargs: Any) -> list[taut.Outcome]:
    """``taut.gather(handles, **kwargs)``, or the same through ``agather``."""
    if asynchronous:

        async def main() -> list[taut.Outcome]:
            return await taut.agather(handles, **kwargs)

        return asyncio.run(main())
    return taut.gather(handles, **kwargs)


class Wrapping(cf.Executor):
    """A plain wrapper around a pool, as an application writes one (to count
    or log its calls, say): a batch cannot know it by its type."""

    def __init__(self, pool: cf.Executor) -> None:
        self.pool = pool

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        return self.pool.submit(fn, *args, **kwargs)
