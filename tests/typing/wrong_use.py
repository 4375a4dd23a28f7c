"""Mistakes ``mypy --strict`` must catch in a user's script: proof that taut's
types carry information (``Any`` would let every line here pass).
``tests/test_typing.py`` expects one error on each line marked ``# error``."""

from __future__ import annotations

from concurrent.futures import Future

import taut


def square(x: int) -> int:
    return x * x


def mistakes() -> None:
    with taut.ThreadPoolExecutor(max_workers=1) as ex:
        text: str = ex.submit(square, 3).result()  # error
        fut: Future[str] = ex.submit(square, 3)  # error
        ex.submit(square, "three")  # error
        names: list[str] = list(ex.map(square, [1]))  # error
        assert text and fut and names
    bounded: str = taut.run_bounded_sync(lambda: square(2), 1.0).unwrap()  # error
    taut.PlanningConstraints(time_budget=[30])  # error
    assert bounded
