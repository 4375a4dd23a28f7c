"""A batch gathered by either driver: the sync ``taut.gather`` or the async
``taut.agather`` (in a fresh event loop), for tests that must hold for both."""

from __future__ import annotations

import asyncio
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
