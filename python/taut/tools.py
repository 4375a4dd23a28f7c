"""Tool batches of one agent turn: :class:`ToolRunner`.

A model answers with a batch of tool calls. Calls marked read-only run in
parallel on a bounded pool of tool workers (threads ``agent-tool-worker_N``,
daemon); any other call runs alone, after the calls before it and before the
calls after it, so a write never overlaps a read of the same turn. Calls beyond
the ceiling wait in FIFO order and are never refused; a caller can watch the
queue through ``on_notice`` (:class:`QueueNotice`, English or German text).
Results come back in batch order with their call ids; a call that runs past its
deadline becomes an error result for the model ("Error executing tool 'NAME':
timed out after 420.0s", the effective timeout of its group) marked
``timed_out`` so it is never confused with the tool's own error. Its worker is
abandoned (a replacement takes its place), so a hung tool cannot shrink the
pool.

Ceiling: ``capacity.tool_workers`` of the config, 32 when nothing sets it
(:data:`taut.config.TOOL_WORKERS_DEFAULT`; 0 = no ceiling).

Deadlines: a parallel group gets ``tools.concurrent_batch`` seconds (default
420, legacy variable ``TAUT_CONCURRENT_TOOL_TIMEOUT_S``), a call that runs alone
gets ``tools.sequential_call`` (default: the concurrent value); both are read
through :mod:`taut.config` at each batch unless given to the constructor. The
``timeout`` of :meth:`ToolRunner.run` and an enclosing deadline scope
(``with taut.fail_after(...)``, ``with budget:``) bound the whole batch on top
of them: each group gets the earliest of every deadline that applies.

A batch started from inside one of this runner's workers (a tool that starts a
sub-agent) runs its calls inline on that worker's thread, one after another:
waiting for workers of the same bounded pool could wait forever.
"""

from __future__ import annotations

import enum
import functools
import logging
import threading
import time
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Union

from taut import config as taut_config
from taut._callables import generator_kind, is_coroutine_function, not_a_coroutine
from taut._checks import check_count, check_timeout, describe, earliest, plain_str
from taut.deadline import remaining as scope_remaining
from taut.executor import ThreadPoolExecutor
from taut.gather import Call, GatherRejected, Outcome, Scheduler, Submission
from taut.gather.executors import is_shut_down
from taut.gather.handles import nested_argument
from taut.gather.limits import check_limiter

__all__ = ["FROM_CONFIG", "QueueNotice", "ToolCall", "ToolResult", "ToolRunner", "ToolStatus"]

_log = logging.getLogger("taut.tools")

# "No ceiling" still needs a number for the pool; threads start only on demand
# and retire when idle, as in an unbounded cached pool.
_NO_CEILING = 1 << 16
_IDLE_TIMEOUT = 60.0
_DEFAULT_BATCH_TIMEOUT = 420.0

_TEXTS = {
    "en": "Waiting for a free worker - position {position}",
    "de": "Warte auf einen freien Bearbeiter - Position {position}",
}
# Waiting for a fleet-wide limiter: no queue position is known there.
_SLOT_TEXTS = {
    "en": "Waiting for a free slot",
    "de": "Warte auf einen freien Platz",
}


class _FromConfig(enum.Enum):
    """The default of a ToolRunner deadline: read from the config at each batch.
    An enum member, so ``help(ToolRunner)`` shows ``<from config>`` rather than
    ``<object object at 0x...>`` and type checkers know the type."""

    FROM_CONFIG = "from config"

    def __repr__(self) -> str:
        return "<from config>"


FROM_CONFIG = _FromConfig.FROM_CONFIG
"""Pass it (or leave the argument out) to read a deadline from the config:
wrappers that forward their own arguments to ToolRunner can use it."""

TimeoutSetting = Union[float, None, _FromConfig]


