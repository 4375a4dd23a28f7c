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

asyncio's own ``loop.run_in_executor`` gets the same path: called by it,
``ThreadPoolExecutor.submit`` returns the loop's future itself (see
``submit_for_run_in_executor``).

Waking a parked worker is a system call, made while the loop holds the GIL
the woken worker needs at once. A loop pass that queues many calls (a
gather, a semaphore letting a batch through) wakes a worker at once only
when none is busy, and the others in one go when the pass is over
(``_LoopLink.owe``), not one per call. A busy worker takes queued calls one
after another, so no call depends on that later wake-up to run, unless the
busy worker's call never ends while the pass blocks: a timer then hands the
wake-ups out from taut's callback thread (``_LoopLink.backstop``).

A bounded queue (``max_queue``) that is full makes ``run`` wait for room
without blocking the loop, in FIFO order with the other waiting coroutines:
a newcomer goes behind them even if there is room at that moment (the room
is theirs), and one told there is room but refused (the room taken
meanwhile) goes back to its place, ahead of those of its loop behind it even
if they were told first (see ``_room``).
(Its calls wake workers at once: an owed wake-up would count against the
room.) The turn of a coroutine told there is room passes on if its loop
closes before it comes back (see ``LoopWaker._loop_closed``), or if it
stays out long enough while coroutines of a running loop wait in line (its
loop stopped without closing: see ``_StaleTurnWatch``).

