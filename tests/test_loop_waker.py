"""taut._loop_waker: one waker per event loop for scopes and bounded calls,
whose descriptors are closed with the loop, also after a deadline fired."""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import subprocess
import sys
import threading
import weakref

import pytest
from _waiting import LONG, wait_until

import taut
from taut._core import Deadline, LoopChannel, monotonic
from taut._loop_waker import waker_for

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd"),
]


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _bounded_timeout() -> None:
    result = await taut.run_bounded_async(asyncio.sleep(30), 0.01)
    assert result.timed_out


async def _scope_timeout() -> None:
    async with taut.move_on_after(0.01) as scope:
        await asyncio.sleep(30)
    assert scope.expired


@pytest.mark.parametrize("run", [_bounded_timeout, _scope_timeout])
def test_descriptors_are_closed_after_a_deadline_fired(run: object) -> None:
    gc.collect()
    before = _open_fds()
    for _ in range(5):
        loop = asyncio.new_event_loop()
        loop.run_until_complete(run())  # type: ignore[operator]
        loop.close()
        del loop
        gc.collect()
    # Closed from the timer's callback thread, just after the loop is collected.
    wait_until(lambda: _open_fds() <= before)


def test_scopes_and_bounded_calls_share_one_waker() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        waker = waker_for(loop)
        async with taut.move_on_after(5):
            assert waker_for(loop) is waker
            result = await taut.run_bounded_async(asyncio.sleep(0), 5)
            assert not result.timed_out
        fired: list[str] = []
        watch = waker.watch(Deadline(monotonic()), lambda: fired.append("x"))
        await asyncio.sleep(0.05)
        watch.stop()
        assert fired == ["x"]

    asyncio.run(main())


def test_a_stopped_watch_never_calls_back() -> None:
    async def main() -> None:
        waker = waker_for(asyncio.get_running_loop())
        fired: list[str] = []
        watch = waker.watch(Deadline(monotonic() + 0.05), lambda: fired.append("x"))
        watch.stop()
        await asyncio.sleep(0.3)
        assert fired == []

    asyncio.run(main())


def _channel() -> tuple[socket.socket, LoopChannel]:
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    return reader, LoopChannel(writer.detach())


def test_a_deadline_armed_through_a_channel_pushes_its_target_at_expiry() -> None:
    reader, channel = _channel()
    with reader:
        early, late = object(), object()
        cancelled = channel.arm(monotonic() + 0.05, early)
        fired = channel.arm(monotonic() + 0.05, late)
        assert cancelled.cancel()
        wait_until(lambda: len(channel) == 1)
        assert fired.expired
        assert reader.recv(16) == b"\x01"
        assert channel.take() == [(late, None, None)]
        # Watching a deadline that already fired pushes at once.
        channel.watch(fired, early)
        assert channel.take() == [(early, None, None)]


def test_a_channel_dropped_before_its_deadline_fires_lets_go_of_the_target() -> None:
    class Target:
        pass

    Deadline(monotonic()).call_soon(lambda: None)  # the callback thread runs
    reader, channel = _channel()
    with reader:
        target = Target()
        gone = weakref.ref(target)
        deadline = channel.arm(monotonic() + 0.05, target)
        del target, channel
        gc.collect()
        assert gone() is not None or deadline.expired  # held while armed
        wait_until(lambda: deadline.expired)
        # Released on taut's callback thread (the timer thread has no GIL).
        wait_until(lambda: gone() is None)


def test_a_channel_let_go_last_by_a_worker_drops_the_outcome_off_the_worker() -> None:
    # A finished call's job may hold its channel's last reference: the
    # outcome it just pushed (an asyncio future: a user object) must then be
    # dropped on the callback thread, never under a Rust frame on the worker.
    dropped_on: list[str] = []

    class Waiter:
        _state = "PENDING"  # what the worker reads of an asyncio future

        def __del__(self) -> None:
            dropped_on.append(threading.current_thread().name)

    ran_on: list[str] = []
    go = threading.Event()

    def call() -> None:
        ran_on.append(threading.current_thread().name)
        go.wait(LONG)

    reader, channel = _channel()
    with reader, taut.ThreadPoolExecutor(1) as ex:
        ex._core.submit_async(channel, Waiter(), call, (), None, True, False, False)
        ex._spawn()
        wait_until(lambda: ran_on)
        del channel  # from here the running job holds the last reference
        go.set()
        wait_until(lambda: dropped_on)
    assert dropped_on != ran_on
    assert dropped_on == ["taut-timer-callbacks"]


class _RefusesTheFirstCancel(asyncio.Future):  # type: ignore[type-arg]
    """A future whose first ``cancel()`` raises (as third-party future
    subclasses may): a scope's expiry, handled by the loop's reader callback,
    then raises there."""

    refused = False

    def cancel(self, msg: object = None) -> bool:
        if not self.refused:
            self.refused = True
            raise RuntimeError("this future refuses to be cancelled")
        return super().cancel(msg)


