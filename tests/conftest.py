"""Settings shared by the whole test suite."""

from __future__ import annotations

import gc
import logging
import signal
from collections.abc import Iterator

import pytest
from hypothesis import settings

# Hypothesis fails an example that takes longer than 200 ms by default: a
# timing assert, which a busy 2-core machine breaks now and then (seen:
# test_config's junk test at 454 ms). The tests' own bounds stay lopsided.
settings.register_profile("taut", deadline=None)
settings.load_profile("taut")

# A run started in the background by a shell without job control (`cmd &` in
# a script, nohup) inherits SIGINT ignored, and Python then installs no
# KeyboardInterrupt handler: the tests of Ctrl-C would fail for want of one.
# Installed here, the handler also reaches the interpreters the tests start
# (exec resets a handled signal to its default).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


class _Destroyed(logging.Handler):
    """Collects asyncio's "Task was destroyed but it is pending!" reports."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "Task was destroyed but it is pending" in message:
            self.messages.append(message)


@pytest.fixture
def no_pending_task_destroyed() -> Iterator[None]:
    """Fail a test that leaves a task pending on a loop it closed.

    asyncio reports such a task only when it is collected: often at a later
    garbage collection, in another test (whose captured output hides it), or
    at interpreter exit, after pytest's summary, where nobody can tell which
    test left it. Collected here, it is reported against its own test. A task
    abandoned on purpose with its loop is marked so (see ``abandon``)."""
    handler = _Destroyed()
    asyncio_logger = logging.getLogger("asyncio")
    asyncio_logger.addHandler(handler)
    try:
        yield
        gc.collect()
    finally:
        asyncio_logger.removeHandler(handler)
    assert not handler.messages, handler.messages