On a loop without ``add_reader`` (Windows' proactor loop) there is no
channel: a call goes through a plain ``submit``, and waits for room in the
same line (``submit_when_room``), told through taut's callback thread and
``call_soon_threadsafe``. ``taut.agather`` waits for room the same way.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import gc
import weakref
from operator import itemgetter
from threading import get_ident
from typing import Any, Callable, TypeVar

from taut._checks import describe
from taut._core import Deadline, LoopChannel, PoolCore, monotonic
from taut._loop_waker import LoopWaker, Watch, waker_for
from taut._notices import _deliver_notices
from taut.executor import QueueFull, ThreadPoolExecutor, default_executor

_T = TypeVar("_T")
_F = TypeVar("_F", bound="concurrent.futures.Future[Any]")

# How long owed wake-ups may wait for the end of the loop's pass before the
# callback thread hands them out (see _LoopLink.backstop): far longer than
# a pass that does not block (the backstop then finds nothing to do, and it
# is armed at most once per period: its cost stays out of busy loops), and
# no longer than CPython's switch interval, the delay a pass holding the
# GIL imposes on every other thread anyway.
_OWED_BACKSTOP_S = 0.005


_PLAIN_CREATE_FUTURE = asyncio.BaseEventLoop.create_future

# Seconds a turn (a coroutine told there is room) may stay out while others
# wait in line before it counts as stale (see _StaleTurnWatch). Longer than
# any pass of a loop that still serves (asyncio's debug mode calls a 0.1 s
# callback slow): a running loop keeps its turn and the line its FIFO
# order. Only a loop stopped without closing holds a turn longer, a rare
# case, so the line may take this long, twice at most, to get past it.
_STALE_TURN_S = 0.25


class _LoopLink:
    """One event loop's end of the completion channel: the loop's
    ``taut._loop_waker`` channel (one wake-up descriptor and one reader
    callback per loop, shared with deadlines), and the wake-ups of parked
    workers owed at the end of this pass of the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, waker: LoopWaker) -> None:
        self.waker = waker
        channel = waker.channel
        assert channel is not None  # only loops with add_reader have links
        self.channel: LoopChannel = channel
        # Executors with queued calls whose worker wake-up is owed (see owe).
        self.owed: list[ThreadPoolExecutor] = []
        # The timer of `backstop`, while one is armed.
        self.backstop_timer: Deadline | None = None
        # Whether run_in_executor's futures may be _QueuedCallFuture: the
        # loop makes plain asyncio futures. One that makes its own kind (its
        # own create_future) gets those, as asyncio's run_in_executor would.
        self.plain_futures = type(loop).create_future is _PLAIN_CREATE_FUTURE
        # For a loop that keeps its default executor out of reach, while it
        # has none: what may become it (see _hidden_default_executor).
        self.no_default: tuple[Callable[[list[Any]], Any], tuple[Any, ...], int] | None = None

    def owe(self, loop: asyncio.AbstractEventLoop, executor: ThreadPoolExecutor) -> None:
        """A call was queued while a worker was busy (or on its way) and
        left a parked one parked: wake those (``flush``) once this pass of
        the loop is over, for every call it queued. (If the loop never runs
        again, the busy worker still takes every queued call in turn.)"""
        owed = self.owed
        # Listed by identity: `executor in owed` compares with ==, and a
        # subclass may define __eq__ (as the standard library's pool lets
        # it): one that raises failed a call already queued, and one equal
        # to another executor left that executor's wake-ups out.
        if not owed or (owed[-1] is not executor and all(e is not executor for e in owed)):
            if not owed:
                loop.call_soon(self.flush)
            owed.append(executor)
        # After the append: a backstop firing now either sees the executor
        # or has already let go of its timer (see backstop). Armed even if
        # the executor was listed already: a Ctrl-C landing as flush starts
        # leaves it listed with no flush to come, for as long as the loop
        # runs; the backstop still hands its wake-ups out.
        if self.backstop_timer is None:
            timer = self.backstop_timer = Deadline(monotonic() + _OWED_BACKSTOP_S)
            timer.call_soon(self.backstop)

    def backstop(self) -> None:
        """On taut's callback thread, a moment after wake-ups became owed:
        hand out those still owed. A pass that does not block has done so
        already (``flush``); one that blocks, perhaps on code waiting for the
        very call queued, would otherwise leave it behind a busy worker whose
        call may never end, with a worker parked beside it. Armed at most
        once per `_OWED_BACKSTOP_S`, whatever the number of passes."""
        self.backstop_timer = None
        for executor in tuple(self.owed):
            spawn = executor._core.wake_owed()
            if spawn:
                executor._spawn()

    def flush(self) -> None:
        """Hand out the owed wake-ups (a loop callback, once per pass)."""
        owed = self.owed
        try:
            self.owed = []
            for executor in owed:
                spawn = executor._core.wake_owed()
                if spawn:
                    executor._spawn()
        except BaseException:
            # A Ctrl-C cut the hand-out short: the backstop sees only
            # self.owed, and the loop may never run again. (One landing
            # before `try` leaves self.owed as it was: the backstop armed
            # by the last owe() hands it out.)
            for executor in owed:
                _wake_owed_now(executor)
            raise


# The last loop looked up and its link (None for a loop without one): most
# programs run one loop, and a WeakKeyDictionary lookup makes a weak
# reference each time. Weak references: held here, the link (its channel,
# and what waits there) would keep a loop dropped without close() alive
# (see _loop_waker.last_seen).
_last: tuple[
    weakref.ReferenceType[asyncio.AbstractEventLoop] | None,
    weakref.ReferenceType[_LoopLink] | None,
] = (None, None)


def _link(loop: asyncio.AbstractEventLoop) -> _LoopLink | None:
    """The loop's link, made on first use; None for a loop without
    ``add_reader`` (Windows' proactor loop). Kept by the loop's waker, so
    it lives as long as the loop holds the waker, no longer: see
    ``taut._loop_waker.waker_for``."""
    global _last
    last_loop, link_ref = _last
    if last_loop is not None and last_loop() is loop:
        if link_ref is None:
            return None  # a loop without a channel
        # The loop's reader callback holds its waker, which holds the link
        # (gone only if someone removed that reader: a new waker below).
        link = link_ref()
        if link is not None:
            return link
    waker = waker_for(loop)
    link = waker.link
    if link is None and waker.channel is not None:
        link = waker.link = _LoopLink(loop, waker)
    _last = (weakref.ref(loop), None if link is None else weakref.ref(link))
    return link


async def run_in(
    executor: ThreadPoolExecutor,
    fn: Callable[..., _T],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    in_context: bool = False,
    loop: asyncio.AbstractEventLoop | None = None,
) -> _T:
    """``await fn(*args, **kwargs)`` on a worker of ``executor`` (see
    ``ThreadPoolExecutor.run``). ``in_context``: ``fn`` already runs in a
    copied context (no second copy for ``propagate_context``). ``loop``: the
    running loop, if the caller has it at hand."""
    if loop is None:
        loop = asyncio.get_running_loop()
    link = _link(loop)
    if link is None:  # no channel: a plain submit, waiting for room in line
        submit = functools.partial(executor.submit, fn, *args, **kwargs)
        future = await submit_when_room(executor, submit, loop)
        try:
            return await asyncio.wrap_future(future, loop=loop)
        finally:
            del future  # the cycle through the exception (see below)
    if executor._propagate_context and not in_context:
        args = (fn, *args)
        fn = contextvars.copy_context().run
    if executor._broken or executor._shutdown:
        executor._check_open()
    core = executor._core
    waiter: asyncio.Future[_T] = loop.create_future()
    turn = None  # told there is room: our turn, and our place in line (see _room)
    try:
        while True:
            try:
                # A newcomer goes behind the coroutines waiting for room (line);
                # told there is room, we come back with our turn. The last three
                # arguments (wake, line, turn) are positional: PyO3 parses
                # keywords slowly (632 against 362 ns per call, measured).
                wake = executor._max_queue != 0
                spawn, seq, owed = core.submit_async(
                    link.channel, waiter, fn, args, kwargs, wake, turn is None, turn is not None
                )
                break
            except QueueFull:
                # Only workers make room: start any an interrupted submit left
                # unstarted (each accepted submission does, a full queue none).
                executor._spawn()
                # Told, yet refused (a plain submit, or a coroutine told before
                # us, took the room): back to our place in line, not to its end.
                place = 0
                if turn is not None:
                    turn.spent()  # the refused submit ended it
                    place = turn.place
                turn = await _room(core, link.waker, loop, place, retry=turn is not None)
            except RuntimeError:
                if turn is not None:
                    turn.spent()
                executor._check_open()
                raise
        # Only now, the turn spent: a Ctrl-C landing before would lose it (_room).
        if turn is not None:
            turn.spent()
        _after_queueing(executor, link, loop, spawn, owed, seq)
    except BaseException:
        # A Ctrl-C may land once the call is queued, before its wake-up is
        # owed: nobody would hand that out (see _wake_owed_now).
        _wake_owed_now(executor)
        raise
    try:
        return await waiter
    except asyncio.CancelledError:
        _withdraw(core, seq)
        raise
    finally:
        # A call's exception raised here has this frame in its traceback:
        # keeping the future that holds it would make a cycle, and the call's
        # frames (their locals) would live until the collector runs, where
        # asyncio.to_thread frees them at once.
        del waiter


def _after_queueing(
    executor: ThreadPoolExecutor, link: Any, loop: Any, spawn: int, owed: bool, seq: int
) -> None:
    """A call (``seq``) is queued: start the worker threads the core asks for,
    and leave the wake-up it owes for the end of this loop pass (see
    ``Pool::submit_waking``). If no thread can start, the caller gets the
    error, so the call is taken back out of the queue unless a worker took it
    already (as ``ThreadPoolExecutor._spawn_for`` does for ``submit``)."""
    if spawn:
        executor._spawn_or_take_back(seq)
    if owed:
        link.owe(loop, executor)


def _wake_owed_now(executor: ThreadPoolExecutor) -> None:
    """Something (a Ctrl-C, landing at any bytecode) cut a submitter short
    on its way from ``submit_async`` through ``_after_queueing``: its call
    may be queued, its worker start unclaimed or its wake-up never owed
    (``link.owe``). Left so, the call would wait behind a busy worker, whose
    call may be waiting for it, with a parked worker beside it: hand them out
    now (with nothing owed, this wakes nobody)."""
    if executor._core.wake_owed():
        executor._spawn()


def _withdraw(core: PoolCore, seq: int) -> None:
    """The awaiting task was cancelled. Still queued: the call never runs.
    Running: it finishes on its worker and its outcome is dropped, as with
    asyncio.to_thread."""
    removed = core.remove(seq)
    if removed is not None:
        _deliver_notices(removed[0])


class _QueuedCallFuture(asyncio.Future[Any]):
    """The asyncio future ``loop.run_in_executor`` gets from an executor
    with a bounded queue (see ``submit_for_run_in_executor``). Cancelled
    while its call is queued, it takes the call out of the queue at once, as
    cancelling an ``executor.run`` task does: left there until a worker
    reached it, the call held its room meanwhile (behind a hung call, for
    good), refusing newcomers and keeping waiting coroutines waiting for a
    call that would never run."""

    __slots__ = ("_core", "_seq")

    _core: PoolCore
    _seq: int

    def cancel(self, msg: Any | None = None) -> bool:
        if not super().cancel(msg):
            return False
        _withdraw(self._core, self._seq)
        return True


def submit_for_run_in_executor(
    executor: ThreadPoolExecutor,
    loop: asyncio.AbstractEventLoop,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
) -> asyncio.Future[Any] | None:
    """``executor.submit(fn, *args)`` as called by asyncio's own
    ``loop.run_in_executor``, which only wraps the future it gets in an
    asyncio future of ``loop`` (``asyncio.wrap_future``), and returns an
    asyncio future unchanged. So return that asyncio future at once, settled
    through the loop's channel like ``executor.run``: no
    ``concurrent.futures`` future, no done callback run by the worker, no
    ``call_soon_threadsafe`` and self-pipe write per call. None: take the
    ordinary path (no channel for this loop, a full bounded queue or a
    closed executor, whose errors that path raises).

    A call whose future is cancelled while it waits in the queue never runs.
    In a bounded queue it leaves the queue at once (see
    ``_QueuedCallFuture``), otherwise when a worker reaches it, as in the
    standard library (so too on a loop making its own kind of futures).

    Called on a thread other than the one running the loop (asyncio does
    not object, and the standard library's pool serves such a call through
    ``call_soon_threadsafe``), the ordinary path serves it too: this one
    touches the loop from the calling thread (``loop.call_soon`` for an
    owed wake-up, not thread-safe: in asyncio's debug mode a RuntimeError
    raised after the call was queued)."""
    running_on = getattr(loop, "_thread_id", None)  # set while the loop runs
    if running_on is not None and running_on != get_ident():
        return None
    link = _link(loop)
    if link is None:
        return None
    if executor._propagate_context:
        args = (fn, *args)
        fn = contextvars.copy_context().run
    core = executor._core
    bounded = executor._max_queue != 0
    # Only a bounded queue has room to give back: an unbounded one keeps
    # asyncio's own future type, which asyncio's C code serves faster
    # (about 0.2 us per call of a gather of run_in_executor calls).
    queued = _QueuedCallFuture(loop=loop) if bounded and link.plain_futures else None
    waiter = loop.create_future() if queued is None else queued
    try:
        spawn, seq, owed = core.submit_async(link.channel, waiter, fn, args, None, bounded)
    except (QueueFull, RuntimeError):
        return None
    if queued is not None:
        queued._core = core
        queued._seq = seq
    _after_queueing(executor, link, loop, spawn, owed, seq)
    return waiter


class _RoomNotice(Watch):
    """One coroutine's wait for room in a bounded queue, then its turn (see
    ``_room``). Pushed onto its loop's channel when there may be room (or,
    for a loop without one, called on taut's callback thread, which hands it
    to the loop), it tells the coroutine.

    From before it joins the line until its coroutine has spent its turn, it
    is among its loop's ``closing_owners``: if the loop closes first, it
    leaves the line, or, told already, passes the turn on (``_loop_gone``)
    to the next coroutine in line, which would otherwise wait for the next
    call to leave the queue, maybe for good. Whoever takes it out of that set
    (``set.remove``/``pop``: exactly one, from any thread) does the one or
    the other; so nothing between the turn's arrival and its use (the loop's
    reader, the wake-up of the coroutine, its way back to ``submit_async``)
    can lose it, a Ctrl-C landing anywhere on that way included."""

    __slots__ = ("_core", "_waker", "place", "task")

    def __init__(
        self, on_expire: Callable[[], object], core: PoolCore, waker: LoopWaker, place: int
    ) -> None:
        super().__init__(on_expire)
        self._core = core
        self._waker = waker
        self.place = place
        # Among its loop's room_retries: the task waiting with it.
        self.task: asyncio.Task[Any] | None = None

    def __call__(self) -> None:
        """On taut's callback thread, for a loop without a channel: hand the
        notice to the loop."""
        loop = self._waker._loop_ref()
        try:
            if loop is None:
                raise RuntimeError("the loop is gone")
            loop.call_soon_threadsafe(self._fire)
        except RuntimeError:  # the loop is closed: it will never run it
            self._let_go()

    def spent(self) -> None:
        """Its coroutine came back and spent the turn (``submit_async`` with
        ``turn``, or ``pass_room_on``): nothing is left to pass on."""
        self._waker.closing_owners.discard(self)
        self._waker.room_retries.discard(self)

    def _let_go(self) -> None:
        """Its coroutine will not come back for it: unless someone else
        took it out of ``closing_owners`` already (and acts), leave the line
        or pass the turn on."""
        self._waker.room_retries.discard(self)
        try:
            self._waker.closing_owners.remove(self)
        except KeyError:
            return
        self._loop_gone()

    def __del__(self) -> None:
        """Collected while its turn may be out: its loop was dropped without
        ``close()`` (the collector found the loop, its waker, the channel
        holding this notice and the coroutine waiting for it to be garbage,
        and runs this before it takes them apart). Its coroutine will never
        come back for the turn: it passes on (or its place in line is given
        up), or coroutines on other loops would wait for room in an idle
        pool. A notice spent, or let go, is out of ``closing_owners``
        already: nothing to do."""
        self._let_go()

    def _loop_gone(self) -> None:
        """Taken out of ``closing_owners``: still in line, it leaves it;
        told there is room (in its loop's channel, read, or back in its
        coroutine), its turn passes on. (Should a Ctrl-C have cut its
        coroutine short between spending the turn and ``spent()``, this
        passes on one turn too many: the next in line is told to try, and
        if the room is taken meanwhile, goes back to its place. A turn lost
        would leave the line waiting.)"""
        self._waker.room_retries.discard(self)
        if not self._core.cancel_room_wait(self.place):
            self._core.pass_room_on()


class _StaleTurnWatch:
    """Passes on the stale turns keeping one loop's coroutines waiting for
    room (one watch per loop; see ``_room``).

    A coroutine told there is room holds its turn until it comes back, and
    the others in line wait behind it. Its loop may have stopped without
    closing (``run_until_complete`` returned, the loop is kept for later, or
    forgotten): then nobody hears of it, the turn stays out, and with the
    queue empty nothing else tells the line, which would wait for good.
    So while this loop has coroutines in line (it runs: they wait on it), it
    looks every ``_STALE_TURN_S`` at the executors they wait on, and tells
    the next in line of any with room whose last turn is that old
    (``PoolCore.tell_past_stale_turns``). One timer per loop, not one per
    coroutine: thousands of a batch's calls may wait in line at once."""

    __slots__ = ("_cores", "_timer", "_waker")

    def __init__(self, waker: LoopWaker) -> None:
        self._waker = waker
        # The executors this loop's coroutines wait on (a dict: insertion
        # ordered, no duplicates); left when they have no line any more.
        self._cores: dict[PoolCore, None] = {}
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, core: PoolCore, loop: asyncio.AbstractEventLoop) -> None:
        """A coroutine of ``loop`` waits in ``core``'s line."""
        self._cores[core] = None
        if self._timer is None:
            self._timer = loop.call_later(_STALE_TURN_S, self._look, loop)

    def _look(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        if not self._waker.closing_owners:  # none of this loop's coroutines waits
            self._cores.clear()
            return
        for core in tuple(self._cores):
            if core.has_room_line():
                core.tell_past_stale_turns(_STALE_TURN_S)
            else:
                del self._cores[core]
        if self._cores:
            self._timer = loop.call_later(_STALE_TURN_S, self._look, loop)


def _watch_for_stale_turns(
    waker: LoopWaker, core: PoolCore, loop: asyncio.AbstractEventLoop
) -> None:
    """A coroutine of ``loop`` waits in ``core``'s line: the loop's watch
    (made on first use) looks at it."""
    watch = waker.room_watch
    if watch is None:
        watch = waker.room_watch = _StaleTurnWatch(waker)
    watch.watch(core, loop)


async def _room(
    core: PoolCore,
    waker: LoopWaker,
    loop: asyncio.AbstractEventLoop,
    place: int,
    retry: bool = False,
) -> _RoomNotice:
    """Wait (without blocking the loop) until told that a bounded queue may
    have room for us; ``place``: ours in line, 0 for a newcomer. Told, we
    hold a turn until we come back (``submit_async(..., turn=True)``) or
    pass it on (``pass_room_on``): newcomers queue up behind it meanwhile.
    Returns the turn, a notice still among the loop's ``closing_owners``:
    the caller calls its ``spent()`` once the turn is spent, not before, so
    a loop closing before then (a Ctrl-C between the two) passes it on.
    ``retry``: we are back after a turn we could not use (refused).

    The line tells whoever is first in it, whatever turns are out, so two
    may be told for one room; the one refused goes back to its place and is
    told again, maybe after one behind it was told: that one's notice comes
    first on their loop, and it would take the next room first. So a
    coroutine told there is room while one of its loop ahead of it is back
    after a turn (``room_retries``; waiting in line, or told again and not
    back yet) leaves it the room: it passes its turn on and waits at its
    place again. (Only its loop's: one on a loop that does not run would
    keep it waiting. And only those back after a turn: the others ahead of
    it were told before it, so their notices come first.)"""
    if not place:
        # Known before joining the line: a Ctrl-C landing as the joining
        # call returns would lose a place assigned there.
        place = core.reserve_room_place()
    unused = None  # a turn we leave to one ahead of us, until we are back in line
    while True:
        told: asyncio.Future[None] = loop.create_future()

        def there_may_be_room(told: asyncio.Future[None] = told) -> None:
            # A task cancelled meanwhile passes its turn on itself (below).
            if not told.done():
                told.set_result(None)

        notice = _RoomNotice(there_may_be_room, core, waker, place)
        try:
            if retry:
                notice.task = asyncio.current_task(loop)
                waker.room_retries.add(notice)
            # Among closing_owners, then listed, in one call: from then on a
            # loop closing withdraws it from the line, or passes its turn on,
            # wherever the turn is. Added here and listed there, a Ctrl-C in
            # between (or the call raising) would pass on a turn never held
            # (_let_go below), and the next newcomer would jump the line.
            core.wait_for_room_async(waker.channel, notice, place, waker.closing_owners)
            _watch_for_stale_turns(waker, core, loop)
            if unused is not None:
                # Only once back in line: passed on before, it could tell
                # the one behind us, not the one ahead (now first in line,
                # or told already: its notice comes before ours).
                core.pass_room_on()
                unused.spent()
            await told
        except BaseException:
            notice._let_go()
            if unused is not None:
                unused._let_go()  # unless passed on already (spent)
            raise
        if not _retry_ahead(core, waker, place):
            return notice
        unused = notice
        retry = True


def _retry_ahead(core: PoolCore, waker: LoopWaker, place: int) -> bool:
    """Whether a coroutine of this loop waits in ``core``'s line ahead of
    ``place``, or was told and is not back, after a turn it did not use
    (see ``_room``). One whose task ended (a Ctrl-C cut it short, its
    notice left for the loop's close) waits for nothing: ignored, it keeps
    nobody waiting for good."""
    # A copy: a notice leaves the set from any thread as its loop closes.
    for other in tuple(waker.room_retries):
        if other._core is core and other.place < place:
            task = other.task
            if task is None or not task.done():
                return True
    return False


async def submit_when_room(
    executor: ThreadPoolExecutor,
    submit: Callable[[], _F],
    loop: asyncio.AbstractEventLoop | None = None,
    place: int = 0,
) -> _F:
    """``submit()`` (one of ``executor``'s submits, returning a
    ``concurrent.futures`` future; on a loop's thread it raises
    ``QueueFull`` at once when the bounded queue is full) once there is
    room: waits in line (FIFO) with the coroutines waiting for room, without
    blocking the loop. For calls that need a ``concurrent.futures`` future
    (a gather's), or on a loop without a channel. Cancelling the awaiting
    task while it waits submits nothing. ``place``: one reserved when the
    call was started (``reserve_room_place``), if it runs in a task of its
    own: the line is joined there, not behind whoever asked meanwhile."""
    if loop is None:
        loop = asyncio.get_running_loop()
    core = executor._core
    if not core.has_room_line():
        try:
            return submit()
        except QueueFull:
            pass
    waker = waker_for(loop)
    retry = False
    while True:
        turn = await _room(core, waker, loop, place, retry=retry)
        try:
            return submit()
        except QueueFull:
            place = turn.place  # a plain submit took the room: back to our place in line
            retry = True
        finally:
            core.pass_room_on()  # a plain submit knows nothing of turns: ours ends here
            turn.spent()


# Per type of loop that keeps its default executor out of reach: the
# executor's index among gc.get_referents(loop), counted from the end.
_default_executor_fields: dict[type, int] = {}


def _hidden_default_executor(loop: asyncio.AbstractEventLoop, link: _LoopLink | None) -> Any:
    """The default executor (what ``set_default_executor`` set, or what
    ``run_in_executor(None, ...)`` made; None if neither) of a loop that
    keeps it in no attribute: uvloop's, a field of its C type.

    ``gc.get_referents`` lists the fields of a C type in one fixed order
    (its traversal's), after the instance dict and the type a Python
    subclass adds (uvloop's ``Loop`` is one, its dict made on first use):
    counted from the end, the executor has one index for every loop of the
    type. Learned from the first loop seen holding a
    ``concurrent.futures.ThreadPoolExecutor``. Until then, a loop seen
    without one is looked at again only in its fields that held None or
    another executor, as one tuple compared (no Python loop over its fields
    per call): a default executor set since changes one of them."""
    fields = gc.get_referents(loop)
    index = _default_executor_fields.get(type(loop))
    if index is not None:
        return fields[index] if -index <= len(fields) else None
    no_default = None if link is None else link.no_default
    if no_default is not None:
        pick, before, count = no_default
        if len(fields) == count and pick(fields) == before:  # the same objects
            return None
    for i, field in enumerate(fields):
        if isinstance(field, concurrent.futures.ThreadPoolExecutor):
            _default_executor_fields[type(loop)] = i - len(fields)
            return field
    if link is not None:
        maybe = [
            i
            for i, field in enumerate(fields)
            if field is None or isinstance(field, concurrent.futures.Executor)
        ]
        if maybe:
            # Two indices at least (the first twice): itemgetter returns a tuple.
            pick = itemgetter(*maybe, maybe[0])
            link.no_default = (pick, pick(fields), len(fields))
    return None


async def to_thread(func: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
    """``asyncio.to_thread`` on taut's pool: run ``func(*args, **kwargs)`` in
    a worker thread, in a copy of the caller's ``contextvars`` context, and
    await its outcome. Runs on the running loop's default executor when that
    is a ``taut.ThreadPoolExecutor``, otherwise on
    ``taut.default_executor()``. Cancelling the awaiting task before the call
    started means it never runs; a call already running finishes on its
    worker and its outcome is dropped."""
    if not callable(func):
        # Before anything is queued (see ThreadPoolExecutor.run).
        raise TypeError(f"func must be a callable, got {describe(func)}")
    loop = asyncio.get_running_loop()
    link = _link(loop)
    try:
        executor = loop._default_executor  # type: ignore[attr-defined]
    except AttributeError:
        executor = _hidden_default_executor(loop, link)
    if not isinstance(executor, ThreadPoolExecutor):
        executor = default_executor()
    run = contextvars.copy_context().run
    if link is not None and not (executor._broken or executor._shutdown):
        # run_in's common case, inline: one coroutine frame per call, not two.
        core = executor._core
        waiter: asyncio.Future[_T] = loop.create_future()
        queued = False
        try:  # see run_in: a Ctrl-C from here on must not lose the wake-up owed
            try:
                spawn, seq, owed = core.submit_async(  # wake, line: positional, see run_in
                    link.channel, waiter, run, (func, *args), kwargs, executor._max_queue != 0, True
                )
            except (QueueFull, RuntimeError):
                pass  # run_in waits for room, or raises the right error
            else:
                queued = True
                _after_queueing(executor, link, loop, spawn, owed, seq)
        except BaseException:
            _wake_owed_now(executor)
            raise
        if queued:
            try:
                return await waiter
            except asyncio.CancelledError:
                _withdraw(core, seq)
                raise
            finally:
                del waiter  # the cycle through the call's exception (see run_in)
    return await run_in(executor, run, (func, *args), kwargs, in_context=True, loop=loop)
