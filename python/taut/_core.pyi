"""Type stubs for the Rust core, checked against the binary with mypy.stubtest."""

import asyncio
from collections.abc import Awaitable, Generator, Iterable
from types import FrameType, TracebackType
from typing import Any, Callable, final

from typing_extensions import Self, disjoint_base

from taut.deadline._scope import DeadlineScope

__all__ = [
    "MAX_TIMEOUT",
    "OS_WAIT_SLICE",
    "Deadline",
    "Done",
    "FutureStateLock",
    "LoopChannel",
    "PoolCore",
    "Ready",
    "ScopeCore",
    "TreeKill",
    "WokenBatch",
    "WorkerSlot",
    "__version__",
    "_close_gil_gate",
    "_gil_gate_after_fork",
    "_gil_gate_closed",
    "_os_thread_ident",
    "_os_wait_probe",
    "_scope_setup",
    "_seconds",
    "_set_main_thread",
    "_take_back_own_interrupt",
    "_take_sent_signals",
    "_timer_add_panicking_action",
    "_timer_after_fork",
    "_timer_info",
    "_timer_next_callback",
    "_timer_probe",
    "_timer_shutdown",
    "clamp_timeout",
    "fail_after",
    "monotonic",
    "move_on_after",
    "process_start_time",
    "running_processes",
    "signal_process_tree",
    "signal_process_tree_at",
    "signal_process_trees",
]
__version__: str

MAX_TIMEOUT: float
"""The longest deadline taut keeps, in seconds: 2**32 s (4,294,967,296 s,
136.1 years).

Every finite timeout up to it is honoured exactly (a 30-day timeout fires
after 30 days, a 100-year one after 100 years): the timer thread keeps it in
nanoseconds of the monotonic clock, and only the OS waits in front of it are
made in ``OS_WAIT_SLICE`` pieces. A finite value beyond it (``10**400``,
``timedelta.max``) is clamped to it: a deadline 136 years away, so in
practice no deadline; ``None`` and ``math.inf`` are no deadline. It is less
than half of what Python's own time conversions take (int64 nanoseconds,
9.2e9 s), so ``MAX_TIMEOUT + grace`` still converts for any grace under a
century."""

OS_WAIT_SLICE: float
"""The longest single OS wait taut makes, in seconds (1,000,000 s, 11.6
days): below ``poll``/``epoll``'s ``INT_MAX`` milliseconds (24.8 days) and
Windows' ``DWORD`` milliseconds (49.7 days). Longer waits are made in
pieces, re-reading the clock in between, so nothing is cut short."""

def clamp_timeout(value: object, /, *, name: str = "timeout") -> float | None:
    """Normalise a timeout: the one gate every timeout passes.

    ``None`` and ``math.inf`` mean no deadline (``None``); zero or negative
    (including ``-inf``) mean already expired (``0.0``); finite values are
    kept exactly up to ``MAX_TIMEOUT`` and clamped to it beyond. Accepts
    ``int`` of any size, ``float``, ``Decimal``, ``Fraction``,
    ``datetime.timedelta``, ``numpy.timedelta64`` (in seconds, whatever its
    unit) and other numpy scalars (any object with ``__index__`` or
    ``__float__``). Raises ``TypeError`` for ``bool``, strings, ``datetime64``
    and other types and ``ValueError`` for NaN (also ``Decimal('sNaN')`` and
    ``NaT``); messages name ``name``, the value and its type. An
    ``Exception`` raised by the value's own methods becomes that
    ``TypeError`` (its ``__cause__``); a ``BaseException`` that is not an
    ``Exception`` (``KeyboardInterrupt``) propagates unchanged. Never
    ``OverflowError``."""

def _seconds(value: object, /, *, name: str = "timeout") -> float | None:
    """The conversion of ``clamp_timeout`` with the sign kept and nothing
    clamped: ``None`` for ``None``, ``inf``/``-inf`` as given, finite values
    beyond the float range as ``±sys.float_info.max``. Same errors. Used by
    ``taut._checks`` for durations that refuse negatives and for absolute
    deadlines."""

