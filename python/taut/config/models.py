"""The configuration document (:class:`TautConfig`, :class:`CapacityConfig`)
and the checks every configured timeout number goes through."""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Iterable, Iterator, Mapping
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    field_validator,
    model_validator,
)

from taut import _lazy_import
from taut._checks import describe, shown
from taut._core import MAX_TIMEOUT, clamp_timeout
from taut._iso_duration import (
    AMBIGUOUS_REASON,
    ISO_DURATION,
    ISO_PARTS,
    iso_duration_problem,
)

__all__ = [
    "CONCURRENT_BATCH_KEY",
    "SECTIONS",
    "SEQUENTIAL_CALL_KEY",
    "TAUT_TIMEOUT_KEYS",
    "TOOL_WORKERS_DEFAULT",
    "CapacityConfig",
    "ConfigWarning",
    "TautConfig",
    "nearest_key",
    "unknown_timeout_keys",
]

CONCURRENT_BATCH_KEY = "tools.concurrent_batch"
SEQUENTIAL_CALL_KEY = "tools.sequential_call"
TAUT_TIMEOUT_KEYS = (CONCURRENT_BATCH_KEY, SEQUENTIAL_CALL_KEY)
"""The timeout keys taut itself reads; an application may resolve keys of its own."""
SECTIONS = ("timeouts", "capacity")
"""The top-level keys taut reads; others belong to the application around it."""


class ConfigWarning(UserWarning):
    """A configured value (config file, mapping or environment variable) was ignored.

    The message names the key, the offending value and where it came from; the
    value of the next source (environment variable, then default) is used instead.
    """


# --------------------------------------------------------------------------- values
_RULE = "expected a non-negative number of seconds (0 disables)"
_TEXT_RULE = f"{_RULE} or an ISO-8601 duration such as PT5M"

_ISO_FACTORS = {"W": 604800, "D": 86400, "H": 3600, "M": 60, "S": 1}


@functools.lru_cache(maxsize=1)
def _timedelta_parser() -> Any:
    # Counted: pydantic imports TypeAdapter's module on first access (fork-safe,
    # see taut._lazy_import).
    return _lazy_import.load_from("pydantic", "TypeAdapter")(timedelta)


def _iso_seconds(text: str) -> tuple[bool, float | None, str]:
    """``(ok, seconds, reason)`` of an ISO-8601 duration such as ``PT5M``, read
    by the same parser as ``PlanningConstraints.time_budget``."""
    stripped = text.strip()
    problem = iso_duration_problem(stripped)
    if problem == AMBIGUOUS_REASON:
        return False, None, f"{_TEXT_RULE}; {problem}"
    if problem is not None:
        return False, None, f"{_TEXT_RULE}, got text that is {problem}"
    try:
        value: timedelta = _timedelta_parser().validate_python(stripped)
    except Exception:
        # The shape is right, so what the parser refuses is a number too large.
        return (
            False,
            None,
            f"{_TEXT_RULE}, got a duration beyond 999,999,999 days "
            "(a number of seconds that large is clamped instead)",
        )
    if value == timedelta(0):
        # The parser rounds to whole microseconds: PT0.0000001S would become
        # the 0 that disables a timeout. Read such a duration exactly instead.
        exact = _iso_exact_seconds(stripped)
        if exact is not None and exact != 0:
            if stripped.startswith("-"):
                return False, None, f"{_TEXT_RULE}, got a negative duration"
            return True, max(float(exact), math.ulp(0.0)), ""
    if value < timedelta(0):
        return False, None, f"{_TEXT_RULE}, got a negative duration"
    return True, value.total_seconds(), ""


def _iso_exact_seconds(text: str) -> Decimal | None:
    """The exact (unsigned) seconds of a duration of :data:`taut._iso_duration.ISO_PARTS`' shape."""
    match = ISO_PARTS.match(text)
    if match is None:
        return None
    total = Decimal(0)
    for unit, factor in _ISO_FACTORS.items():
        part = match.group(unit)
        if part is not None:
            total += Decimal(part.replace(",", ".")) * factor
    return total


