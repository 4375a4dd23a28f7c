"""Running a batch: one shared step and two thin drivers.

The sync and the async gather share one step (:func:`steps`): it fills free
slots with calls, settles the calls that finished and, at the deadline,
expires the rest; it yields whenever it must wait, and a thin driver for each
world does the waiting (``concurrent.futures.wait`` in :func:`run_sync`,
``asyncio.wait`` in :func:`run_async`).

A call run inline (on the gathering thread: a gather nested in a call on its
own pool) has every frame of this module, and of the gather that called it,
among its callers; a failed call's traceback keeps its frames, and each frame
keeps its caller (``f_back``) with the locals it held when it returned. So
none of those frames may return still holding what holds the error (the
run, its entries, a task, an outcome): the two would make a reference cycle,
and the call's frames, with its locals (a request's data), would live until
the cyclic collector runs. The ``del`` statements marked "(inline callers)"
drop them, as ``Scheduler._await_sync`` does for a single await.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import functools
import threading
import time
from collections import deque
from collections.abc import Generator, Hashable
from dataclasses import dataclass
from typing import Any, Callable, Optional

from taut._asyncio import submit_when_room
from taut.deadline import move_on_at
from taut.executor import QueueFull, ThreadPoolExecutor
from taut.gather.executors import in_worker_of, is_shut_down
from taut.gather.handles import Outcome
from taut.gather.limits import Slots
from taut.gather.run import Entry, Run, timeout_error
from taut.gather.tasks import Captured, Escaped, Frame, Task, enclosing_frames
from taut.journal.errors import JournalError

__all__ = ["SLOT_POLL", "run_async", "run_inline", "run_sync", "steps"]

# A single wait never exceeds this many seconds: a huge remaining time must not
# reach threading's OS wait (OverflowError: timestamp out of range for time_t).
_WAIT_SLICE = 3600.0
# How often a batch short of limiter slots (or of room in the bounded queue of
# an executor that is not taut's, on an event loop) asks again while calls are
# in flight. A limiter (any acquire(timeout=...)/release() object) tells
# nobody when a slot frees up; taut's own pool does (see _started_when_room).
SLOT_POLL = 0.02


@dataclass
class _Wait:
    """What the shared step waits for next: any of ``pending``, at most ``timeout``."""

    pending: list[Any]
    timeout: float | None


# What starts one call: the key the driver waits on, or None if it already ran.
_Start = Callable[[Entry], Any]
# What waits for the first of some futures to finish (or the timeout): the done ones.
_WaitHere = Callable[[list[Any], Optional[float]], set[Any]]


def _wait_for_futures(pending: list[Any], timeout: float | None) -> set[Any]:
    return cf.wait(pending, timeout=timeout, return_when=cf.FIRST_COMPLETED)[0]


def _past_deadline(run: Run) -> bool:
    return run.deadline is not None and time.monotonic() >= run.deadline


def steps(
    run: Run,
    todo: list[Entry],
    start: _Start,
    wait: _WaitHere | None = None,
    slots: Slots | None = None,
) -> Generator[_Wait, set[Any], None]:
    """Fill free slots, wait, settle what finished; at the deadline fence
    the batch and expire the rest. With ``wait`` this waits itself and
    never yields (the sync driver); otherwise it yields what to wait for and
    its driver sends back the done keys, or throws what interrupted it.
    Each call takes one of ``slots`` (none: it takes no limiter slot)."""
    queue = deque(todo)
    in_flight: dict[Hashable, Entry] = {}
    limit = run.max_parallel or len(todo)
    e: Entry | None = None
    try:
        # Once the batch is halted (Run.halt: a journal or a limiter failed)
        # nothing more starts; what is running is still settled and recorded.
        while (queue and run.halted_by is None) or in_flight:
            short_of_slots = False
            while (
                queue
                and len(in_flight) < limit
                and run.halted_by is None
                and not _past_deadline(run)
            ):
                e = queue[0]
                if slots is not None:
                    try:
                        taken = slots.take(
                            e.index, run.deadline, may_block=wait is not None and not in_flight
                        )
                    except Exception as exc:  # a shared limiter lost its connection, say
                        run.halt(exc)
                        break
                    if not taken:
                        short_of_slots = True
                        break
                queue.popleft()
                try:
                    key = start(e)
                except QueueFull:
                    _take_back(e, slots)
                    queue.appendleft(e)
                    if wait is not None:
                        raise  # aborted with the rest: a sync submit waits for room itself
                    # A full bounded queue refused the call on the loop's
                    # thread. A taut pool's never gets here (run_async waits
                    # in its line of room); another executor raising
                    # QueueFull (a wrapper around a taut pool, say) tells
                    # nobody when there is room: try again soon, as for a
                    # limiter slot (the call never reached the pool: not started).
                    short_of_slots = True
                    break
                except RuntimeError as exc:
                    if not _refused(e, exc):
                        if slots is not None:
                            slots.release()
                        queue.appendleft(e)  # aborted with the rest
                        raise
                    if _shut_down_meanwhile(run):
                        # The pool was shut down while the batch ran: this
                        # call is cancelled, like the queued calls a shutdown
                        # cancels, and the calls already running are still
                        # settled.
                        _take_back(e, slots)
                        run.finish(e, Outcome(e.call_id, "cancelled"))
                        continue
                    # Refused for want of resources, most likely: no thread
                    # could start ("can't start new thread", a pool with no
                    # worker ceiling). Raising now would cut loose the calls
                    # running, and their work would be lost. The call goes
                    # back to the head of the queue and is tried again when
                    # one of them finishes (its worker is free then); the
                    # refusal is raised only when nothing runs any more.
                    withdrawn = _take_back(e, slots)
                    queue.appendleft(e)
                    if not in_flight or not withdrawn:
                        raise  # aborted with the rest
                    break
                except BaseException:
                    if slots is not None:
                        slots.release()
                    queue.appendleft(e)  # aborted with the rest
                    raise
                if key is not None:
                    in_flight[key] = e
                    if slots is not None:
                        done_with = e.future if e.future is not None else key
                        e.give_back_slot = slots.release_when_done(done_with)
                elif slots is not None:
                    slots.release()  # it ran inline and is done
            wait_for: float | None = None
            if run.deadline is not None:
                wait_for = run.deadline - time.monotonic()
                if wait_for <= 0:
                    break  # start nothing after the deadline
                wait_for = min(wait_for, _WAIT_SLICE)
            if short_of_slots:  # come back soon to ask the limiter again
                wait_for = SLOT_POLL if wait_for is None else min(wait_for, SLOT_POLL)
            if not in_flight:
                if short_of_slots and wait is None:
                    yield _Wait([], wait_for)  # the async driver sleeps
                continue  # everything so far ran inline, or ask for a slot again
            if wait is not None:
                done = wait(list(in_flight), wait_for)
            else:
                done = yield _Wait(list(in_flight), wait_for)
            for key in done:
                run.settle(in_flight.pop(key))
        else:
            # The calls never started go cold again (release_all in abort):
            # a later gather of the same handles runs them.
            run.raise_if_halted()
            return
        # Fence first: a worker that picks a queued call up from now on
        # finds the fence and returns without running it.
        run._raise_fences()
        now = time.monotonic()
        for e in in_flight.values():
            run.expire(e, now)
        for e in queue:
            run.finish(e, Outcome(e.call_id, "not_started"))
        run.raise_if_halted()
    except BaseException:
        run.abort([*in_flight.values(), *queue])
        raise
    finally:
        del run, todo, start, queue, in_flight, e  # (inline callers)


def _take_back(e: Entry, slots: Any) -> bool:
    """A call its executor refused: its limiter slot and its task go. False
    if the task began anyway (a standard pool keeps a call it could not
    start a thread for in its queue, and a worker took it): it runs unseen."""
    if slots is not None:
        slots.release()
    withdrawn = True
    if e.task is not None:
        # A copy left in the executor's queue must never run: the call may
        # be submitted again.
        withdrawn = e.task.withdraw()
        e.task.forget()
        e.task = None
    return withdrawn


def _refused(e: Entry, exc: RuntimeError) -> bool:
    """Whether starting ``e`` failed because its executor refused it. Not a
    journal failure (a RuntimeError too), nor anything raised once an inline
    call had run: those abort."""
    return e.outcome is None and not isinstance(exc, JournalError)


def _shut_down_meanwhile(run: Run) -> bool:
    """Whether the batch's pool was shut down while the batch ran (one shut
    down before it began is the caller's mistake, said at once)."""
    return run.executor_was_open and is_shut_down(run.executor)


