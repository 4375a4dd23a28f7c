"""Functions the multi-process Dask tests run on workers (importable there by
name: the workers inherit sys.path). Each call leaves a marker file the moment
it begins, so a test can see what really started in another process."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import taut


def mark(marker_dir: str, name: str) -> None:
    with open(os.path.join(marker_dir, name), "x"):
        pass


def mark_then_sleep(marker_dir: str, name: str, seconds: float) -> str:
    mark(marker_dir, name)
    end = time.monotonic() + seconds
    while time.monotonic() < end:  # Python code: an interrupt lands between sleeps
        time.sleep(0.02)
    return name


def mark_then_exit(marker_dir: str, name: str) -> None:
    mark(marker_dir, name)
    os._exit(3)  # ends the worker process: its pool breaks


def remaining_here(marker_dir: str, name: str) -> float | None:
    mark(marker_dir, name)
    with taut.move_on_after(1000.0) as inner:  # a nested scope keeps the outer deadline
        assert inner is not None
        return taut.remaining()


def pid() -> int:
    """This process's id (run on every worker, it also imports taut there)."""
    return os.getpid()


def double(x: int) -> int:
    return 2 * x


class ComesBackBroken(Exception):
    """An exception that pickles where it is raised but does not unpickle
    (like one whose ``__init__`` takes more than its ``args``; that kind
    unpickles once some library, distributed's tblib, patches exceptions)."""

    def __reduce__(self) -> tuple[object, ...]:
        return (_refuse_to_unpickle, (str(self),))


def _refuse_to_unpickle(message: str) -> None:
    raise TypeError(f"cannot rebuild ComesBackBroken({message!r})")


def raise_comes_back_broken() -> None:
    raise ComesBackBroken("refused")


def return_a_lock() -> object:
    return threading.Lock()  # cannot be pickled to go back to the caller


async def add_one_later(x: int) -> tuple[int, float | None]:
    await asyncio.sleep(0)
    return x + 1, taut.remaining()


def calls_add_one_later(x: int) -> Any:
    """A plain function that only makes the coroutine (never awaited here)."""
    return add_one_later(x)


class ExitsWhenPickled:
    """An object whose pickling raises ``SystemExit`` (a ``__reduce__`` that
    calls ``sys.exit``)."""

    def __reduce__(self) -> tuple[object, ...]:
        raise SystemExit("no pickling")


class ExitsWhenUnpickled:
    """An object that pickles, but whose unpickling raises ``SystemExit``."""

    def __init__(self) -> None:
        self.state = 1

    def __setstate__(self, state: object) -> None:
        raise SystemExit("no unpickling")


class ExitErrorWhenPickled(Exception):
    """An exception whose pickling, and repr, raise ``SystemExit``."""

    def __reduce__(self) -> tuple[object, ...]:
        raise SystemExit("no pickling")

    def __repr__(self) -> str:
        raise SystemExit("no repr")


def return_exits_when_pickled() -> object:
    return ExitsWhenPickled()


def return_exits_when_unpickled() -> object:
    return ExitsWhenUnpickled()


def raise_exit_error_when_pickled() -> None:
    raise ExitErrorWhenPickled("raised")


def take(value: object) -> str:
    return type(value).__name__