def _check_number(value: object) -> tuple[bool, float | int | None, str]:
    """Validate one configured timeout number: ``(ok, number, reason)``.

    ``number`` is the original int/float (not yet clamped), or the seconds of an
    ISO-8601 duration text (``PT5M`` is 300.0); ``0`` is a valid number.
    """
    try:
        if isinstance(value, bool):
            return False, None, f"{_RULE}, got a bool"
        if isinstance(value, int):
            if value < 0:
                return False, None, f"{_RULE}, got a negative number"
            return True, value, ""
        if isinstance(value, float):
            if math.isnan(value):
                return False, None, f"{_RULE}, got NaN"
            if value < 0:
                return False, None, f"{_RULE}, got a negative number"
            return True, value, ""
        if isinstance(value, str):
            if ISO_DURATION.match(value.strip()):
                return _iso_seconds(value)
            return False, None, f"{_TEXT_RULE}, got text"
        if isinstance(value, Mapping):
            return False, None, f"{_RULE}, got a mapping"
        if isinstance(value, (list, tuple, set, frozenset)):
            return False, None, f"{_RULE}, got a list"
        return False, None, f"{_RULE}, got {type(value).__name__}"
    except Exception as exc:  # hostile objects (custom __lt__ etc.) are just invalid
        return False, None, f"{_RULE}, got a value that failed to compare ({exc!r})"


def _finish(number: float | int) -> float | None:
    """Map a validated configured number to the resolved timeout (0 disables)."""
    if number == 0:
        return None
    result: float | None = clamp_timeout(number)
    return result


def _parse_env(text: str) -> tuple[bool, float | int | None, str]:
    """An environment value: a number of seconds, or an ISO-8601 duration
    (``PT5M``) as in config files."""
    stripped = text.strip()
    if ISO_DURATION.match(stripped):
        return _iso_seconds(stripped)
    try:
        number: float | int = int(stripped)
    except ValueError:
        try:
            # Decimal, not float: "1e400" is a huge finite number (clamped), while
            # float() would turn it into inf (no timeout at all).
            exact = Decimal(stripped)
        except (InvalidOperation, ValueError):
            return False, None, f"{_TEXT_RULE}, got text"
        if exact.is_nan():
            return False, None, f"{_RULE}, got NaN"
        if exact.is_finite() and exact >= MAX_TIMEOUT:
            number = int(exact)
        else:
            number = float(exact)
            if number == 0 and exact > 0:
                # "1e-400" is a tiny positive timeout (already expired), not
                # the 0 that disables one.
                number = math.ulp(0.0)
    return _check_number(number)


# --------------------------------------------------------------------------- keys
def nearest_key(name: str, known: Iterable[str]) -> str | None:
    """The known key that ``name`` is most likely a misspelling of, or ``None``
    (difflib ratio of at least 0.75: ``concurent_batch`` finds
    ``concurrent_batch``, an unrelated key of the application finds nothing)."""
    matches = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
    return matches[0] if matches else None


def _timeout_leaves(tree: Mapping[Any, Any], prefix: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    for name, value in tree.items():
        if not isinstance(name, str):
            continue
        if isinstance(value, Mapping):
            yield from _timeout_leaves(value, (*prefix, name))
        else:
            yield (*prefix, name)


def unknown_timeout_keys(
    tree: Mapping[Any, Any],
) -> Iterator[tuple[tuple[str, ...], str | None]]:
    """``(key path, nearest known key or None)`` of each key of a ``timeouts:``
    tree that taut itself does not read."""
    for path in _timeout_leaves(tree, ()):
        dotted = ".".join(path)
        if dotted not in TAUT_TIMEOUT_KEYS:
            yield path, nearest_key(dotted, TAUT_TIMEOUT_KEYS)


# --------------------------------------------------------------------------- model
_TIMEOUT_TREE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": (
        "Timeouts in seconds or as ISO-8601 durations (PT5M), nested by dotted key: "
        "`tools.concurrent_batch` is `timeouts: {tools: {concurrent_batch: 300}}`. "
        "0 disables a timeout; "
        "null (or leaving the key out) means not set, so the environment variable "
        "or the built-in default applies."
    ),
    "additionalProperties": {
        "anyOf": [
            {"type": "number", "minimum": 0},
            {"type": "string", "pattern": "^[+]?P", "description": "ISO-8601 duration"},
            {"type": "null"},
            {"type": "object", "description": "a nested group of timeouts"},
        ]
    },
}


# The tool-worker ceiling when nothing sets one. Tool calls mostly wait on the
# network or a subprocess, so the ceiling is about threads, not cores: 32 is the
# most the standard library's ThreadPoolExecutor starts by default, lets every
# call of a usual model batch (a handful to a few dozen) run at once, and keeps a
# runaway batch of hundreds of calls from starting as many threads.
TOOL_WORKERS_DEFAULT = 32


