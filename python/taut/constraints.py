"""Planning constraints: one record that is guidance for a planner and a hard limit
for the executor, and the live budget it turns into once work starts.

:class:`PlanningConstraints` carries a time budget, a resource limit (how many
agents or tool workers at once), soft ``weights`` (preferences a planner may trade
off) and hard ``cost_budgets``. The same record

* is *information* for planning: :meth:`PlanningConstraints.guidance` renders the
  sentence for an LLM prompt ("You have 30 minutes and 3 available agents.");
* is a *hard limit* at execution: :meth:`PlanningConstraints.cap` keeps the first
  ``max_agents`` of a routing decision, and :meth:`PlanningConstraints.start`
  returns a live :class:`Budget` that works as a deadline scope.

A started budget is live state: it shrinks while work runs (not while it is
paused, e.g. waiting for a human), hands out sub-budgets that never outlast it,
and :meth:`Budget.constraints` gives the re-planning input: a new
``PlanningConstraints`` holding only what remains.
"""

from __future__ import annotations

import contextvars
import itertools
import math
import numbers
import os
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, TypeVar, Union

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    field_serializer,
    field_validator,
    model_validator,
)

from taut._checks import (
    MAX_TIMEOUT,
    check_duration,
    check_optional_count,
    describe,
    earliest,
    is_bool,
)
from taut._guidance import planning_sentence
from taut._iso_duration import ISO_DURATION, iso_duration_problem
from taut.config.files import (
    ConfigFileRefused,
    _config_float,
    _json_loads,
    _read_text,
    _yaml_document,
)
from taut.config.models import _one_spelling_each
from taut.deadline import DeadlineScope, _clock, fail_after, move_on_after

__all__ = ["Budget", "PlanningConstraints", "iso_duration"]

T = TypeVar("T")

# Budgets are clamped like every other taut timeout (taut._checks): up to
# MAX_TIMEOUT (136 years) exactly, beyond it to MAX_TIMEOUT, which timedelta holds.
_MAX_BUDGET_S = MAX_TIMEOUT

# The Unicode categories a name of a weight or cost budget must not hold:
# control characters (a newline, an escape) and the line and paragraph
# separators U+2028 and U+2029, which are no control characters but break a
# line all the same (str.splitlines() splits at every character of these).
_LINE_BREAKING = frozenset({"Cc", "Zl", "Zp"})


def _seconds_to_timedelta(seconds: float) -> timedelta:
    return timedelta(seconds=min(seconds, _MAX_BUDGET_S))


_BUDGET_RULE = "time_budget must be seconds, an ISO-8601 duration (PT30M, P1DT2H) or None"


def _coerce_budget(value: object) -> object:
    """Numbers are seconds; text is seconds or an ISO-8601 duration (``PT30M``)."""
    if value is None or isinstance(value, timedelta):
        if isinstance(value, timedelta) and value < timedelta(0):
            raise ValueError(f"time_budget must not be negative, got {value!r}")
        return value
    if isinstance(value, bool):
        raise ValueError(f"{_BUDGET_RULE}, got {describe(value, limit=60)}")
    if not isinstance(value, str):
        # Numbers of any kind through the one gate (inf = no budget, as
        # everywhere in taut); pydantic reports only ValueErrors as invalid input.
        try:
            seconds = check_duration(value, "time_budget")
        except TypeError as exc:
            raise ValueError(f"{_BUDGET_RULE}, got {describe(value, limit=60)}") from exc
        return None if seconds is None else timedelta(seconds=seconds)
    if isinstance(value, str):
        text = value.strip()
        try:
            # As in a config file: "1e400" is a huge budget (clamped, as 10**400
            # is), not the infinity that means none; only "inf" means none.
            number = _config_float(text)
        except ValueError:
            pass
        else:
            return _coerce_budget(number)
        if not ISO_DURATION.match(text):
            # pydantic's parser reads more than the documented forms: "1 day",
            # "3d" and "01:30", which it takes for an hour and a half (a
            # minute and a half?). A config timeout refuses such text too.
            raise ValueError(f"{_BUDGET_RULE}, got {describe(value, limit=60)}")
        problem = iso_duration_problem(text)
        if problem is not None:
            raise ValueError(f"time_budget {value!r}: {problem}")
        if text.startswith("-"):
            raise ValueError(f"time_budget must not be negative, got {value!r}")
        return text