def monotonic() -> float:
    """Seconds on the timer's clock: the clock ``time.monotonic()`` reads."""

@final
class Deadline:
    """One deadline armed on the process's single timer thread.

    Arming and cancelling cost well under a microsecond. At expiry the timer
    thread, without the GIL, flips ``expired``, wakes ``wait()``-ers and
    writes to ``notify_fd`` fds; Python callables and thread interrupts go
    to taut's Python callback thread. Deadlines armed before ``os.fork()``
    belong to the parent and never fire in the child."""

    def __new__(cls, at: float) -> Deadline:
        """Arm a deadline at ``at``, absolute ``time.monotonic()`` seconds
        (already clamped; a time in the past fires at once)."""

    @property
    def at(self) -> float:
        """The absolute ``time.monotonic()`` time this deadline fires at."""

    @property
    def expired(self) -> bool:
        """True once the deadline has fired (one atomic load)."""

    @property
    def cancelled(self) -> bool:
        """True if ``cancel()`` won before expiry."""

    def remaining(self) -> float:
        """Seconds left until expiry, never negative."""

    def cancel(self) -> bool:
        """Disarm. True if it had not fired (its callbacks will never run);
        False if it had already fired. Called from a thread that an
        ``interrupt_thread`` targeted, it also discards an interrupt that was
        set but not raised yet."""
    def cancel_in_time(self) -> bool:
        """``cancel()``, and whether the owner left in time: True if it had
        not fired and the clock still reads before ``at``."""

    def wait(self, timeout: float | None = None) -> bool:
        """Block with the GIL released until expiry (True), cancel or
        ``timeout`` seconds (False). Wakes every 50 ms for signals, so
        Ctrl-C lands. ``timeout`` passes ``clamp_timeout``: any size is
        accepted (``10**400`` waits up to ``MAX_TIMEOUT``), a bool or text
        is a ``TypeError``, NaN a ``ValueError``."""

    def notify_fd(self, fd: int) -> None:
        """At expiry the timer thread writes one byte ``b"\\x01"`` to ``fd``,
        without the GIL and never blocking. ``fd`` must be a socket or a
        non-blocking pipe write end, and stay open until the byte arrived or
        ``cancel()`` returned (after that nothing is written, even if the
        deadline had fired). A bool or non-int is a ``TypeError``, an int
        outside 0..2**31-1 a ``ValueError``, a closed fd an ``OSError``."""

    def signal_main_thread(self, signum: int) -> None:
        """At expiry the timer thread sends signal ``signum`` to the main
        thread with ``pthread_kill``, without the GIL. Nothing if already
        expired, or once ``cancel()`` has returned. Unix only."""

    def call_soon(self, fn: Callable[[], object]) -> None:
        """At expiry run ``fn()`` on taut's Python callback thread
        (exceptions go to ``sys.unraisablehook``). Runs soon if already
        expired; never if cancelled first."""

    def interrupt_thread(
        self, thread_id: int, exc_type: type[BaseException], *, block: FrameType | None = None
    ) -> None:
        """At expiry raise ``exc_type`` in thread ``thread_id`` (its
        ``threading.get_ident()``) at its next bytecode boundary, via the
        callback thread. Not inside a blocking C call; skipped if
        ``cancel()`` is called first. With ``block`` (a frame of that
        thread, kept alive by the caller until it cancels), only while that
        frame is on the thread's stack: put off while it is suspended. A
        bool or non-int ``thread_id`` is a ``TypeError``, one outside
        0..2**64-1 a ``ValueError``."""

def _take_back_own_interrupt() -> None:
    """Take back an interrupt set for the calling thread that has not landed
    yet, leaving no "asynchronous exception pending" flag raised for good
    (which ``PyThreadState_SetAsyncExc(thread, NULL)`` does before 3.13)."""

def _take_sent_signals() -> int:
    """How many signals ``Deadline.signal_main_thread`` sent since the last call
    (the count goes back to zero)."""

