"""Timeout and capacity configuration: one resolution path for every timeout.

A timeout is resolved from, in this order:

1. the ``timeouts:`` section of the config (a mapping or a YAML/TOML file given as
   ``config=``, or else the file named by the ``TAUT_CONFIG`` environment variable),
   where a dotted key walks nested maps (``tools.concurrent_batch`` reads
   ``timeouts: {tools: {concurrent_batch: ...}}``);
2. a (legacy) environment variable, when the caller names one;
3. the caller's default.

Configured values are seconds, or in the config also ISO-8601 durations read
as ``PlanningConstraints.time_budget`` reads them (``PT5M`` is 300 s; years and
months, which have no fixed length, are refused). In the config and in the
environment ``0`` disables a timeout (the result is ``None``). A key that looks
like a misspelling of one taut reads (``concurent_batch``) gets a
:class:`ConfigWarning` naming the key it most likely means. An invalid value
(a bool, NaN, a negative number, text, a list, a mapping) is skipped with one
:class:`ConfigWarning` naming the key, the value and its source, and
resolution falls through to the next source. A missing or broken
config file never breaks the code it protects: it warns and falls through. Use
``python -m taut config check FILE`` to see every problem with its location.
Files are untrusted input: see :mod:`taut.config.files` for what is refused
(anything but a regular file, more than 1 MiB, YAML aliases, deep nesting).

Files are parsed once and re-read only when their ``(mtime_ns, size)`` changes,
and resolved values are memoised, so a repeated :func:`resolve_timeout` costs a
``stat`` and a dictionary lookup.

Layout: :mod:`taut.config.models` (the document and the number checks),
:mod:`taut.config.files` (reading files, the stamp cache),
:mod:`taut.config.check` (``config check``) and this module (resolution).
The command line lives in :mod:`taut.cli`.

Every value that comes out goes through ``taut.clamp_timeout``: a huge value
(``1e300``, ``10**400``) is clamped to ``MAX_TIMEOUT`` and never reaches an OS
primitive as an ``OverflowError``; ``inf`` means no timeout (``None``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Union

from taut._checks import describe
from taut._core import clamp_timeout
from taut.config.check import ConfigProblem, check_config_file
from taut.config.files import ConfigSource, _lenient, _load_file, _stamp, _warn
from taut.config.models import (
    _MISSING,
    CONCURRENT_BATCH_KEY,
    SEQUENTIAL_CALL_KEY,
    TOOL_WORKERS_DEFAULT,
    CapacityConfig,
    ConfigWarning,
    TautConfig,
    _check_number,
    _finish,
    _lookup,
    _Missing,
    _parse_env,
)

__all__ = [
    "CONCURRENT_BATCH_DEFAULT",
    "CONCURRENT_BATCH_ENV",
    "CONCURRENT_BATCH_KEY",
    "CONFIG_ENV",
    "SEQUENTIAL_CALL_KEY",
    "TOOL_WORKERS_DEFAULT",
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
CONCURRENT_BATCH_ENV = "TAUT_CONCURRENT_TOOL_TIMEOUT_S"
CONCURRENT_BATCH_DEFAULT = 420.0

# Memoised results keyed by everything a result depends on; cleared whenever a file
# is re-read, and bounded so changing environment values cannot grow it forever.
_resolved: dict[tuple[Any, ...], float | None] = {}
_RESOLVED_MAX = 4096


def _reload() -> None:
    _resolved.clear()


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
        return _load_file(path, on_reload=_reload).config
    if obj is None:
        return TautConfig()
    if isinstance(obj, TautConfig):
        return obj
    return _lenient(obj, ConfigSource(None))[1]


def tool_workers(config: ConfigArg = None) -> int:
    """``capacity.tool_workers`` from the config: :data:`TOOL_WORKERS_DEFAULT`
    (32) when it is not set, 0 = no ceiling."""
    return load_config(config).capacity.tool_workers


def _check_default(default: object) -> float | None:
    # The caller's own timeout: through the gate every timeout parameter
    # takes (Decimal, Fraction and timedelta accepted; NaN a ValueError).
    result: float | None = clamp_timeout(default, name="default")
    return result


def _accept(
    key: str,
    value: object,
    checked: tuple[bool, float | int | None, str],
    where: str,
    fallback: str,
) -> float | _Missing | None:
    """The resolved timeout of one source's checked value, or ``_MISSING`` after
    a warning that names the key, the value, the source and what applies instead."""
    ok, number, reason = checked
    if ok and number is not None:
        return _finish(number)
    _warn(
        f"taut config: ignoring timeout {key!r} = {describe(value)} from {where}: "
        f"{reason}; falling back to {fallback}"
    )
    return _MISSING


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
        raise TypeError(f"key must be a non-empty dotted string, got {describe(key)}")
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
        state = _load_file(path, on_reload=_reload)
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
                f"{describe(section)}; ignoring it"
            )
        elif isinstance(section, Mapping):
            try:
                value = _lookup(section, key)
            except Exception as exc:  # a hostile Mapping must not break the caller
                _warn(
                    f"taut config: cannot read timeouts.{key} from the config mapping: {exc!r}"
                )
        elif not isinstance(obj, Mapping):
            _warn(
                f"taut config: config must be a mapping, a path or a TautConfig, got "
                f"{describe(obj)}; ignoring it"
            )
        source = ConfigSource(None)

    result: float | _Missing | None = _MISSING
    if value is not _MISSING and value is not None and source is not None:
        result = _accept(
            key,
            value,
            _check_number(value),
            source.where("timeouts." + key),
            "the environment variable " + env_var if env_var else "the default",
        )
    if isinstance(result, _Missing) and env_text is not None and env_text.strip():
        where = f"environment variable {env_var}"
        result = _accept(key, env_text, _parse_env(env_text), where, "the default")
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