def iso_duration(value: timedelta) -> str:
    """ISO-8601 duration in days, hours, minutes and seconds (never years or
    months, which have no fixed length): ``PT30M``, ``P1DT2H``, ``PT0.5S``."""
    if value < timedelta(0):
        raise ValueError(f"duration must not be negative, got {value!r}")
    days = value.days
    hours, rest = divmod(value.seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    out = f"P{days}D" if days else "P"
    clock = ""
    if hours:
        clock += f"{hours}H"
    if minutes:
        clock += f"{minutes}M"
    if seconds or value.microseconds:
        frac = f".{value.microseconds:06d}".rstrip("0") if value.microseconds else ""
        clock += f"{seconds}{frac}S"
    if clock:
        out += "T" + clock
    return out if out != "P" else "PT0S"


class PlanningConstraints(BaseModel):
    """Time budget and resource limit of a plan; information for planning, limits
    for execution.

    Loads from YAML/JSON with camelCase names (``timeBudget``, ``resourceLimit``
    or ``maxAgents``, ``costBudgets``) or by field name.
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        populate_by_name=True,
        ser_json_timedelta="iso8601",
    )

    time_budget: Union[timedelta, None] = Field(  # noqa: UP007 - pydantic evaluates it on 3.9
        None,
        validation_alias=AliasChoices("time_budget", "timeBudget"),
        serialization_alias="timeBudget",
        description=(
            "Wall-clock budget: seconds or an ISO-8601 duration such as PT30M or P1DT2H. "
            "None = no time limit."
        ),
    )
    max_agents: Union[int, None] = Field(  # noqa: UP007 - pydantic evaluates it on 3.9
        None,
        ge=1,
        strict=True,
        validation_alias=AliasChoices("max_agents", "maxAgents", "resourceLimit", "resource_limit"),
        serialization_alias="resourceLimit",
        description="How many agents / tool workers may run at once. None = no limit.",
    )
    weights: dict[str, float] = Field(
        default_factory=dict,
        description="Soft preferences a planner may trade off (e.g. {'speed': 0.7}); not enforced.",
    )
    cost_budgets: dict[str, float] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("cost_budgets", "costBudgets"),
        serialization_alias="costBudgets",
        description="Hard limits per resource (e.g. {'usd': 2.5, 'tokens': 100000}).",
    )

    if TYPE_CHECKING:
        # For type checkers only: what the validators accept (pydantic's
        # generated signature would demand a timedelta and every field).
        def __init__(
            self,
            *,
            time_budget: timedelta | float | str | None = None,
            max_agents: int | None = None,
            weights: Mapping[str, float] = ...,
            cost_budgets: Mapping[str, float] = ...,
            timeBudget: timedelta | float | str | None = None,  # the YAML/JSON aliases work too
            maxAgents: int | None = None,
            resourceLimit: int | None = None,
            resource_limit: int | None = None,
            costBudgets: Mapping[str, float] = ...,
        ) -> None: ...

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: object) -> object:
        _one_spelling_each(cls, data)
        return data

    @field_validator("time_budget", mode="before")
    @classmethod
    def _budget_before(cls, value: object) -> object:
        return _coerce_budget(value)

    @field_validator("time_budget")
    @classmethod
    def _budget_after(cls, value: timedelta | None) -> timedelta | None:
        if value is None:
            return None
        if value < timedelta(0):
            raise ValueError(f"time_budget must not be negative, got {value!r}")
        # A timedelta or an ISO text is clamped like a number (_coerce_budget),
        # so a budget means the same however it was written.
        return min(value, _seconds_to_timedelta(_MAX_BUDGET_S))

    @field_serializer("time_budget", when_used="json")
    def _budget_iso(self, value: Optional[timedelta]) -> Optional[str]:  # noqa: UP045 - evaluated by pydantic on 3.9
        return None if value is None else iso_duration(value)

    @field_validator("max_agents", mode="before")
    @classmethod
    def _agents_before(cls, value: object) -> object:
        # The one gate for sizes; pydantic reports only ValueErrors as invalid input.
        try:
            return check_optional_count(value, "max_agents", minimum=1)
        except TypeError as exc:
            raise ValueError(str(exc)) from exc

    @field_validator("weights", "cost_budgets")
    @classmethod
    def _finite(cls, value: dict[str, float], info: Any) -> dict[str, float]:
        for name, number in value.items():
            if not math.isfinite(number):
                raise ValueError(f"{info.field_name}[{name!r}] must be finite, got {number!r}")
            if info.field_name == "cost_budgets" and number < 0:
                raise ValueError(f"cost_budgets[{name!r}] must not be negative, got {number!r}")
        return value

    @field_validator("weights", "cost_budgets", mode="before")
    @classmethod
    def _no_bools(cls, value: object, info: Any) -> object:
        if isinstance(value, Mapping):
            for name, number in value.items():
                if isinstance(name, str) and any(
                    unicodedata.category(c) in _LINE_BREAKING for c in name
                ):
                    # The names go into the planning sentence given to a
                    # model: a newline there would write a line of its own.
                    raise ValueError(
                        f"{info.field_name} names must not contain a control character "
                        "or a line break (a newline, U+2028, say): they go into the "
                        f"planning sentence as they are, got {describe(name, limit=60)}"
                    )
                # NumPy's bool too (np.True_ is no bool): pydantic took it for 1.0.
                if is_bool(number):
                    raise ValueError(
                        f"{info.field_name}[{name!r}] must be a number, "
                        f"got {describe(number, limit=60)}"
                    )
        return value

    # ------------------------------------------------------------------ loading
    # Constraints are untrusted input like a config file, read by the same code
    # (taut.config.files): only a regular file of at most 1 MiB (a FIFO or a
    # device is refused without blocking), no YAML aliases, no deep nesting.
    # What is refused raises ConfigFileRefused (a ValueError) naming the reason.
    @classmethod
    def from_json(cls, text: str | bytes) -> PlanningConstraints:
        """Parse a JSON object (camelCase or field names)."""
        # Numbers read as in a JSON config file: 1e400 is the largest float,
        # as in YAML, not an infinity (no time budget at all).
        return cls.model_validate(_json_loads(text, parse_float=_config_float))

    @classmethod
    def from_yaml(cls, text: str) -> PlanningConstraints:
        """Parse a YAML mapping (safe loader; camelCase or field names). YAML
        aliases (``*name``) and nesting deeper than 100 levels are refused with
        ``taut.config.files.ConfigFileRefused`` (a ``ValueError``)."""
        return cls._from_yaml_text(
            text, "<planning constraints>", "PlanningConstraints.from_yaml(text)"
        )

    @classmethod
    def _from_yaml_text(cls, text: str | bytes, name: str, what: str) -> PlanningConstraints:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        try:
            data = _yaml_document(name, text)[1]
        except ConfigFileRefused as exc:
            raise ConfigFileRefused(f"{what} refused: {exc}") from None
        return cls.model_validate(data or {})

    @classmethod
    def load(cls, path: str | Path) -> PlanningConstraints:
        """Read a ``.json``, ``.yaml`` or ``.yml`` file: a regular file of at most
        1 MiB (a FIFO, device or directory is refused without blocking), no YAML
        aliases. Refusals raise ``taut.config.files.ConfigFileRefused`` (a
        ``ValueError``) naming the file and the reason."""
        name = os.fspath(path)
        try:
            text = _read_text(name)
        except ConfigFileRefused as exc:
            raise ConfigFileRefused(f"planning constraints file {name!r} refused: {exc}") from None
        if Path(name).suffix.lower() == ".json":
            return cls.from_json(text)
        return cls._from_yaml_text(text, name, f"planning constraints file {name!r}")

    def to_json(self) -> str:
        """JSON with camelCase names and the budget as an ISO-8601 duration."""
        return self.model_dump_json(by_alias=True, exclude_defaults=True)

    # ------------------------------------------------------------------ planning
    @property
    def time_budget_s(self) -> float | None:
        """The time budget in seconds, or None."""
        return None if self.time_budget is None else self.time_budget.total_seconds()

    def guidance(self, lang: str = "en") -> str:
        """The planning sentence for a prompt, e.g. "You have 30 minutes and 3
        available agents." (``lang="de"``: "Du hast 30 Minuten und 3 verfügbare
        Agenten."). Cost budgets and weights add one sentence each."""
        return planning_sentence(
            lang, self.time_budget_s, self.max_agents, self.cost_budgets, self.weights
        )

    def cap(self, agents: Sequence[T]) -> list[T]:
        """The first ``max_agents`` of ``agents`` (all of them without a limit)."""
        # Text is iterable too, but one agent's name is not a routing decision:
        # cap("researcher") would keep "r" and "e".
        if isinstance(agents, (str, bytes, bytearray)) or not hasattr(agents, "__iter__"):
            raise TypeError(
                "agents must be a sequence of agents (a list or tuple of names, say), "
                f"got {describe(agents, limit=60)}"
            )
        # Read no further than what is kept: the decisions may come from an
        # endless (or costly) iterator.
        return list(itertools.islice(agents, self.max_agents))

    def start(self, clock: Callable[[], float] = time.monotonic) -> Budget:
        """Start the clock: a live :class:`Budget` measured with ``clock``."""
        return Budget(self, clock=clock)


class Budget:
    """A started :class:`PlanningConstraints`: live, shrinking state.

    ``remaining()`` / ``elapsed()`` are measured with the injected ``clock``; time
    between :meth:`pause` and :meth:`resume` (or inside ``with budget.paused():``)
    is not charged. ``with budget:`` / ``async with budget:`` is a taut deadline
    scope (``taut.fail_after``) of what remains at entry: ``taut.remaining()``
    inside reports it, nested scopes and worker threads (through context
    propagation) see it, an ``async with`` block is cancelled when it runs out and
    either form raises :class:`taut.DeadlineExpired` on exit once it has run out.
    :meth:`scope` gives ``move_on`` and ``interrupt=True`` variants. The scope's
    deadline is fixed at entry, so pause outside a scope, not inside one. The
    budget's own state is thread-safe.
    """

    def __init__(
        self,
        constraints: PlanningConstraints,
        *,
        clock: Callable[[], float] = time.monotonic,
        parent: Budget | None = None,
    ) -> None:
        if not isinstance(constraints, PlanningConstraints):
            # Budget(30) reads naturally, and failed deep inside with an
            # AttributeError on `time_budget_s`.
            raise TypeError(
                "constraints must be a PlanningConstraints (a budget of 30 s: "
                f"PlanningConstraints(time_budget=30).start()), got {describe(constraints)}"
            )
        if not callable(clock):
            raise TypeError(
                f"clock must be a callable returning seconds, got {describe(clock)}"
            )
        if parent is not None and not isinstance(parent, Budget):
            # Else an AttributeError at the first charge() or remaining().
            raise TypeError(f"parent must be a Budget or None, got {describe(parent)}")
        self._initial = constraints
        self._clock = clock
        self._parent = parent
        self._lock = threading.Lock()
        self._total = constraints.time_budget_s
        self._paused_total = 0.0
        self._paused_since: float | None = None
        self._pause_depth = 0
        self._spent: dict[str, float] = {}
        self._label = "time budget"
        self._started = self._now()

    def _now(self) -> float:
        """The clock's reading; NaN (which would compare as never expiring),
        an infinity or no number at all is refused, naming the clock."""
        return _clock.read(self._clock, "the budget's clock")

    def __repr__(self) -> str:
        remaining = self.remaining()
        shown = "unbounded" if remaining is None else f"{remaining:.3f}s left"
        paused = ", paused" if self.is_paused else ""
        return f"<Budget {shown}, max_agents={self._initial.max_agents}{paused}>"

    # ------------------------------------------------------------------ time
    @property
    def initial(self) -> PlanningConstraints:
        """The constraints this budget was started with."""
        return self._initial

    @property
    def total(self) -> float | None:
        """The full time budget in seconds (None = unbounded)."""
        return self._total

    @property
    def max_agents(self) -> int | None:
        return self._initial.max_agents

    def _elapsed_locked(self, now: float) -> float:
        paused = self._paused_total
        if self._paused_since is not None:
            paused += now - self._paused_since
        return max(0.0, now - self._started - paused)

    def elapsed(self) -> float:
        """Seconds charged so far (paused time excluded)."""
        now = self._now()
        with self._lock:
            return self._elapsed_locked(now)

    def remaining(self) -> float | None:
        """Seconds left (never negative), or None for an unbounded budget;
        never more than the parent budget has left."""
        own = None if self._total is None else max(0.0, self._total - self.elapsed())
        # A child paused while its parent runs is not charged, but it must not
        # outlast the parent (see child()).
        return earliest(own, None if self._parent is None else self._parent.remaining())

    @property
    def expired(self) -> bool:
        """True once the time budget is used up (never for an unbounded budget)."""
        remaining = self.remaining()
        return remaining is not None and remaining <= 0.0

    # ------------------------------------------------------------------ pausing
    @property
    def is_paused(self) -> bool:
        return self._pause_depth > 0

    def pause(self) -> None:
        """Stop charging time (e.g. while waiting for a human). Nests: time is
        charged again after the matching number of :meth:`resume` calls."""
        now = self._now()
        with self._lock:
            if self._pause_depth == 0:
                self._paused_since = now
            self._pause_depth += 1

    def resume(self) -> None:
        """Charge time again after :meth:`pause`."""
        now = self._now()
        with self._lock:
            if self._pause_depth == 0:
                raise RuntimeError("Budget.resume() called without a matching pause()")
            self._pause_depth -= 1
            if self._pause_depth == 0 and self._paused_since is not None:
                self._paused_total += max(0.0, now - self._paused_since)
                self._paused_since = None

    @contextmanager
    def paused(self) -> Iterator[Budget]:
        """``with budget.paused():`` the time inside is not charged."""
        self.pause()
        try:
            yield self
        finally:
            self.resume()

    # ------------------------------------------------------------------ costs
    def charge(self, name: str, amount: float) -> float | None:
        """Record ``amount`` spent of cost budget ``name`` (here and in every parent
        budget); returns what remains of it (None if ``name`` has no budget)."""
        if not isinstance(name, str):
            # Cost budgets are named by text: charge(5, 1) would spend nothing.
            raise TypeError(f"name must be a str (a cost budget's name), got {describe(name)}")
        # Any real number: token counts and prices often come as NumPy
        # scalars (np.int64, np.float32) or Decimals. A NumPy bool is no
        # numbers.Real, so it is refused like a bool.
        if isinstance(amount, bool) or not isinstance(amount, (numbers.Real, Decimal)):
            raise TypeError(f"amount must be a number, got {describe(amount, limit=60)}")
        try:
            spent = float(amount)
        except OverflowError:  # an int or Fraction beyond float's range (10**400)
            spent = math.inf
        except ValueError:  # a signalling NaN Decimal
            spent = math.nan
        except Exception as exc:  # the number's own __float__ raised
            raise TypeError(f"amount must be a number, got {describe(amount, limit=60)}") from exc
        if not math.isfinite(spent) or spent < 0:
            raise ValueError(
                f"amount must be a finite number >= 0, got {describe(amount, limit=60)}"
            )
        with self._lock:
            self._spent[name] = self._spent.get(name, 0.0) + spent
        if self._parent is not None:
            self._parent.charge(name, spent)
        return self.cost_remaining(name)

    def cost_remaining(self, name: str) -> float | None:
        """What remains of cost budget ``name`` (never negative), None if
        unlimited; never more than the parent budget has left of it."""
        limit = self._initial.cost_budgets.get(name)
        if limit is None:
            return None
        with self._lock:
            own = max(0.0, limit - self._spent.get(name, 0.0))
        # A child starts with what its parent had left then; what a sibling
        # spent since is gone for it too.
        return earliest(own, None if self._parent is None else self._parent.cost_remaining(name))

    @property
    def exhausted(self) -> bool:
        """True when the time or any hard cost budget is used up."""
        return self.expired or any(
            self.cost_remaining(name) == 0.0 for name in self._initial.cost_budgets
        )

    # ------------------------------------------------------------------ re-planning
    def child(
        self, seconds: float | timedelta | None = None, *, max_agents: int | None = None
    ) -> Budget:
        """A sub-budget started now: ``seconds`` (or all that remains), never longer
        than what remains here; ``max_agents`` never above this budget's limit.
        Costs charged to the child are charged here too."""
        wanted = check_duration(seconds, "seconds")
        asked = check_optional_count(max_agents, "max_agents", minimum=1)
        remaining = self.remaining()
        if remaining is None:
            total = wanted
        else:
            total = remaining if wanted is None else min(wanted, remaining)
        limit = self._initial.max_agents
        if asked is not None:
            limit = asked if limit is None else min(limit, asked)
        sub = self.constraints().model_copy(
            update={
                "time_budget": None if total is None else _seconds_to_timedelta(total),
                "max_agents": limit,
            }
        )
        return Budget(sub, clock=self._clock, parent=self)

    def constraints(self) -> PlanningConstraints:
        """A :class:`PlanningConstraints` with only what remains: the re-planning input."""
        remaining = self.remaining()
        costs = {name: self.cost_remaining(name) or 0.0 for name in self._initial.cost_budgets}
        return self._initial.model_copy(
            update={
                "time_budget": None if remaining is None else _seconds_to_timedelta(remaining),
                "cost_budgets": costs,
            }
        )

    def guidance(self, lang: str = "en") -> str:
        """The planning sentence for what remains."""
        return self.constraints().guidance(lang)

    def cap(self, agents: Sequence[T]) -> list[T]:
        return self._initial.cap(agents)

    # ------------------------------------------------------------------ deadline scope
    def deadline(self) -> float | None:
        """The absolute ``time.monotonic()`` time at which the budget runs out if
        nothing is paused from now on (None for an unbounded budget)."""
        remaining = self.remaining()
        if remaining is None:
            return None
        return time.monotonic() + remaining

    def scope(self, *, raise_on_expiry: bool = True, interrupt: bool = False) -> DeadlineScope:
        """A fresh deadline scope bounded by what remains now (unbounded for an
        unbounded budget): ``taut.fail_after`` (raises ``taut.DeadlineExpired``)
        or, with ``raise_on_expiry=False``, ``taut.move_on_after``. The scope is
        fixed at entry: pausing the budget inside it does not move its deadline."""
        # Relative seconds, not an absolute time: the budget's clock may be an
        # injected one, and the scope counts from its own entry on its own clock.
        factory = fail_after if raise_on_expiry else move_on_after
        return factory(self.remaining(), self._label, interrupt=interrupt)

    def __enter__(self) -> Budget:
        scope = self.scope()
        scope.__enter__()
        _entered.set((*_entered.get(), (self, scope)))
        return self

    def _pop_scope(self) -> DeadlineScope:
        stack = _entered.get()
        # This budget's innermost entry (other budgets' scopes may have been
        # entered after it: exiting out of order is for the scope to refuse).
        for i in range(len(stack) - 1, -1, -1):
            budget, scope = stack[i]
            if budget is self:
                _entered.set(stack[:i] + stack[i + 1 :])
                return scope
        # The scope stack lives in the context: an exit on another thread
        # or task than the entry, or without one, finds nothing there.
        raise RuntimeError(
            "Budget exited without a matching 'with budget:' entered in this thread or task"
        )

    def __exit__(self, *exc_info: Any) -> bool | None:
        return self._pop_scope().__exit__(*exc_info)

    async def __aenter__(self) -> Budget:
        scope = self.scope()
        await scope.__aenter__()
        _entered.set((*_entered.get(), (self, scope)))
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._pop_scope().__aexit__(*exc_info)


# The scopes of the budgets entered with `with budget:`, innermost last, in
# the context of the thread or task that entered them. One variable for every
# budget: a context never forgets a variable once set, and one made per budget
# stayed in the context of every thread that entered a budget, so a worker
# thread starting a budget per request grew by one for good each time.
_entered: contextvars.ContextVar[tuple[tuple[Budget, DeadlineScope], ...]] = contextvars.ContextVar(
    "taut_budget_scopes", default=()
)