def _timer_next_callback() -> Callable[[], object] | None:
    """The next Python callable for taut's callback thread; None at exit.
    Waits with the GIL released (``taut._timer._callback_loop`` calls it)."""

def _timer_after_fork() -> None:
    """Give a forked child a fresh timer and callback queue."""

def _timer_shutdown() -> None:
    """Stop the timer thread and the callback thread (interpreter exit)."""

def _timer_info() -> dict[str, Any]:
    """Diagnostics: running, heap_len, action_panics, callback_thread."""

def _timer_probe(delay: float) -> tuple[float, float]:
    """Arm ``delay`` s ahead; return how late a Rust action ran and a Rust
    waiter woke, in seconds (GIL-free lateness, for benchmarks)."""

def _os_wait_probe(delay: float, samples: int) -> list[float]:
    """``samples`` bare OS waits of ``delay`` s on a thread with the timer
    thread's slack: how late each woke, in seconds (the floor under
    ``_timer_probe``, for benchmarks)."""

def _timer_add_panicking_action(deadline: Deadline) -> None:
    """Test hook: attach a Rust action that panics at expiry."""

# -- interpreter exit (rust/gil.rs) --------------------------------------------

def _close_gil_gate() -> None:
    """From now on no other thread comes back into Python after a GIL-free
    wait in the Rust core (it parks for good instead). taut's last
    ``atexit`` hook; the calling thread keeps passing."""

def _gil_gate_closed() -> bool:
    """Whether ``_close_gil_gate`` ran (diagnostics and tests)."""

def _gil_gate_after_fork() -> None:
    """In a forked child: open the gate again."""

def _set_main_thread(ident: int) -> None:
    """Record the thread that sees signals (``threading.main_thread().ident``)."""

# -- process trees (rust/proctree.rs); Linux only, all without the GIL --------

def signal_process_tree(
    pid: int, sig: int, start_time: int | None = None
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]] | None:
    """Freeze the tree rooted at ``pid`` with ``SIGSTOP`` (rescanning ``/proc``
    until no new member appears: descendants by parent link, plus members of
    process groups and sessions that a member leads), send ``sig`` to every
    member, then ``SIGCONT`` unless ``sig`` is ``SIGKILL`` or ``SIGSTOP``.
    The caller, its ancestors and the members of its process group are never
    stopped nor signalled: as the root they are a ``ValueError``, inside the
    tree they are skipped (an ancestor ends the walk, a group member passes its
    descendants on); the caller's session is never expanded. With
    ``start_time``, the root must be that exact process. Returns ``None`` if the
    root is gone, else ``(signalled, skipped)`` as ``(pid, start_time)``
    identities. ``TypeError``/``ValueError`` (never ``OverflowError``) for a pid
    outside 1..2**31-1, a signal outside 1..64 or a bad start time; OS failures
    raise the ``OSError`` subclass of their errno (``PermissionError`` when no
    member could be signalled because we may not)."""

