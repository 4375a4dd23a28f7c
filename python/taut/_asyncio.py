"""The asyncio-native path: ``await executor.run(fn, ...)`` and
``taut.to_thread(fn, ...)``.

``loop.run_in_executor`` pays, for every call, a ``concurrent.futures``
future, a done callback run by the worker, ``call_soon_threadsafe`` (a lock,
a handle and a write to the loop's self-pipe) and a copy of the outcome onto
an asyncio future. Here the awaiting coroutine's own asyncio future is the
call's target: the worker hands the outcome to the loop's channel in the
Rust core, which writes one byte to a socket only when the loop is not
already due to drain it, and one reader callback on the loop settles every
finished call in one pass. Worker threads run no asyncio code at all.

A bounded queue (``max_queue``) that is full makes ``run`` wait for room
without blocking the loop, in FIFO order with the other waiting coroutines.
"""

from __future__ import annotations

import asyncio
import contextvars
import socket
import weakref
from typing import Any, Callable, TypeVar

from taut._core import LoopChannel, PoolCore
from taut._notices import _deliver_notices
from taut.executor import QueueFull, ThreadPoolExecutor, default_executor

_T = TypeVar("_T")


class _LoopLink:
    """One event loop's end of the completion channel: the reading socket,
    registered with the loop, and the Rust channel workers push into."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        self.reader = reader
        # The channel owns the writing end from here on (it closes it).
        self.channel = LoopChannel(writer.detach())
        loop.add_reader(reader.fileno(), self.drain)
        # Close the reading end with the loop (its selector forgets it then).
        weakref.finalize(loop, reader.close)

    def drain(self) -> None:
        """Settle every finished call (runs on the loop, as a reader callback)."""
        try:
            while self.reader.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        # Taken after reading the wake-up bytes: a call finished from now on
        # writes a fresh byte, so none is ever left behind unannounced.
        for target, ok, value in self.channel.take():
            if ok is None:
                target()  # a room notice for a waiting submitter
            elif not target.done():  # cancelled by its awaiting task
                if ok:
                    target.set_result(value)
                else:
                    target.set_exception(_awaitable_error(value))


def _awaitable_error(exc: BaseException) -> BaseException:
    """asyncio futures refuse StopIteration (it would end the awaiting
    coroutine silently); the standard library then never settles the
    awaiting future. Wrap it so the caller still gets an outcome."""
    if isinstance(exc, StopIteration):
        error = RuntimeError(f"the call raised {exc!r}")
        error.__cause__ = exc
        return error
    return exc


_links: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopLink | None] = (
    weakref.WeakKeyDictionary()
)
# The last loop looked up and its link: most programs run one loop, and a
# WeakKeyDictionary lookup makes a weak reference each time.
_last: tuple[weakref.ReferenceType[asyncio.AbstractEventLoop] | None, _LoopLink | None] = (
    None,
    None,
)


def _link(loop: asyncio.AbstractEventLoop) -> _LoopLink | None:
    """The loop's link, made on first use; None for a loop without
    ``add_reader`` (Windows' proactor loop)."""
    global _last
    last_loop, link = _last
    if last_loop is not None and last_loop() is loop:
        return link
    if loop in _links:
        link = _links[loop]
    else:
        try:
            link = _LoopLink(loop)
        except NotImplementedError:
            link = None
        _links[loop] = link
    _last = (weakref.ref(loop), link)
    return link


async def run_in(
    executor: ThreadPoolExecutor,
    fn: Callable[..., _T],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    in_context: bool = False,
) -> _T:
    """``await fn(*args, **kwargs)`` on a worker of ``executor`` (see
    ``ThreadPoolExecutor.run``). ``in_context``: ``fn`` already runs in a
    copied context (no second copy for ``propagate_context``)."""
    loop = asyncio.get_running_loop()
    link = _link(loop)
    if link is None:
        return await asyncio.wrap_future(executor.submit(fn, *args, **kwargs), loop=loop)
    if executor._propagate_context and not in_context:
        args = (fn, *args)
        fn = contextvars.copy_context().run
    if executor._broken or executor._shutdown:
        executor._check_open()
    core = executor._core
    waiter: asyncio.Future[_T] = loop.create_future()
    front = False
    while True:
        try:
            spawn, seq = core.submit_async(link.channel, waiter, fn, args, kwargs)
            break
        except QueueFull:
            await _room(core, link, loop, front)
            front = True  # lost the turn to another submitter: keep our place
        except RuntimeError:
            executor._check_open()
            raise
    if spawn:
        executor._spawn(1)
    try:
        return await waiter
    except asyncio.CancelledError:
        # Still queued: it never runs. Running: it finishes on its worker
        # and its outcome is dropped, as with asyncio.to_thread.
        removed = core.remove(seq)
        if removed is not None:
            _deliver_notices(removed[0])
        raise


async def _room(
    core: PoolCore, link: _LoopLink, loop: asyncio.AbstractEventLoop, front: bool
) -> None:
    """Wait (without blocking the loop) until a bounded queue may have room."""
    told: asyncio.Future[None] = loop.create_future()

    def there_may_be_room() -> None:
        if not told.done():
            told.set_result(None)
        else:  # cancelled meanwhile: the next waiter gets the turn
            core.pass_room_on()

    waiter_id = core.wait_for_room_async(link.channel, there_may_be_room, front)
    try:
        await told
    except asyncio.CancelledError:
        if not core.cancel_room_wait(waiter_id) and told.done() and not told.cancelled():
            core.pass_room_on()
        raise


async def to_thread(func: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
    """``asyncio.to_thread`` on taut's pool: run ``func(*args, **kwargs)`` in
    a worker thread, in a copy of the caller's ``contextvars`` context, and
    await its outcome. Runs on the running loop's default executor when that
    is a ``taut.ThreadPoolExecutor``, otherwise on
    ``taut.default_executor()``. Cancelling the awaiting task before the call
    started means it never runs; a call already running finishes on its
    worker and its outcome is dropped."""
    loop = asyncio.get_running_loop()
    executor = getattr(loop, "_default_executor", None)
    if not isinstance(executor, ThreadPoolExecutor):
        executor = default_executor()
    context = contextvars.copy_context()
    return await run_in(executor, context.run, (func, *args), kwargs, in_context=True)