def _refused_by_a_shut_down_pool(run: Run, e: Entry, exc: RuntimeError) -> bool:
    """Whether starting ``e`` failed because its pool was shut down while the
    batch ran (its submit refuses)."""
    return _refused(e, exc) and _shut_down_meanwhile(run)


def _holding_call(run: Run, *, on_a_loop: bool) -> Frame | None:
    """The innermost call of an enclosing batch with the same limiter that
    this code runs inside, and so holds one of its slots; None if there is
    none. A nested batch must not wait for another slot (when the enclosing
    calls hold them all, none would ever come: a sub-agent's batch would wait
    until its deadline); its calls run under the slot held, one at a time,
    so the calls running at once stay within the limit.

    A sync call counts on its own thread (with a loop it runs there): that
    thread does nothing else meanwhile. An async call counts wherever its
    context reaches (``on_a_loop``): the tasks it starts inherit it, and its
    held slot (a limiter of one) keeps their inner calls one at a time."""
    if run.slots is None:
        return None
    limiter, here = run.slots.limiter, threading.get_ident()
    for f in reversed(enclosing_frames()):
        if f.batch.limiter is limiter and (f.thread == here or (on_a_loop and f.thread is None)):
            return f
    return None


def run_inline(run: Run, e: Entry, task: Task) -> Outcome:
    """Run one call on this thread. Nothing else can watch the deadline
    meanwhile, so a call still running at the deadline becomes a timeout
    when it returns, as it would on a pool; with ``interrupt=True`` a
    deadline scope stops it on time."""
    captured: Captured | None = None
    if run.interrupt and run.deadline is not None:
        with move_on_at(run.deadline, f"call {e.call_id!r} (gather deadline)", interrupt=True):
            captured = task.run()
    else:
        captured = task.run()
    if isinstance(captured, Escaped):
        raise captured.error  # never cached
    deadline = run.deadline
    started = task.started_at
    finished = task.finished_at
    if (
        deadline is not None
        and started is not None
        and (captured is None or finished is None or finished > deadline)
    ):
        elapsed = max(0.0, deadline - started)
        error = timeout_error(e.call_id, run.timeout, elapsed)
        outcome = Outcome(e.call_id, "timeout", None, error, True, elapsed)
    else:
        outcome = run.outcome_from(e, captured, None)
    del run, e, task, captured  # (inline callers)
    try:
        return outcome
    finally:
        del outcome