def signal_process_trees(
    procs: list[tuple[int, int]], sig: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Like ``signal_process_tree`` for several roots named by ``(pid,
    start_time)``; roots no longer running as that process are skipped, and so
    are protected roots (reported in ``skipped``, not refused). Returns
    ``(signalled, skipped)``."""

def running_processes(procs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ``(pid, start_time)`` identities among ``procs`` that still run
    (a zombie has exited; a reused pid is another process)."""

def process_start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks after boot (field 22 of
    ``/proc/PID/stat``), or ``None`` if there is no such process."""

def signal_process_tree_at(
    deadline: Deadline,
    pid: int,
    sig: int,
    start_time: int | None = None,
    pipes: Iterable[int] | None = None,
) -> TreeKill:
    """At the expiry of ``deadline``, do ``signal_process_tree(pid, sig,
    start_time)`` on a short-lived Rust thread that the timer thread starts,
    without the GIL (at once if already expired; never if cancelled first).
    A protected root is refused with ``ValueError`` now, and fails the kill at
    expiry. ``pipes``: file descriptors of the caller's ends of pipes to the
    command (``ValueError`` for one that is not a pipe, ``OSError`` EBADF for
    one not open); a member still holding one of them, while the caller holds
    it too, when the kill comes is reported in ``TreeKill.pipe_holders``.
    Returns the kill's report."""

@final
class TreeKill:
    """What a kill armed by ``signal_process_tree_at`` found when it struck:
    whether the command was still running (the root not yet exited, a zombie
    has; or a member of the tree holding a watched pipe), so that a caller
    that gets to look only after the deadline fired can tell an end the kill
    caused from one that came by itself."""

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the kill is over: it ran, failed, or will never run (its
        deadline was cancelled first). False if ``timeout`` seconds passed
        first. Without the GIL; on the main thread Ctrl-C interrupts it."""

    @property
    def state(self) -> str:
        """``"pending"``, ``"ran"``, ``"failed"`` or ``"not run"``."""

    @property
    def found_running(self) -> bool | None:
        """Whether the kill found the command still running: ``root_running``
        or any ``pipe_holders``. ``None`` unless the kill ran to its end."""

    @property
    def root_running(self) -> bool | None:
        """Whether the root had not exited when the kill began (a zombie has);
        ``None`` unless the kill ran."""

    @property
    def pipe_holders(self) -> list[tuple[int, int]]:
        """The members, frozen just before the signal, that still held a
        watched pipe, as ``(pid, start_time)``."""

    @property
    def signalled(self) -> list[tuple[int, int]]:
        """The processes the kill signalled, as ``(pid, start_time)``."""

    @property
    def error(self) -> str | None:
        """Why the kill failed, if it did."""

# A call as the pool hands it out: (future, fn, args, kwargs or None).
_Call = tuple[Any, Callable[..., Any], tuple[Any, ...], dict[str, Any] | None]

@final
class FutureStateLock:
    """The re-entrant lock of ``taut.Future``'s lock-free state changes
    (``taut._future._state_lock``): what ``threading.RLock`` offers, taken
    by the workers in Rust without a Python call."""

    def __init__(self) -> None: ...
    def acquire(self, blocking: bool = True, timeout: float = -1.0) -> bool: ...
    def release(self) -> None: ...
    def __enter__(self) -> bool: ...
    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None: ...
    def _is_owned(self) -> bool: ...
    def locked(self) -> bool: ...

@final
class WorkerSlot:
    """One worker thread's handle on its pool (``PoolCore.claim()``).

    The worker loop is Python (``taut._worker._work``); every method here
    returns the next *step* before any user code runs: ``None`` (exit),
    ``False`` (idle: drop references, then ``park()``), a ``_Call`` tuple
    (already RUNNING: call it, then ``ok(value)`` or ``fail(exc)``), or a
    list for the slow paths that need Python: ``[0, notices, future, fn,
    args, kwargs, tracker]`` (deliver notices, start the future with its own
    method, then run it or ``skip()``) and ``[1, future, ok, value]``
    (complete the future with its own method, then ``done(ok)``)."""

    def take(self) -> Any:
        """The first step; waits (GIL released) until there is work. None
        (exit) if the place was given back before the thread reported in."""
    def give_back(self) -> bool:
        """The thread claimed for this slot will never report in (never made,
        or its initializer failed): its place is free again (dropping such
        a slot does the same). False if the thread reported in already."""
    def start_failed(self) -> bool:
        """The thread for this slot could not be made (``Thread.start``
        raised an error, not an interrupt): as :meth:`give_back`, and the
        starts still unclaimed are dropped too (they would fail alike, and
        while owed they count as workers and keep idle workers from the
        queued calls). False if the thread reported in already."""
    def park(self) -> Any:
        """After a ``False`` step: wait (GIL released) for work."""
    def ok(self, value: Any) -> Any:
        """The running call returned ``value``."""
    def fail(self, exc: BaseException) -> Any:
        """The running call (or the step about to start it) raised ``exc``;
        re-raises it when no call is running."""
    def done(self, ok: bool) -> Any:
        """After a finish step, once Python completed the future."""
    def skip(self) -> Any:
        """After a start step whose future turned out cancelled."""
    @property
    def thread_id(self) -> int:
        """``threading.get_ident()`` of the worker (0 before it runs)."""
    @property
    def current(self) -> int:
        """Sequence number of the running call, 0 when idle."""
    @property
    def abandoned(self) -> bool:
        """True once the executor gave up on this worker."""
    @property
    def running_future(self) -> Any:
        """The ``taut.Future`` of the running call; None when idle, for an
        ``executor.run`` call, or when its record is locked at this moment
        (only tried, never waited for: a forked child reads it)."""

@final
class WokenBatch:
    """What one drain took from a :class:`LoopChannel`, handed out one
    ``(target, ok, value)`` at a time. The entries not handed out yet go back
    to the channel (ahead of later ones, with a wake-up) at :meth:`give_back`
    or when the batch goes away, so a pass that stops early loses none."""

    def __iter__(self) -> WokenBatch: ...
    def __next__(self) -> tuple[Any, bool | None, Any]: ...
    def __len__(self) -> int: ...
    def give_back(self) -> None:
        """Put the entries not handed out yet back into the channel."""

@disjoint_base
class ScopeCore:
    """The fields of a deadline scope and its usual entry and exit, one Rust
    call each; ``taut.DeadlineScope`` (the subclass) does everything else
    through ``_enter_slow``, ``_aenter_slow``, ``_exit`` and ``_aexit_slow``."""

    _relative: float | None
    _absolute: float | None
    _raise: bool
    label: str
    _interrupt: bool
    _clock: Callable[[], float]
    _at: float | None
    _deadline: Deadline | None
    _entered: bool
    _closed: bool
    _abandoned: bool
    _expired: bool | None
    _task: asyncio.Task[Any] | None
    _cancel_requested: bool
    _signal_armed: bool
    _cancelling: int
    _effective: float | None
    _outer: ScopeCore | None
    _parent: ScopeCore | None
    _start: float
    _token: Any
    _interrupt_raised: bool
    _thread: int
    _frame: FrameType | None
    _stack_root: FrameType | None
    def __new__(
        cls,
        seconds: object = None,
        absolute: float | None = None,
        raise_on_expiry: bool = True,
        label: str = "operation",
        interrupt: bool = False,
    ) -> Self: ...
    def __enter__(self) -> Self: ...
    def __aenter__(self) -> Ready: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...
    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Awaitable[bool | None]: ...
    def __reduce__(self) -> tuple[type[Self], tuple[Any, ...]]: ...

@final
class Ready:
    """An ``await`` over at once with the entered scope."""

    def __await__(self) -> Generator[Any, None, Any]: ...
    def __iter__(self) -> Ready: ...
    def __next__(self) -> None: ...

@final
class Done:
    """An ``await`` over at once with None (the exception is not swallowed)."""

    def __await__(self) -> Generator[Any]: ...
    def __iter__(self) -> Done: ...
    def __next__(self) -> None: ...

def fail_after(
    seconds: object, label: str = "operation", *, interrupt: bool = False
) -> DeadlineScope:
    """A scope that raises ``DeadlineExpired`` on exit if ``seconds`` (counted
    from entry) passed; see ``taut.deadline``."""

def move_on_after(
    seconds: object, label: str = "operation", *, interrupt: bool = False
) -> DeadlineScope:
    """Like ``fail_after`` but exits quietly; ``scope.expired`` tells."""

def _os_thread_ident() -> int:
    """This OS thread's identity, as the scopes' fast paths record it:
    ``threading.get_ident()``'s, unless gevent or eventlet patched that to
    name greenlets."""

def _scope_setup(
    innermost: Any,
    last_seen: list[Any],
    get_running_loop: Callable[[], Any] | None,
    task_of: Callable[[Any], Any] | None,
    c_task: type | None,
    monotonic: Callable[[], float],
    clock: list[Callable[[], float]],
    scope_type: type[DeadlineScope],
    has_cancelling: bool,
) -> None:
    """Hand the scope fast paths what they call (once, from taut.deadline._scope)."""

@final
class LoopChannel:
    """Completions for one asyncio event loop: workers push ``(target, ok,
    value)`` without running Python code and write one byte to ``fd`` only
    when the loop is not already due to drain; the loop's reader callback
    takes them all at once. Owns ``fd``: closes it once the channel and every
    deadline armed through it are gone."""

    def __new__(cls, fd: int) -> LoopChannel: ...
    def take(self) -> list[tuple[Any, bool | None, Any]]:
        """Every completion so far, oldest first (read the wake-up bytes
        first). ``ok`` None: a room notice whose target is a callable, or
        the target of an expired deadline (``arm``/``watch``)."""
    def take_woken(self, reader_fd: int) -> WokenBatch:
        """``take`` after emptying ``reader_fd`` (the caller's reading end,
        non-blocking) of its wake-up bytes, without raising once it is empty;
        as a :class:`WokenBatch`, which puts back what it did not hand out."""
    def arm(self, at: float, target: Any) -> Deadline:
        """A deadline at ``at`` (``time.monotonic()`` seconds) whose expiry
        pushes ``(target, None, None)`` from the timer thread, without the
        GIL (a wake-up byte as for completions). Never if cancelled first."""
    def watch(self, deadline: Deadline, target: Any) -> None:
        """Push ``(target, None, None)`` when ``deadline`` expires (at once
        if it already has); never if it is cancelled first."""
    def close_inbox(self) -> list[tuple[Any, bool | None, Any]]:
        """The loop closed: returns the completions waiting (for the caller
        to drop); later pushes are dropped, never kept."""
    def __len__(self) -> int: ...

@final
class PoolCore:
    """The Rust side of one ``taut.ThreadPoolExecutor``: the FIFO queue and
    the worker ceiling. Its methods never run Python code."""

    def __new__(
        cls, max_workers: int, max_queue: int = 0, idle_timeout: float | None = None
    ) -> PoolCore: ...
    def claim(self) -> WorkerSlot | None:
        """Claim one worker start the pool owes (submissions return how many
        are unclaimed): the slot for the new thread, or None when none is
        owed. A slot whose thread never reports in gives its place back."""
    def submit(
        self,
        future: Any,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None = None,
    ) -> int:
        """Queue a call; sets ``future._seq``. Returns how many worker
        starts are unclaimed (usually 0 or 1; ``claim`` them), an earlier
        caller's left behind included. Raises ``taut.QueueFull`` when the
        bounded queue is full and ``RuntimeError`` once shut down."""
    def submit_tracked(
        self,
        future: Any,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        tracker: Any,
    ) -> tuple[int, int | None]:
        """``submit`` with queue notices through ``tracker``; returns
        ``(unclaimed, position)``, position None when the call starts at once."""
    def submit_async(
        self,
        channel: LoopChannel,
        waiter: Any,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None = None,
        wake: bool = True,
        line: bool = False,
        turn: bool = False,
    ) -> tuple[int, int, bool]:
        """Queue a call whose outcome settles the asyncio future ``waiter``
        on its loop through ``channel``; ``(unclaimed, seq, owed)``. Raises like
        ``submit``; ``remove(seq)`` withdraws it while queued. ``wake``
        False: wake a parked worker only if none is on its way already;
        ``owed`` then says ``wake_owed()`` should follow (soon, not
        necessarily: the worker on its way takes every queued call).
        ``line``: refused as full while asyncio submitters wait for room (or
        were told there is some and are not back yet), to keep FIFO order.
        ``turn``: a waiter told there is room, coming back."""
    def wake_owed(self) -> int:
        """Wake parked workers for queued calls nobody is on the way for
        (after ``submit_async(..., wake=False)``); returns how many worker
        starts are unclaimed."""
    def wait_for_room_async(
        self,
        channel: LoopChannel | None,
        notice: Any,
        place: int = 0,
        owners: set[Any] | None = None,
    ) -> int:
        """An asyncio submitter found the queue full: ``notice`` is pushed
        onto ``channel`` (as ``(notice, None, None)``; the loop's reader
        calls ``notice._fire()``) when there may be room (FIFO); with
        ``channel`` None (a loop without one), ``notice()`` is called on
        taut's callback thread instead. Returns an id, its place in line,
        for ``cancel_room_wait``; ``place``: the id it had, to go back to
        that place (told there was room, it lost it). ``owners``: a set the
        notice is added to first, in the same call (no Ctrl-C between)."""
    def reserve_room_place(self) -> int:
        """A place in the line of room (``wait_for_room_async``'s
        ``place``) for a caller that joins it a moment later: ahead of
        whoever asks for room from now on."""
    def has_room_line(self) -> bool:
        """Whether asyncio submitters wait for room, or were told there is
        some and are not back yet (a newcomer keeping FIFO waits behind)."""
    def cancel_room_wait(self, id: int) -> bool:
        """Withdraw a room waiter; False if it was already told."""
    def pass_room_on(self) -> None:
        """A told room waiter will not come back (or came back through a
        plain ``submit``): its turn ends, the next one is told if there is room."""
    def tell_past_stale_turns(self, age: float) -> bool:
        """Tell the first room waiter to try again if there is room and
        nobody was told for ``age`` seconds (the turns out are held by
        loops that stopped without closing). True if someone was told."""
    def wait_for_room(self, timeout: float | None = None) -> None:
        """Wait (GIL released, Ctrl-C honoured) until the bounded queue may
        have room or the pool shut down."""
    def remove(self, seq: int, refused: bool = False) -> tuple[list[tuple[Any, int]], _Call] | None:
        """Take a cancelled call out of the queue: ``(notices, call)`` for
        the caller to deliver and drop; None if a worker has it.
        ``refused``: the call's submission is refused after all (no worker
        thread could start for it), not counted as cancelled."""
    def pop_queued(self) -> tuple[list[tuple[Any, int]], _Call] | None:
        """Take the oldest queued call out by hand (``_work_queue.get()``):
        ``(notices, call)``, None if the queue is empty."""
    def abandon(self, slot: WorkerSlot, seq: int) -> tuple[bool, int]:
        """Give up on the worker running ``seq``: ``(abandoned, worker
        starts unclaimed)``."""
    def interrupt(self, slot: WorkerSlot, seq: int, exc_type: Any) -> bool:
        """Raise ``exc_type`` in the worker running ``seq``."""
    def resize(self, max_workers: int) -> int:
        """Change the ceiling; returns how many worker starts are unclaimed."""
    def shutdown(self) -> None:
        """Refuse new calls; queued ones still run; idle workers exit."""
    def drain(self, into: list[_Call], waiting_only: bool = False) -> None:
        """Take every queued call out, appending them to ``into`` in queue
        order (the caller's list keeps them should a Ctrl-C be raised the
        moment this returns). ``waiting_only``: leave those a worker is
        already on its way to."""
    def drain_after_fork(self) -> list[_Call] | None:
        """``drain`` in a forked child, None if the lock was held at fork."""
    def orphan(self) -> None:
        """In a forked child: never touch this pool again; ``remove`` and
        ``position`` answer without locking."""
    def spin_for_release(self, timeout: float | None = None) -> None:
        """Spin, GIL released, until a worker comes back for work (the
        pool's spin window at most, never past ``timeout`` seconds)."""
    def position(self, seq: int) -> int | None:
        """The 1-based queue position of ``seq``, None once it started."""
    def spin_window(self) -> float:
        """Seconds workers and result waiters spin before parking: three
        measured wake-ups of a parked thread, 50-250 µs."""
    def calls_are_long(self) -> bool:
        """True when this pool's calls are known to run longer than its spin
        window on average (a new worker then starts without the submitter
        waiting for it to run)."""
    def in_worker(self) -> bool:
        """True on a worker thread of this pool."""
    def stats(self) -> tuple[int, int, int, int, int, int, int, int, int]:
        """``(max_workers, workers, idle, running, queued, completed, failed,
        cancelled, abandoned)``."""