def _one_spelling_each(model: type[BaseModel], data: object) -> None:
    """Refuse ``data`` that gives one field under two of its spellings
    (``tool_workers`` and ``tool-workers``): pydantic would take one and call
    the other an unknown key, which it is not."""
    if not isinstance(data, Mapping):
        return  # pydantic says what is wrong with it
    for name, field in model.model_fields.items():
        alias = field.validation_alias
        spellings = alias.choices if isinstance(alias, AliasChoices) else [name]
        given = [s for s in spellings if isinstance(s, str) and s in data]
        if len(given) > 1:
            raise ValueError(
                f"{' and '.join(map(repr, given))} are spellings of one key, {name!r}: give it once"
            )


class CapacityConfig(BaseModel):
    """Ceilings on how much runs at once."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    tool_workers: StrictInt = Field(
        TOOL_WORKERS_DEFAULT,
        ge=0,
        validation_alias=AliasChoices("tool_workers", "tool-workers", "toolWorkers"),
        description=(
            "Ceiling on parallel (read-only) tool calls of the agent layer; calls beyond "
            f"it wait in order and are never refused. Default {TOOL_WORKERS_DEFAULT}; "
            "0 = no ceiling: every call of a batch runs at once."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: object) -> object:
        _one_spelling_each(cls, data)
        return data


class TautConfig(BaseModel):
    """The taut configuration document (YAML or TOML).

    Only the ``timeouts`` and ``capacity`` sections are read; other top-level keys
    are ignored so the sections can live inside a larger application config.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    timeouts: dict[str, Any] = Field(
        default_factory=dict,
        description=_TIMEOUT_TREE_SCHEMA["description"],
        json_schema_extra={"additionalProperties": _TIMEOUT_TREE_SCHEMA["additionalProperties"]},
    )
    capacity: CapacityConfig = Field(
        default_factory=lambda: CapacityConfig.model_validate({}),
        description=CapacityConfig.__doc__,
    )

    @field_validator("timeouts", mode="before")
    @classmethod
    def _validate_timeouts(cls, value: object) -> object:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ValueError(f"timeouts must be a mapping, got {describe(value)}")
        problems = [f"{loc}: {msg}" for loc, msg in _walk_timeout_problems(value, "timeouts")]
        if problems:
            raise ValueError("; ".join(problems))
        return dict(value)

    @field_validator("capacity", mode="before")
    @classmethod
    def _validate_capacity(cls, value: object) -> object:
        # An empty ``capacity:`` section in YAML is null: not set, like ``timeouts:``.
        return {} if value is None else value

    def timeout_value(self, key: str) -> Any:
        """The configured (validated, not yet 0-mapped) value of dotted ``key``."""
        return _lookup(self.timeouts, key)


def _walk_timeout_problems(tree: Mapping[Any, Any], prefix: str) -> Iterator[tuple[str, str]]:
    for name, value in tree.items():
        if not isinstance(name, str):
            # shown(), not format(): a key's own __str__ may raise.
            yield f"{prefix}.{shown(name)}", f"keys must be text, got {describe(name)}"
            continue
        loc = prefix + "." + name  # no __format__ of a str subclass runs
        if isinstance(value, Mapping):
            yield from _walk_timeout_problems(value, loc)
            continue
        if value is None:
            continue
        ok, _, reason = _check_number(value)
        if not ok:
            yield loc, f"invalid timeout {describe(value)}: {reason}"


def _prune_timeouts(tree: Mapping[Any, Any]) -> dict[str, Any]:
    """The valid part of a timeouts tree (for the lenient protected-path loader)."""
    out: dict[str, Any] = {}
    for name, value in tree.items():
        if not isinstance(name, str):
            continue
        if isinstance(value, Mapping):
            out[name] = _prune_timeouts(value)
        elif value is None or _check_number(value)[0]:
            out[name] = value
    return out


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


def _lookup(tree: Mapping[Any, Any], key: str) -> Any:
    """Walk dotted ``key`` through nested maps; a literal dotted key also matches."""
    node: Any = tree
    for part in key.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            node = _MISSING
            break
    if node is _MISSING and isinstance(tree, Mapping):
        node = tree.get(key, _MISSING)
    return node
