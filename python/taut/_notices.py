"""Queue notices of ``submit_tracked``: each call's position while it waits,
then its start, delivered in order from whichever thread learns them."""

from __future__ import annotations

import threading
from concurrent.futures import _base

TYPE_CHECKING = False  # typing's, without importing typing (see taut/__init__)
if TYPE_CHECKING:
    from typing import Any, Callable


class _Tracker:
    """Delivers one call's queue notices in order: positions only go down,
    and nothing is reported after the call started. The lock keeps a late
    position from overtaking the start notice (they come from different
    threads); callbacks must therefore be quick and never wait for the call."""

    __slots__ = ("_lock", "_on_start", "_on_wait", "_position", "_started")

    def __init__(
        self, on_wait: Callable[[int], object] | None, on_start: Callable[[], object] | None
    ) -> None:
        self._lock = threading.Lock()
        self._on_wait = on_wait
        self._on_start = on_start
        self._position: int | None = None
        self._started = False

    def wait(self, position: int) -> None:
        with self._lock:
            if self._started or (self._position is not None and position >= self._position):
                return
            self._position = position
            if self._on_wait is not None:
                _notify(self._on_wait, position)

    def start(self) -> None:
        with self._lock:
            self._started = True
            if self._on_start is not None:
                _notify(self._on_start)


def _notify(callback: Callable[..., object], *args: Any) -> None:
    """Call a queue-notice callback; like a done callback's, its exception
    is logged, never raised into the call it reports on."""
    try:
        callback(*args)
    except Exception:
        _base.LOGGER.exception("exception calling queue notice %r", callback)


def _deliver_notices(notices: list[tuple[_Tracker, int]]) -> None:
    """Tell queued tracked calls their new positions."""
    for tracker, position in notices:
        tracker.wait(position)