@dataclass(frozen=True)
class ToolCall:
    """One tool call of a model's batch: ``fn(**arguments)``.

    Every key of ``arguments`` reaches ``fn`` unchanged, one named ``call_id``
    too. ``read_only`` calls may run in parallel with each other; others run
    alone. The field ``call_id`` is the model's id for the call (results carry
    it back), never an argument of the tool.
    """

    name: str
    fn: Callable[..., Any]
    arguments: Mapping[str, Any] = field(default_factory=dict)
    read_only: bool = False
    call_id: str | None = None

    def __post_init__(self) -> None:
        # Kept as plain text, as the model knows the tool: a tool named by a
        # (str, Enum) member is "search", not "Tool.SEARCH" (its format() on
        # Python 3.11+). No method of a str subclass runs later either, when
        # the results are made after the tools have run.
        name = plain_str(self.name)
        if name is None:
            raise TypeError(f"name must be a non-empty str, got {describe(self.name)}")
        object.__setattr__(self, "name", name)
        if not self.name:  # a str, but no name: the wrong value, not the wrong type
            raise ValueError(f"name must be a non-empty str, got {describe(self.name)}")
        if not callable(self.fn):
            raise TypeError(f"fn must be callable, got {describe(self.fn)}")
        kind = generator_kind(self.fn)
        if kind:
            # Called, it only makes a generator: the body would never run, and
            # the call would come back 'ok' with "<generator object ...>".
            raise TypeError(
                f"tool {self.name!r}: fn is {kind} function, got {describe(self.fn)}; "
                "a tool returns its result: collect the items in the tool "
                "(return list(...)) or return the text"
            )
        if not isinstance(self.arguments, Mapping):
            raise TypeError(
                f"arguments must be a mapping, got {describe(self.arguments)}"
            )
        # read_only="no" would be truthy and run the call beside its neighbours.
        if not isinstance(self.read_only, bool):
            raise TypeError(f"read_only must be a bool, got {describe(self.read_only)}")
        if self.call_id is not None:
            # The model's id as plain text, for the same reasons as the name.
            call_id = plain_str(self.call_id)
            if call_id is None:
                raise TypeError(f"call_id must be a str or None, got {describe(self.call_id)}")
            object.__setattr__(self, "call_id", call_id)
            if not self.call_id:
                # As taut.call refuses it: a result cannot carry '' back (it
                # got call_N, an id the model never gave).
                raise ValueError(
                    f"call_id must be a non-empty str or None, got {describe(self.call_id)}"
                )


ToolStatus = Literal["ok", "error", "timeout"]
"""How a tool call ended: the values of :attr:`ToolResult.status`."""


@dataclass(frozen=True)
class ToolResult:
    """The result of one tool call, in the shape a model consumes.

    ``status`` is ``'ok'``, ``'error'`` (the tool raised, was cancelled, or
    returned a value whose ``str()`` raised: ``value`` still holds it) or
    ``'timeout'`` (ran past its deadline, or never got a worker before the
    batch deadline: ``started`` tells which). ``text`` is what goes back to the
    model: the value as text (made on the worker, within the call's deadline),
    or "Error executing tool 'NAME': ...".
    """

    call_id: str
    name: str
    status: ToolStatus
    text: str
    value: Any = None
    error: BaseException | None = None
    started: bool = False
    elapsed_s: float = 0.0

    @property
    def is_error(self) -> bool:
        return self.status != "ok"

    @property
    def timed_out(self) -> bool:
        return self.status == "timeout"


@dataclass(frozen=True)
class QueueNotice:
    """A queue notice for one call.

    ``kind`` is ``'waiting'`` (the call could not start at once), ``'position'``
    (it moved up: each position from 10 down, above that the round ones it
    reaches, 20, 50, 100, 200, 500, ...), ``'started'`` (it got a worker: clear the
    notice) or ``'dropped'`` (the batch deadline came first, or the batch was
    cancelled or interrupted: clear the notice).
    ``text`` is the line to show, ``''`` for the clearing kinds.
    """

    kind: str
    call_id: str
    name: str
    position: int | None
    text: str

    @property
    def clears(self) -> bool:
        return self.kind in ("started", "dropped")