def _start_sync_call(
    run: Run, inline: bool, e: Entry, task: Task | None = None
) -> cf.Future[Any] | None:
    """Hand a sync call to the executor (its future), or run it ``inline`` on
    this thread and settle it (None). Its task is made here unless given."""
    if task is None:
        task = run.new_task(e)
    if inline:
        run.finish(e, run_inline(run, e, task))
        del run, e, task  # (inline callers)
        return None
    e.future = run.submit(run.executor, task)
    return e.future


async def _started_when_room(
    run: Run,
    e: Entry,
    task: Task,
    pool: ThreadPoolExecutor,
    loop: asyncio.AbstractEventLoop,
    place: int,
) -> Any:
    """Submit a call to a taut pool whose bounded queue is full (its submit
    refuses at once on the loop's thread) once there is room, waiting in
    the pool's line with the coroutines waiting for room (FIFO, no polling),
    then await it. The call keeps its limiter slot meanwhile; cancelled
    while it waits (the deadline, the batch aborted), it never reaches the
    pool: not started. Refused by a pool shut down meanwhile: cancelled,
    as the queued calls a shutdown cancels (see steps)."""

    def submit() -> cf.Future[Any]:
        e.future = run.submit(run.executor, task)
        return e.future

    try:
        future = await submit_when_room(pool, submit, loop, place)
    except RuntimeError as exc:
        if _refused_by_a_shut_down_pool(run, e, exc):
            raise asyncio.CancelledError from None
        raise
    return await asyncio.wrap_future(future, loop=loop)


