"""Timeout and capacity configuration: one resolution path for every timeout.

A timeout is resolved from, in this order:

1. the ``timeouts:`` section of the config (a mapping or a YAML/TOML file given as
   ``config=``, or else the file named by the ``TAUT_CONFIG`` environment variable),
   where a dotted key walks nested maps (``tools.concurrent_batch`` reads
   ``timeouts: {tools: {concurrent_batch: ...}}``);
2. a (legacy) environment variable, when the caller names one;
3. the caller's default.

In the config and in the environment ``0`` disables a timeout (the result is
``None``). An invalid value (a bool, NaN, a negative number, text, a list, a
mapping) is skipped with one :class:`ConfigWarning` naming the key, the value and
its source, and resolution falls through to the next source. A missing or broken
config file never breaks the code it protects: it warns and falls through. Use
``python -m taut config check FILE`` to see every problem with its location.

Files are parsed once and re-read only when their ``(mtime_ns, size)`` changes,
and resolved values are memoised, so a repeated :func:`resolve_timeout` costs a
``stat`` and a dictionary lookup.

Every value that comes out goes through ``taut.clamp_timeout``: a huge value
(``1e300``, ``10**400``) is clamped to ``MAX_TIMEOUT`` and never reaches an OS
primitive as an ``OverflowError``; ``inf`` means no timeout (``None``).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Union

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictInt, field_validator

__all__ = [
    "CONCURRENT_BATCH_ENV",
    "CONCURRENT_BATCH_KEY",
    "CONFIG_ENV",
    "SEQUENTIAL_CALL_KEY",
    "CapacityConfig",
    "ConfigProblem",
    "ConfigSource",
    "ConfigWarning",
    "TautConfig",
    "check_config_file",
    "concurrent_batch_timeout",
    "load_config",
    "resolve_timeout",
    "sequential_call_timeout",
    "tool_workers",
]

CONFIG_ENV = "TAUT_CONFIG"
CONCURRENT_BATCH_KEY = "tools.concurrent_batch"
CONCURRENT_BATCH_ENV = "TAUT_CONCURRENT_TOOL_TIMEOUT_S"
CONCURRENT_BATCH_DEFAULT = 420.0
SEQUENTIAL_CALL_KEY = "tools.sequential_call"


class ConfigWarning(UserWarning):
    """A configured value (config file, mapping or environment variable) was ignored.

    The message names the key, the offending value and where it came from; the
    value of the next source (environment variable, then default) is used instead.
    """


# --------------------------------------------------------------------------- clamp
# Every value handed out goes through taut's one clamping gate (the Rust core's
# clamp_timeout: inf -> None, finite values capped at MAX_TIMEOUT, ints of any
# size without OverflowError). The local stand-in keeps the module importable
# against an extension built without it; it has the same semantics for the values
# we pass (validated: never bool, NaN or negative).
_LOCAL_MAX_TIMEOUT = 1_000_000.0


def _local_clamp(value: float | int) -> float | None:
    if value == math.inf:
        return None
    # Compare before converting: float(10**400) would itself raise OverflowError.
    if value >= _LOCAL_MAX_TIMEOUT:
        return _LOCAL_MAX_TIMEOUT
    return float(value)


def _pick_clamp() -> Any:
    try:
        from taut import _core
    except ImportError:  # pragma: no cover - extension not built
        return _local_clamp
    return getattr(_core, "clamp_timeout", _local_clamp)


_clamp: Any = _pick_clamp()


# --------------------------------------------------------------------------- values
def _describe(value: object) -> str:
    """``repr`` of a configured value that can neither raise nor flood a log line."""
    try:
        text = repr(value)
    except Exception:
        text = f"<unrepresentable {type(value).__name__}>"
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


_RULE = "expected a non-negative number of seconds (0 disables)"


def _check_number(value: object) -> tuple[bool, float | int | None, str]:
    """Validate one configured timeout number: ``(ok, number, reason)``.

    ``number`` is the original int/float (not yet clamped); ``0`` is a valid number.
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
            return False, None, f"{_RULE}, got text"
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
    result: float | None = _clamp(number)
    return result


def _parse_env(text: str) -> tuple[bool, float | int | None, str]:
    stripped = text.strip()
    try:
        number: float | int = int(stripped)
    except ValueError:
        try:
            # Decimal, not float: "1e400" is a huge finite number (clamped), while
            # float() would turn it into inf (no timeout at all).
            exact = Decimal(stripped)
        except (InvalidOperation, ValueError):
            return False, None, f"{_RULE}, got text"
        if exact.is_nan():
            return False, None, f"{_RULE}, got NaN"
        if exact.is_finite() and exact >= _LOCAL_MAX_TIMEOUT:
            number = int(exact)
        else:
            number = float(exact)
    return _check_number(number)