def _config_value(getter: Callable[[Any], Any], source: Any, default: Any) -> Any:
    """Read one setting through taut.config; a broken config never breaks a
    tool batch."""
    try:
        return getter(source)
    except Exception:
        name = getter.__name__
        _log.warning("could not read %s from the taut config; using %r", name, default)
        return default


def _check_notice_callback(on_notice: object) -> None:
    # Checked up front: a non-callable would only fail, logged, at each notice.
    if on_notice is not None and not callable(on_notice):
        raise TypeError(f"on_notice must be a callable or None, got {describe(on_notice)}")


def _check_workers(value: Any, what: str) -> int:
    """A worker ceiling (0 = no ceiling), through the one gate for sizes."""
    return check_count(value, what, minimum=0)


class ToolRunner:
    """Runs the tool calls of agent turns on one bounded pool of tool workers.

    ``tool_workers`` is the ceiling (0 = none); when not given it comes from
    the config (``capacity.tool_workers``, 32 when nothing sets it: enough for
    every call of a usual batch to run at once, while a runaway batch of
    hundreds of calls cannot start as many threads). ``constraints`` (a
    ``PlanningConstraints`` or anything with ``max_agents``) can only lower it:
    the record is a hard limit at execution. ``concurrent_batch_timeout`` and
    ``sequential_call_timeout`` override the config (``None`` = no deadline);
    left at ``<from config>`` they are read from the config at each batch.
    ``language`` picks the notice text (``'en'`` or ``'de'``). With
    ``interrupt=True`` a timed-out tool also gets :class:`TimeoutError` raised
    in its thread (at its next bytecode boundary). ``limiter`` (a
    ``threading.BoundedSemaphore``, or a ``distributed.Semaphore`` shared by a
    fleet) is a second ceiling in front of the pool: a call takes a slot
    before it starts, within the deadline; while it waits for one its notice
    says "Waiting for a free slot" (no position: the queue is the fleet's).
    """

    def __init__(
        self,
        tool_workers: int | None = None,
        *,
        constraints: Any = None,
        config: Any = None,
        concurrent_batch_timeout: TimeoutSetting = FROM_CONFIG,
        sequential_call_timeout: TimeoutSetting = FROM_CONFIG,
        on_notice: Callable[[QueueNotice], object] | None = None,
        language: str = "en",
        interrupt: bool = False,
        limiter: Any = None,
    ) -> None:
        self._limiter = check_limiter(limiter)
        # A plain str: a subclass's own __hash__ or __eq__ never runs here.
        text = plain_str(language)
        if text is None:
            # Else the lookup below raised "unhashable type: 'list'", naming nothing.
            raise TypeError(f"language must be 'en' or 'de', got {describe(language)}")
        language = text
        if language not in _TEXTS:
            raise ValueError(f"language must be one of {sorted(_TEXTS)}, got {language!r}")
        if tool_workers is None:
            tool_workers = _config_value(
                taut_config.tool_workers, config, taut_config.TOOL_WORKERS_DEFAULT
            )
        ceiling = _check_workers(tool_workers, "tool_workers")
        if constraints is not None and not hasattr(constraints, "max_agents"):
            raise TypeError(
                "constraints must be a taut.PlanningConstraints (or anything with "
                f"max_agents) or None, got {describe(constraints)}"
            )
        _check_notice_callback(on_notice)
        if not isinstance(interrupt, bool):
            raise TypeError(f"interrupt must be a bool, got {describe(interrupt)}")
        max_agents = getattr(constraints, "max_agents", None) if constraints is not None else None
        if max_agents is not None:
            max_agents = _check_workers(max_agents, "constraints.max_agents")
        # Kept: set_tool_workers must not lift the ceiling above it either.
        self._max_agents: int | None = max_agents
        ceiling = self._within_max_agents(ceiling)
        self._ceiling = ceiling
        self._config = config
        self._batch_timeout: TimeoutSetting = (
            FROM_CONFIG
            if concurrent_batch_timeout is FROM_CONFIG
            else check_timeout(concurrent_batch_timeout, "concurrent_batch_timeout")
        )
        self._sequential_timeout: TimeoutSetting = (
            FROM_CONFIG
            if sequential_call_timeout is FROM_CONFIG
            else check_timeout(sequential_call_timeout, "sequential_call_timeout")
        )
        self._on_notice = on_notice
        self._language = language
        self._interrupt = interrupt
        self._executor = ThreadPoolExecutor(
            max_workers=ceiling or _NO_CEILING,
            thread_name_prefix="agent-tool-worker",
            idle_timeout=_IDLE_TIMEOUT,
            propagate_context=True,
        )
        self._scheduler = Scheduler(executor=self._executor, name="tool-runner")

    # -- settings --------------------------------------------------------

    @property
    def tool_workers(self) -> int:
        """The worker ceiling; 0 means none."""
        return self._ceiling

    def set_tool_workers(self, tool_workers: int) -> None:
        """Change the ceiling at run time (0 = none); waiting calls start as
        soon as the new ceiling allows. The ``max_agents`` of the runner's
        ``constraints`` still caps it, as in the constructor."""
        ceiling = self._within_max_agents(_check_workers(tool_workers, "tool_workers"))
        self._executor.resize(ceiling or _NO_CEILING)
        self._ceiling = ceiling

    def _within_max_agents(self, ceiling: int) -> int:
        """``ceiling`` (0 = none), lowered to the constraints' ``max_agents``:
        the record is a hard limit at execution."""
        max_agents = self._max_agents
        if max_agents and (ceiling == 0 or max_agents < ceiling):
            return max_agents
        return ceiling

    @property
    def executor(self) -> ThreadPoolExecutor:
        """The pool of tool workers (for statistics: ``executor.stats()``)."""
        return self._executor

    def batch_timeout(self) -> float | None:
        """The deadline of a parallel group, in seconds (``None`` = none)."""
        if not isinstance(self._batch_timeout, _FromConfig):
            return self._batch_timeout
        value = _config_value(
            taut_config.concurrent_batch_timeout, self._config, _DEFAULT_BATCH_TIMEOUT
        )
        return check_timeout(value)

    def sequential_timeout(self) -> float | None:
        """The deadline of a call that runs alone, in seconds (``None`` = none)."""
        if not isinstance(self._sequential_timeout, _FromConfig):
            return self._sequential_timeout
        # tools.sequential_call of the config, else the concurrent deadline
        # this runner applies (the constructor's when it was given one): a
        # concurrent_batch_timeout given to the constructor overrides only
        # tools.concurrent_batch, not a sequential_call the config sets.
        concurrent = self.batch_timeout()

        def sequential_call(config: Any) -> Any:
            return taut_config.resolve_timeout(
                taut_config.SEQUENTIAL_CALL_KEY, default=concurrent, config=config
            )

        return check_timeout(_config_value(sequential_call, self._config, concurrent))

    # -- running -------------------------------------------------------------

    def run(
        self,
        calls: Iterable[ToolCall],
        *,
        timeout: float | None = None,
        on_notice: Callable[[QueueNotice], object] | None = None,
    ) -> list[ToolResult]:
        """Run one batch and return its results in batch order.

        ``timeout`` bounds the whole batch, counted from this call (e.g. what
        remains of a planning budget; ``None`` = no extra bound). It never
        lengthens the configured deadlines: each group of the batch gets the
        earliest of its configured deadline, what is left of ``timeout`` and
        what is left of an enclosing deadline scope. ``on_notice`` replaces the
        runner's callback.
        """
        started = time.monotonic()
        if isinstance(calls, ToolCall) or not hasattr(calls, "__iter__"):
            raise TypeError(f"calls must be an iterable of taut.ToolCall, got {describe(calls)}")
        _check_notice_callback(on_notice)
        batch = list(calls)
        first_with_id: dict[str, int] = {}
        # Every call's arguments are checked (and copied: what was checked is
        # what runs) before any call runs: a bad later call must not cost the
        # results of earlier calls that have run, side effects and all.
        arguments: list[dict[str, Any]] = []
        for i, c in enumerate(batch):
            if not isinstance(c, ToolCall):
                raise TypeError(
                    f"calls[{i}] must be a taut.ToolCall, got {describe(c)}"
                )
            arguments.append(_checked_arguments(c.arguments, f"calls[{i}].arguments"))
            if c.call_id is not None:
                # The results carry the ids back: two alike could not be told apart.
                first = first_with_id.setdefault(c.call_id, i)
                if first != i:
                    raise ValueError(
                        f"calls[{i}].call_id must be unique in the batch, got {c.call_id!r}, "
                        f"the id of calls[{first}] too"
                    )
        run_limit = check_timeout(timeout)
        parallel_timeout, alone_timeout = self.batch_timeout(), self.sequential_timeout()
        notify = on_notice if on_notice is not None else self._on_notice
        # A pool shut down before the batch began refuses it (the first
        # submit says so); one shut down while it runs cancels the calls not
        # yet started, in this group and the groups after it (see _run_group).
        pool_was_open = not is_shut_down(self._executor)
        ids = _result_ids(batch)
        results: list[ToolResult | None] = [None] * len(batch)
        result: ToolResult | None = None  # bound for the del below
        for group in _groups(batch):
            configured = parallel_timeout if batch[group[0]].read_only else alone_timeout
            left = None if run_limit is None else run_limit - (time.monotonic() - started)
            limit = _earliest(configured, left, scope_remaining())
            group_ids = [ids[i] for i in group]
            for index, result in zip(
                group,
                self._run_group(batch, arguments, group, group_ids, limit, notify, pool_was_open),
            ):
                results[index] = result
        # Nested in a tool of this runner, a batch runs its tools inline, and
        # a failed tool's traceback keeps this frame (taut.gather.drive): it
        # must not hold the results, which hold the errors, once it returns.
        try:
            return [r for r in results if r is not None]
        finally:
            del results, result

    def _run_group(
        self,
        batch: Sequence[ToolCall],
        arguments: Sequence[dict[str, Any]],
        group: Sequence[int],
        ids: Sequence[str],
        timeout: float | None,
        notify: Callable[[QueueNotice], object] | None,
        pool_was_open: bool,
    ) -> list[ToolResult]:
        # The arguments are bound here, not passed to Scheduler.call: its own
        # keywords (call_id) would take them, and the tool would never see them.
        handles: list[Call[Any]] = [
            self._scheduler.call(_tool_body(batch[i].fn, arguments[i])) for i in group
        ]
        waited: set[int] = set()
        began: set[int] = set()
        lock = threading.Lock()

        def emit(kind: str, pos: int, position: int | None, text: str = "") -> None:
            if notify is None:
                return
            call = batch[group[pos]]
            if position:
                text = _TEXTS[self._language].format(position=position)
            try:
                notify(QueueNotice(kind, ids[pos], call.name, position, text))
            except Exception:
                _log.exception("on_notice failed for tool call %s", ids[pos])

        def submit(executor: Any, job: Submission) -> Any:
            pos = job.index

            def on_wait(position: int) -> None:
                with lock:
                    first = pos not in waited
                    waited.add(pos)
                emit("waiting" if first else "position", pos, position)

            def on_start() -> None:
                with lock:
                    began.add(pos)
                    had_notice = pos in waited
                if had_notice:
                    emit("started", pos, None)

            job.on_start(on_start)  # after the fence: a fenced call never "starts"
            return executor.submit_tracked(job.runnable(), on_wait=on_wait)

        def on_slot_wait(pos: int) -> None:
            with lock:
                first = pos not in waited
                waited.add(pos)
            if first:
                emit("waiting", pos, None, _SLOT_TEXTS[self._language])

        try:
            # Nobody listens: plain submissions, no queue positions tracked.
            listening = notify is not None
            outcomes = self._scheduler.gather(
                handles,
                timeout=timeout,
                interrupt=self._interrupt,
                submit=submit if listening else None,
                limiter=self._limiter,
                on_slot_wait=on_slot_wait if listening else None,
            )
        except RuntimeError:
            # Each group is a gather of its own, and a gather takes a pool shut
            # down before it began for its caller's mistake: it raises at its
            # first submit, before any call of the group has run. For the tool
            # batch the pool was shut down while the batch ran (another thread
            # closing the agent, a tool of an earlier group): its calls are
            # cancelled, as a gather cancels the calls its pool refuses, and
            # the results of the calls that ran still come back.
            if not (pool_was_open and is_shut_down(self._executor)) or any(
                h.outcome() is not None for h in handles
            ):
                raise
            outcomes = [Outcome(call_id, "cancelled") for call_id in ids]
        finally:
            # A call that waited and never began (the deadline came first, a
            # pool shut down meanwhile refused it, or the batch was cancelled
            # or interrupted: a tool raised KeyboardInterrupt or SystemExit):
            # clear its notice, or "Waiting for a free worker" stays up for good.
            with lock:
                never_began = sorted(waited - began)
            for pos in never_began:
                emit("dropped", pos, None)
        try:
            return [
                _to_result(ids[pos], batch[i].name, outcome, timeout)
                for pos, (i, outcome) in enumerate(zip(group, outcomes))
            ]
        finally:
            del handles, outcomes  # (inline tools: see run)

    # -- lifecycle -----------------------------------------------------------

    def shutdown(self, wait: bool = True) -> None:
        """Stop the pool (abandoned tools are not waited for)."""
        self._executor.shutdown(wait=wait)

    def __enter__(self) -> ToolRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        ceiling = self._ceiling or "no ceiling"
        return f"<taut.ToolRunner tool_workers={ceiling}>"


