"""Config files: reading and parsing (YAML, TOML, JSON), and the cache that
re-reads a file only when its ``(mtime_ns, size)`` stamp changes."""

from __future__ import annotations

import json
import os
import sys
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from taut.config.models import (
    CapacityConfig,
    ConfigWarning,
    TautConfig,
    _describe,
    _prune_timeouts,
)

__all__ = ["ConfigSource"]


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


def _load_file(path: str, stacklevel: int, on_reload: Callable[[], None]) -> _FileState:
    """The parsed state of ``path``, re-read only when its (mtime_ns, size) changes;
    ``on_reload`` runs after a (re-)read (it drops results memoised from the old state)."""
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
        on_reload()
        return state