# --------------------------------------------------------------------------- model
_TIMEOUT_TREE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": (
        "Timeouts in seconds, nested by dotted key: `tools.concurrent_batch` is "
        "`timeouts: {tools: {concurrent_batch: 300}}`. 0 disables a timeout; "
        "null (or leaving the key out) means not set, so the environment variable "
        "or the built-in default applies."
    ),
    "additionalProperties": {
        "anyOf": [
            {"type": "number", "minimum": 0},
            {"type": "null"},
            {"type": "object", "description": "a nested group of timeouts"},
        ]
    },
}


class CapacityConfig(BaseModel):
    """Ceilings on how much runs at once."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    tool_workers: StrictInt = Field(
        0,
        ge=0,
        validation_alias=AliasChoices("tool_workers", "tool-workers", "toolWorkers"),
        description=(
            "Ceiling on parallel (read-only) tool calls of the agent layer; calls beyond "
            "it wait in order and are never refused. 0 = no ceiling: every call of a "
            "batch runs at once."
        ),
    )


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
            raise ValueError(f"timeouts must be a mapping, got {_describe(value)}")
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
        loc = f"{prefix}.{name}"
        if not isinstance(name, str):
            yield loc, f"keys must be text, got {_describe(name)}"
            continue
        if isinstance(value, Mapping):
            yield from _walk_timeout_problems(value, loc)
            continue
        if value is None:
            continue
        ok, _, reason = _check_number(value)
        if not ok:
            yield loc, f"invalid timeout {_describe(value)}: {reason}"


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


# --------------------------------------------------------------------------- files
@dataclass(frozen=True)
class ConfigSource:
    """Where a configuration came from: a file path, or ``None`` for a mapping."""

    path: str | None

    def where(self, dotted: str) -> str:
        if self.path is None:
            return f"config mapping at {dotted}"
        return f"{self.path} at {dotted}"


def _parse_text(path: str, text: str) -> Any:
    suffix = Path(path).suffix.lower()
    if suffix == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - exercised on 3.9/3.10 only
            import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]
        return tomllib.loads(text)
    if suffix == ".json":
        return json.loads(text)
    import yaml

    # YAML is a superset of JSON, so unknown suffixes are read as YAML; the safe
    # loader never constructs arbitrary Python objects.
    return yaml.safe_load(text)


@dataclass
class _FileState:
    stamp: tuple[int, int] | None
    timeouts: Mapping[Any, Any]
    config: TautConfig


_files: dict[str, _FileState] = {}
_files_lock = threading.Lock()


def _warn(message: str, stacklevel: int) -> None:
    warnings.warn(message, ConfigWarning, stacklevel=stacklevel + 1)


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_mtime_ns, st.st_size)


def _lenient(
    data: Any, source: ConfigSource, stacklevel: int
) -> tuple[Mapping[Any, Any], TautConfig]:
    """Build the raw timeouts tree and a valid TautConfig from untrusted data.

    Invalid parts are dropped with a warning; never raises.
    """
    if data is None:
        return {}, TautConfig()
    if not isinstance(data, Mapping):
        _warn(
            f"taut config {source.path or 'mapping'} ignored: expected a mapping at the top "
            f"level, got {_describe(data)}",
            stacklevel + 1,
        )
        return {}, TautConfig()
    raw_timeouts = data.get("timeouts")
    if raw_timeouts is None:
        raw_timeouts = {}
    elif not isinstance(raw_timeouts, Mapping):
        _warn(
            f"taut config: {source.where('timeouts')} ignored: expected a mapping, got "
            f"{_describe(raw_timeouts)}",
            stacklevel + 1,
        )
        raw_timeouts = {}
    capacity: Any = data.get("capacity")
    capacity_cfg = CapacityConfig.model_validate({})
    if capacity is not None:
        try:
            capacity_cfg = CapacityConfig.model_validate(capacity)
        except Exception as exc:
            details = "; ".join(f"{loc}: {msg}" for loc, msg in _capacity_errors(exc))
            _warn(
                f"taut config: {source.where('capacity')} ignored, using the defaults: "
                f"{details or _one_line(exc)}",
                stacklevel + 1,
            )
    try:
        cfg = TautConfig(timeouts=_prune_timeouts(raw_timeouts), capacity=capacity_cfg)
    except Exception:  # pragma: no cover - pruning leaves only valid leaves
        cfg = TautConfig(capacity=capacity_cfg)
    return raw_timeouts, cfg


def _capacity_errors(exc: BaseException) -> list[tuple[str, str]]:
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return []
    out = []
    for error in exc.errors():
        loc = ".".join(["capacity", *(str(p) for p in error["loc"])])
        out.append((loc, f"{error['msg']}, got {_describe(error.get('input'))}"))
    return out


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _load_file(path: str, stacklevel: int) -> _FileState:
    """The parsed state of ``path``, re-read only when its (mtime_ns, size) changes."""
    stamp = _stamp(path)
    state = _files.get(path)
    if state is not None and state.stamp == stamp:
        return state
    with _files_lock:
        state = _files.get(path)
        if state is not None and state.stamp == stamp:
            return state
        source = ConfigSource(path)
        if stamp is None:
            _warn(f"taut config file {path!r} not found or unreadable; ignoring it", stacklevel + 1)
            state = _FileState(stamp, {}, TautConfig())
        else:
            try:
                text = Path(path).read_text(encoding="utf-8")
                data = _parse_text(path, text)
            except Exception as exc:
                _warn(
                    f"taut config file {path!r} is broken, ignoring it: {_one_line(exc)}",
                    stacklevel + 1,
                )
                state = _FileState(stamp, {}, TautConfig())
            else:
                raw, cfg = _lenient(data, source, stacklevel + 1)
                state = _FileState(stamp, raw, cfg)
        _files[path] = state
        _resolved.clear()
        return state


ConfigArg = Union[Mapping[str, Any], str, "os.PathLike[str]", TautConfig, None]


def _source_of(config: ConfigArg) -> tuple[str | None, Any]:
    """``(path, mapping_or_model)``: exactly one is meaningful."""
    if config is None:
        path = os.environ.get(CONFIG_ENV)
        return (path or None), None
    if isinstance(config, (str, os.PathLike)):
        return os.fspath(config), None
    return None, config


def load_config(config: ConfigArg = None) -> TautConfig:
    """The effective :class:`TautConfig` (lenient: invalid parts dropped with warnings).

    ``config`` is a mapping (the whole document), a path to a YAML/TOML/JSON file, a
    ``TautConfig``, or ``None`` for the file named by ``$TAUT_CONFIG`` (no file:
    the defaults). Never raises for a bad or missing file.
    """
    path, obj = _source_of(config)
    if path is not None:
        return _load_file(path, stacklevel=2).config
    if obj is None:
        return TautConfig()
    if isinstance(obj, TautConfig):
        return obj
    return _lenient(obj, ConfigSource(None), stacklevel=2)[1]


def tool_workers(config: ConfigArg = None) -> int:
    """``capacity.tool_workers`` from the config; 0 (the default) = no ceiling."""
    return load_config(config).capacity.tool_workers


# --------------------------------------------------------------------------- resolve
# Memoised results keyed by everything a result depends on; cleared whenever a file
# is re-read, and bounded so changing environment values cannot grow it forever.
_resolved: dict[tuple[Any, ...], float | None] = {}
_RESOLVED_MAX = 4096


def _check_default(default: object) -> float | None:
    if default is None:
        return None
    ok, number, _ = _check_number(default)
    if not ok or number is None:
        raise TypeError(
            f"default must be a non-negative number of seconds or None, got {_describe(default)}"
        )
    result: float | None = _clamp(number)
    return result


def resolve_timeout(
    key: str,
    *,
    default: float | None,
    env_var: str | None = None,
    config: ConfigArg = None,
) -> float | None:
    """Resolve the timeout for dotted ``key``: config ``timeouts:`` > ``env_var`` > ``default``.

    Returns seconds (clamped to ``MAX_TIMEOUT``) or ``None`` for no timeout. ``0`` in
    the config or the environment disables the timeout. Invalid configured values are
    skipped with one :class:`ConfigWarning` each. Only a bad ``key`` or ``default``
    (programming errors) raise.
    """
    if not isinstance(key, str) or not key:
        raise TypeError(f"key must be a non-empty dotted string, got {_describe(key)}")
    path, obj = _source_of(config)
    env_text = os.environ.get(env_var) if env_var else None
    if obj is None:
        stamp = _stamp(path) if path is not None else None
        # type(default): True == 1 and must not hit the memo of default=1.
        memo_key: tuple[Any, ...] = (path, stamp, key, default, type(default), env_var, env_text)
        try:
            return _resolved[memo_key]
        except KeyError:
            pass
        except TypeError:  # unhashable default: a programming error reported below
            memo_key = ()
    fallback = _check_default(default)

    value: Any = _MISSING
    source: ConfigSource | None = None
    if path is not None:
        state = _load_file(path, stacklevel=2)
        value = _lookup(state.timeouts, key)
        source = ConfigSource(path)
    elif isinstance(obj, TautConfig):
        value = obj.timeout_value(key)
        source = ConfigSource(None)
    elif obj is not None:
        try:
            section = obj.get("timeouts") if isinstance(obj, Mapping) else _MISSING
        except Exception:
            section = _MISSING
        if section is not _MISSING and section is not None and not isinstance(section, Mapping):
            _warn(
                f"taut config: timeouts section of the config mapping is not a mapping, got "
                f"{_describe(section)}; ignoring it",
                2,
            )
        elif isinstance(section, Mapping):
            try:
                value = _lookup(section, key)
            except Exception as exc:  # a hostile Mapping must not break the caller
                _warn(
                    f"taut config: cannot read timeouts.{key} from the config mapping: {exc!r}", 2
                )
        elif not isinstance(obj, Mapping):
            _warn(
                f"taut config: config must be a mapping, a path or a TautConfig, got "
                f"{_describe(obj)}; ignoring it",
                2,
            )
        source = ConfigSource(None)

    result: float | _Missing | None = _MISSING
    if value is not _MISSING and value is not None and source is not None:
        ok, number, reason = _check_number(value)
        if ok and number is not None:
            result = _finish(number)
        else:
            _warn(
                f"taut config: ignoring timeout {key!r} = {_describe(value)} from "
                f"{source.where('timeouts.' + key)}: {reason}; falling back to "
                f"{'the environment variable ' + env_var if env_var else 'the default'}",
                2,
            )
    if isinstance(result, _Missing) and env_text is not None and env_text.strip():
        ok, number, reason = _parse_env(env_text)
        if ok and number is not None:
            result = _finish(number)
        else:
            _warn(
                f"taut config: ignoring timeout {key!r} = {_describe(env_text)} from environment "
                f"variable {env_var}: {reason}; falling back to the default",
                2,
            )
    final = fallback if isinstance(result, _Missing) else result
    if obj is None and memo_key:
        if len(_resolved) >= _RESOLVED_MAX:
            _resolved.clear()
        _resolved[memo_key] = final
    return final


def concurrent_batch_timeout(config: ConfigArg = None) -> float | None:
    """Deadline of a parallel tool batch: ``tools.concurrent_batch``, env
    ``TAUT_CONCURRENT_TOOL_TIMEOUT_S``, default 420 s."""
    return resolve_timeout(
        CONCURRENT_BATCH_KEY,
        default=CONCURRENT_BATCH_DEFAULT,
        env_var=CONCURRENT_BATCH_ENV,
        config=config,
    )


def sequential_call_timeout(config: ConfigArg = None) -> float | None:
    """Deadline of one sequential tool call: ``tools.sequential_call``, defaulting to
    the resolved :func:`concurrent_batch_timeout`."""
    return resolve_timeout(
        SEQUENTIAL_CALL_KEY, default=concurrent_batch_timeout(config), config=config
    )


# --------------------------------------------------------------------------- check
@dataclass(frozen=True)
class ConfigProblem:
    """One problem found by :func:`check_config_file`."""

    file: str
    location: str  # dotted key, or "" for the whole file
    line: int | None
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        loc = f" {self.location}:" if self.location else ""
        return f"{where}:{loc} {self.message}"


def _yaml_lines(text: str) -> dict[tuple[str, ...], int]:
    import yaml

    lines: dict[tuple[str, ...], int] = {}

    def walk(node: Any, prefix: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                name = str(getattr(key_node, "value", ""))
                path = (*prefix, name)
                lines[path] = key_node.start_mark.line + 1
                walk(value_node, path)

    try:
        walk(yaml.compose(text, Loader=yaml.SafeLoader), ())
    except Exception:
        pass
    return lines


_TOML_TABLE = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_TOML_KEY = re.compile(r"^\s*([A-Za-z0-9_\-\.\"' ]+?)\s*=")


def _toml_parts(dotted: str) -> tuple[str, ...]:
    return tuple(p.strip().strip("\"'") for p in dotted.split("."))


def _toml_lines(text: str) -> dict[tuple[str, ...], int]:
    """Best-effort key -> line map for TOML (tomllib keeps no positions)."""
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), start=1):
        m = _TOML_TABLE.match(line)
        if m:
            table = _toml_parts(m.group(1))
            for i in range(1, len(table) + 1):
                lines.setdefault(table[:i], number)
            continue
        m = _TOML_KEY.match(line)
        if m:
            path = table + _toml_parts(m.group(1))
            for i in range(len(table) + 1, len(path) + 1):
                lines.setdefault(path[:i], number)
    return lines


_ERROR_LINE = re.compile(r"line (\d+)")


def check_config_file(path: str | os.PathLike[str]) -> list[ConfigProblem]:
    """Every problem of a config file, each with its location (strict; no warnings)."""
    file = os.fspath(path)
    try:
        text = Path(file).read_text(encoding="utf-8")
    except OSError as exc:
        return [ConfigProblem(file, "", None, f"cannot read the file: {exc.strerror or exc}")]
    except UnicodeDecodeError as exc:
        return [ConfigProblem(file, "", None, f"not UTF-8 text: {exc}")]
    try:
        data = _parse_text(file, text)
    except Exception as exc:
        mark = getattr(exc, "problem_mark", None)
        line: int | None = mark.line + 1 if mark is not None else None
        if line is None:
            found = _ERROR_LINE.search(str(exc))
            line = int(found.group(1)) if found else getattr(exc, "lineno", None)
        return [ConfigProblem(file, "", line, f"cannot parse: {_one_line(exc)}")]
    positions = _toml_lines(text) if Path(file).suffix.lower() == ".toml" else _yaml_lines(text)

    def at(loc: str) -> int | None:
        return positions.get(tuple(loc.split("."))) if loc else None

    problems: list[ConfigProblem] = []
    if data is None:
        return problems
    if not isinstance(data, Mapping):
        return [
            ConfigProblem(
                file, "", None, f"expected a mapping at the top level, got {_describe(data)}"
            )
        ]
    timeouts = data.get("timeouts")
    if timeouts is not None and not isinstance(timeouts, Mapping):
        problems.append(
            ConfigProblem(
                file, "timeouts", at("timeouts"), f"expected a mapping, got {_describe(timeouts)}"
            )
        )
    elif timeouts is not None:
        for loc, message in _walk_timeout_problems(timeouts, "timeouts"):
            problems.append(ConfigProblem(file, loc, at(loc), message))
    capacity = data.get("capacity")
    if capacity is not None:
        try:
            CapacityConfig.model_validate(capacity)
        except Exception as exc:
            errors = _capacity_errors(exc) or [("capacity", _one_line(exc))]
            for loc, message in errors:
                problems.append(ConfigProblem(file, loc, at(loc) or at("capacity"), message))
    return problems


# --------------------------------------------------------------------------- CLI
def _cli_check(args: Any) -> int:
    failed = False
    for file in args.files:
        problems = check_config_file(file)
        if problems:
            failed = True
            for problem in problems:
                print(problem)
            print(f"{file}: {len(problems)} problem(s)")
        else:
            cfg = TautConfig.model_validate(_parse_text(file, Path(file).read_text("utf-8")) or {})
            # What this file alone gives (no environment): the resolved values.
            batch = resolve_timeout(
                CONCURRENT_BATCH_KEY, default=CONCURRENT_BATCH_DEFAULT, config=cfg
            )
            alone = resolve_timeout(SEQUENTIAL_CALL_KEY, default=batch, config=cfg)
            print(
                f"{file}: OK (capacity.tool_workers={cfg.capacity.tool_workers}, "
                f"{CONCURRENT_BATCH_KEY}={_seconds_text(batch)}, "
                f"{SEQUENTIAL_CALL_KEY}={_seconds_text(alone)})"
            )
    return 1 if failed else 0


def _seconds_text(value: float | None) -> str:
    return "no timeout" if value is None else f"{value:g} s"


def _cli_schema(args: Any) -> int:
    print(json.dumps(TautConfig.model_json_schema(), indent=2))
    return 0


def register_cli(subparsers: Any) -> None:
    """Add ``python -m taut config {check,schema}`` to the top-level parser."""
    parser = subparsers.add_parser("config", help="check a taut config file, print its schema")
    sub = parser.add_subparsers(dest="config_command", required=True)
    check = sub.add_parser("check", help="report every problem of FILE with its location")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.set_defaults(handler=_cli_check)
    schema = sub.add_parser("schema", help="print the JSON schema of the config document")
    schema.set_defaults(handler=_cli_schema)