def _checked_arguments(arguments: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A copy of one call's arguments, refused (naming the argument and its
    value) if they cannot be passed as ``fn(**arguments)`` or hold a taut
    handle, which a gather refuses."""
    try:
        copied = dict(arguments)
    except Exception as exc:  # the mapping's own code raised
        raise TypeError(f"{where} must be a readable mapping, got {describe(arguments)}") from exc
    for key, value in copied.items():
        if not isinstance(key, str):
            raise TypeError(
                f"{where} keys must be str (the tool is called as fn(**arguments)), "
                f"got {describe(key)}"
            )
        if nested_argument((), {key: value}) is not None:
            raise GatherRejected(
                f"{where}[{key!r}] holds a taut handle, got {describe(value)}; "
                "gather or await the handle first and pass its value"
            )
    return copied


def _result_ids(batch: Sequence[ToolCall]) -> list[str]:
    """The id each result carries: the call's own, else ``call_N`` (its
    position), made unique against the ids the model gave (a model may well
    name a call ``call_1``): results must be told apart by their ids."""
    taken = {c.call_id for c in batch if c.call_id}
    ids: list[str] = []
    for i, c in enumerate(batch):
        if c.call_id:
            ids.append(c.call_id)
            continue
        cid, n = f"call_{i}", 1
        while cid in taken:
            cid, n = f"call_{i}_{n}", n + 1
        taken.add(cid)
        ids.append(cid)
    return ids


def _groups(batch: Sequence[ToolCall]) -> list[list[int]]:
    """Consecutive read-only calls form one parallel group; any other call is
    a group of its own."""
    groups: list[list[int]] = []
    for i, c in enumerate(batch):
        if c.read_only and groups and batch[groups[-1][0]].read_only:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _earliest(*timeouts: float | None) -> float | None:
    """The shortest of the timeouts that apply (``None`` = none), never negative."""
    limit = earliest(*timeouts)
    return None if limit is None else max(0.0, limit)


def _seconds_text(seconds: float) -> str:
    """A timeout as the model reads it: ``420.0s``, ``5.0s``; below one second
    two significant digits (``0.25s``), so a short deadline is not shown as 0."""
    if seconds >= 1:
        return f"{seconds:.1f}s"
    return f"{float(f'{seconds:.2g}')}s"


def _value_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


@dataclass(frozen=True)
class _Shown:
    """A tool's value and its text, made on the worker as the last step of
    the call: a slow ``str()`` (a lazy frame, a proxy that fetches) then
    counts against the call's deadline instead of holding up the caller
    after the batch. ``error``: what ``str()`` raised (``text`` is then '')."""

    value: Any
    text: str = ""
    error: BaseException | None = None


def _shown(value: Any) -> _Shown:
    if isinstance(value, (types.GeneratorType, types.AsyncGeneratorType)):
        return _Shown(value)  # refused by _to_result; its text says nothing
    try:
        return _Shown(value, _value_text(value))
    except (Exception, SystemExit) as exc:  # a hostile __str__ must not end the batch
        return _Shown(value, error=exc)


def _tool_body(fn: Callable[..., Any], arguments: dict[str, Any]) -> Callable[[], Any]:
    """What the worker runs for one tool call: the tool, then its text."""
    call = functools.partial(fn, **arguments)
    # As the gather decides (a handle's _is_coroutine): such a tool is awaited
    # on a loop of its own on the worker, so its wrapper must be async too.
    if is_coroutine_function(fn):

        async def run_async() -> _Shown:
            # An async tool that returns a coroutine instead of awaiting it
            # (return fetch(url)): nothing would await that one either.
            return _shown(not_a_coroutine(await call(), fn))

        return run_async

    def run() -> _Shown:
        return _shown(not_a_coroutine(call(), fn))

    return run


def _to_result(call_id: str, name: str, o: Outcome, timeout: float | None) -> ToolResult:
    prefix = f"Error executing tool '{name}': "
    if o.status == "ok":
        shown: _Shown = o.value
        value = shown.value
        if isinstance(value, (types.GeneratorType, types.AsyncGeneratorType)):
            # A function that returns a generator (ToolCall refuses generator
            # functions themselves): its items were never made.
            refused = TypeError(
                f"tool {name!r} returned a generator ({type(value).__name__}) instead of "
                "its result: collect the items in the tool (return list(...)) or return "
                "the text"
            )
            text = f"{prefix}it returned a generator instead of its result"
            return ToolResult(call_id, name, "error", text, value, refused, True, o.elapsed_s)
        if shown.error is not None:
            # One tool's unprintable value must not lose the whole batch's
            # results (the other tools have run): this result alone says so.
            text = (
                f"{prefix}its result ({type(value).__name__}) cannot be shown as "
                f"text: str() raised {type(shown.error).__name__}"
            )
            return ToolResult(call_id, name, "error", text, value, shown.error, True, o.elapsed_s)
        return ToolResult(call_id, name, "ok", shown.text, value, None, True, o.elapsed_s)
    if o.status in ("timeout", "not_started"):
        after = f"timed out after {_seconds_text(timeout)}" if timeout is not None else "timed out"
        if not o.started:
            after += (
                " (no free worker before the batch deadline)"
                if timeout
                else " (the deadline had passed before it could start)"
            )
        return ToolResult(
            call_id, name, "timeout", prefix + after, None, o.error, o.started, o.elapsed_s
        )
    if o.status == "cancelled":
        return ToolResult(call_id, name, "error", prefix + "cancelled", None, o.error, o.started)
    err = o.error
    try:
        message = str(err) or type(err).__name__
    # An exception whose __str__ raises: its type still says something. A
    # SystemExit from there (as in describe()) must not end the caller after
    # every tool has run.
    except (Exception, SystemExit):
        message = type(err).__name__
    return ToolResult(call_id, name, "error", prefix + message, None, err, o.started, o.elapsed_s)
