"""Where ``python -m taut``'s output goes, when it cannot go there.

The command prints tables (``bench``) and a live agent turn whose notices
come from worker threads (``demo``). Its output may stop being wanted or
writable halfway: the reader leaves (``python -m taut bench | head -1``), the
disk fills up, or the terminal cannot show a character (``LC_ALL=C`` and the
German texts). None of that is worth a traceback, let alone one per notice.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO, cast

__all__ = ["OutputFailed", "guarded_stdout"]


class OutputFailed(Exception):
    """Raised in the main thread at the first write stdout refused, when
    the command is to stop then (nobody reads what it would go on to print)."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _GuardedStdout:
    """``sys.stdout`` while a command runs. The first write that fails is
    kept; from then on output is dropped. With ``stop``, that write raises
    :class:`OutputFailed` in the main thread, to stop the command (a bench
    would otherwise run on for minutes); other threads just go on. Without
    (the demo: a few seconds, printing from inside tool-call notices, which
    must not fail) the command runs to its end, its lines dropped."""

    def __init__(self, wrapped: TextIO, stop: bool) -> None:
        self.wrapped = wrapped
        self.stop = stop
        self.failure: OSError | None = None

    def _failed(self, exc: OSError) -> None:
        if self.failure is None:
            self.failure = exc
        if self.stop and threading.current_thread() is threading.main_thread():
            raise OutputFailed(exc) from exc

    def write(self, text: str) -> int:
        if self.failure is None:
            try:
                return self.wrapped.write(text)
            except OSError as exc:
                self._failed(exc)
        return len(text)

    def flush(self) -> None:
        if self.failure is None:
            try:
                self.wrapped.flush()
            except OSError as exc:
                self._failed(exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


def _escape_unencodable(stream: TextIO) -> None:
    """A character the terminal's encoding lacks (``ü`` under ``LC_ALL=C``)
    is written as an escape (``\\xfc``), not a ``UnicodeEncodeError``."""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        try:
            reconfigure(errors="backslashreplace")
        except (ValueError, OSError):
            pass  # not a regular text stream: leave it as it is


def _point_at_devnull(stream: TextIO) -> None:
    """Make ``stream``'s descriptor /dev/null: whatever is still buffered
    in it (and the flush at interpreter exit) then goes nowhere instead of
    failing again with an "Exception ignored" message."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # no descriptor of its own (a test's capture): nothing to do


@contextmanager
def guarded_stdout(stop: bool) -> Iterator[_GuardedStdout]:
    """Run a command with :class:`_GuardedStdout` as ``sys.stdout``; the
    guard's ``failure`` says afterwards whether the output got through."""
    wrapped = sys.stdout
    _escape_unencodable(wrapped)
    guard = _GuardedStdout(wrapped, stop)
    sys.stdout = cast(TextIO, guard)
    try:
        yield guard
        guard.flush()
    except OutputFailed:
        pass  # guard.failure says so
    finally:
        sys.stdout = wrapped
        if guard.failure is not None:
            _point_at_devnull(wrapped)