def run_sync(run: Run) -> list[Outcome]:
    """Run the batch on this thread, waiting with ``concurrent.futures.wait``."""
    todo = run.begin()
    if todo:
        inline = in_worker_of(run.executor)
        # A partial, not a closure: a closure's cell would keep the run.
        start = functools.partial(_start_sync_call, run, inline)
        # Inline under a slot held here, the calls run one at a time on this
        # thread, taking none.
        held = inline and _holding_call(run, on_a_loop=False) is not None
        slots = None if held else run.slots
        try:
            next(steps(run, todo, start, _wait_for_futures, slots), None)
        finally:
            if run.batch.dask is not None:
                run.batch.dask.cleanup()
        del start
    del todo  # (inline callers)
    try:
        return run.results()
    finally:
        del run


def _start_async_call(
    run: Run,
    loop: asyncio.AbstractEventLoop,
    pool: ThreadPoolExecutor | None,
    inline_sync: bool,
    e: Entry,
) -> asyncio.Future[Any] | None:
    """Start one call of an async batch: a coroutine as a task on ``loop``, a
    sync call on the executor (in ``pool``'s line of room when its bounded
    queue is full) or ``inline_sync`` on this thread, settled at once (None)."""
    task = run.new_task(e)
    if e.handle._is_coroutine:
        e.afuture = loop.create_task(task.arun())
        return e.afuture
    if pool is not None and pool._core.has_room_line():
        # Coroutines wait for room in the bounded queue: behind them.
        return _start_when_room(run, loop, pool, e, task)
    try:
        future = _start_sync_call(run, inline_sync, e, task)
    except QueueFull:
        if pool is None:
            raise
        return _start_when_room(run, loop, pool, e, task)
    if future is None:  # it ran inline and is settled
        del run, e, task  # (inline callers)
        return None
    e.afuture = asyncio.wrap_future(future)
    return e.afuture


def _start_when_room(
    run: Run, loop: asyncio.AbstractEventLoop, pool: ThreadPoolExecutor, e: Entry, task: Task
) -> asyncio.Future[Any]:
    """Start a sync call that waits in ``pool``'s line of room. Its place in
    line is taken now; the task joins the line there in a later pass, ahead
    of whoever asks for room meanwhile."""
    place = pool._core.reserve_room_place()
    e.afuture = loop.create_task(_started_when_room(run, e, task, pool, loop, place))
    return e.afuture


async def run_async(run: Run) -> list[Outcome]:
    """Run the batch on the running loop, waiting with ``asyncio.wait``."""
    todo = run.begin()
    if todo:
        loop = asyncio.get_running_loop()
        inline_sync = in_worker_of(run.executor)
        # A taut pool whose calls go to its workers: a full bounded queue
        # refuses them at once here, and they wait in its line of room.
        pool = (
            run.executor
            if isinstance(run.executor, ThreadPoolExecutor) and not inline_sync
            else None
        )

        # A partial, not a closure: a closure's cell would keep the run.
        start = functools.partial(_start_async_call, run, loop, pool, inline_sync)

        # Inside a call that holds a slot of this limiter, every call (a
        # coroutine on this loop, a sync call inline or on a pool) takes that
        # call's held slot in turn, never a new one: the call waits for this
        # batch and may hold the last slot.
        holder = _holding_call(run, on_a_loop=True)
        slots = run.slots if holder is None else holder.held
        stepper = steps(run, todo, start, None, slots)
        try:
            wait = next(stepper)
            while True:
                try:
                    if not wait.pending:  # waiting for a limiter slot
                        await asyncio.sleep(wait.timeout or 0)
                        done: set[Any] = set()
                    else:
                        done, _ = await asyncio.wait(
                            wait.pending,
                            timeout=wait.timeout,
                            return_when=asyncio.FIRST_COMPLETED,
                        )
                except BaseException as exc:  # cancelled: the step aborts the batch
                    wait = stepper.throw(exc)
                else:
                    wait = stepper.send(done)
        except StopIteration:
            pass
        finally:
            if run.batch.dask is not None:
                run.batch.dask.cleanup()
        del start
    del todo  # (inline callers)
    try:
        return run.results()
    finally:
        del run