def test_a_failing_entry_in_a_drained_batch_loses_none_of_the_others() -> None:
    # A scope's expiry and a finished call reach the loop in one batch. The
    # expiry raises in the reader callback (asyncio reports it, as it does
    # for any callback); the finished call behind it must still be settled.
    # Before the fix the rest of the batch was dropped with the exception:
    # the awaiting task waited for good. (A Ctrl-C landing in the reader
    # callback did the same.)
    errors: list[object] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda loop, context: errors.append(context.get("exception")))
        with taut.ThreadPoolExecutor(1) as ex:
            await ex.run(int)
            channel = waker_for(loop).channel
            assert channel is not None
            stubborn = _RefusesTheFirstCancel()

            async def scoped() -> None:
                async with taut.move_on_after(0.01):
                    await stubborn

            expiring = asyncio.ensure_future(scoped())
            go = threading.Event()
            call = asyncio.ensure_future(ex.run(go.wait, LONG))
            await asyncio.sleep(0)  # both wait: the scope on its future, the call on its worker
            # The loop blocks until the expiry and then the call's outcome
            # wait in its channel, in that order: one batch.
            wait_until(lambda: len(channel) == 1)
            go.set()
            wait_until(lambda: len(channel) == 2)
            assert await asyncio.wait_for(call, LONG) is True
            stubborn.set_result(None)
            await expiring

    asyncio.run(main())
    assert len(errors) == 1 and "refuses to be cancelled" in str(errors[0])


class _InterruptedAsItTakes:
    """Stands in for a loop's channel. Its first ``take_woken`` takes the
    batch and is interrupted before handing it over: a Ctrl-C landing as
    the real call returns, before the reader callback has stored the
    result, which the interpreter then drops unread."""

    def __init__(self, channel: LoopChannel) -> None:
        self.channel = channel
        self.interrupted = False

    def take_woken(self, reader_fd: int) -> object:
        if not self.interrupted:
            self.interrupted = True
            self.channel.take_woken(reader_fd)  # taken, and dropped unread
            raise KeyboardInterrupt
        return self.channel.take_woken(reader_fd)


def test_a_ctrl_c_as_the_drain_takes_its_batch_loses_none_of_it() -> None:
    # Before the fix, take_woken returned a list: dropped by a Ctrl-C there,
    # the whole batch was gone and its awaiting tasks waited for good.
    loop = asyncio.new_event_loop()
    go = threading.Event()

    async def start() -> list[asyncio.Future[bool]]:
        calls = [asyncio.ensure_future(ex.run(go.wait, LONG)) for _ in range(3)]
        await asyncio.sleep(0)  # each task submits its call
        return calls

    try:
        with taut.ThreadPoolExecutor(3) as ex:
            calls = loop.run_until_complete(start())
            waker = waker_for(loop)
            channel = waker.channel
            assert channel is not None
            waker.channel = _InterruptedAsItTakes(channel)  # type: ignore[assignment]
            go.set()
            wait_until(lambda: len(channel) == 3)  # all three finished, none settled
            with pytest.raises(KeyboardInterrupt):
                loop.run_until_complete(asyncio.wait_for(asyncio.gather(*calls), LONG))
            assert len(channel) == 3  # given back, not lost
            waker.channel = channel
            everything = asyncio.wait_for(asyncio.gather(*calls), LONG)
            assert loop.run_until_complete(everything) == [True, True, True]
    finally:
        loop.close()


_CLOSED_LOOPS_PROBE = """
import asyncio, gc, sys, threading, time, weakref
import taut
from taut._core import _timer_info

dropped = []


class Result:
    def __del__(self):
        dropped.append(1)


def call(go):
    go.wait(60)
    return Result()


assert not _timer_info()["callback_thread"], "nothing should have started it yet"
ex = taut.ThreadPoolExecutor(1)
loops = []
for _ in range(3):
    loop = asyncio.new_event_loop()
    go = threading.Event()

    async def start():
        return asyncio.ensure_future(ex.run(call, go))

    task = loop.run_until_complete(start())
    loop.run_until_complete(asyncio.sleep(0))  # the call is under way
    loop.close()  # with the call still running: its outcome has no reader
    loops.append(weakref.ref(loop))
    del loop, start, task
    go.set()
ex.shutdown(wait=True)
until = time.monotonic() + 30
while (len(dropped) < 3 or any(r() is not None for r in loops)) and time.monotonic() < until:
    gc.collect()
    time.sleep(0.01)
print(len(dropped), sum(r() is not None for r in loops))
"""


def test_closed_loops_and_their_outcomes_are_let_go_in_a_process_without_deadlines() -> None:
    # Outcomes reaching the channel of a closed loop are dropped on taut's
    # callback thread. In a process that never armed a deadline nothing had
    # started that thread: they waited in its queue for good, keeping every
    # closed loop alive and never running a result's __del__.
    done = subprocess.run(
        [sys.executable, "-c", _CLOSED_LOOPS_PROBE],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "0"], (done.stdout, done.stderr)
