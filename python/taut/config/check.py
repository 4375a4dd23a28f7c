"""``python -m taut config check``: every problem of a config file, each with
its location (strict; no warnings), using line maps of the YAML or TOML text.
On request also the warnings: keys taut does not read, with the key each is
most likely a misspelling of."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taut import _lazy_import
from taut._checks import describe
from taut.config.files import (
    ConfigFileRefused,
    _capacity_errors,
    _one_line,
    _parse_text,
    _read_text,
    _yaml_document,
)
from taut.config.models import (
    SECTIONS,
    TAUT_TIMEOUT_KEYS,
    CapacityConfig,
    _walk_timeout_problems,
    nearest_key,
    unknown_timeout_keys,
)

__all__ = ["ConfigProblem", "check_config_file"]


# --------------------------------------------------------------------------- check
@dataclass(frozen=True)
class ConfigProblem:
    """One problem found by :func:`check_config_file`."""

    file: str
    location: str  # dotted key, or "" for the whole file
    line: int | None
    message: str
    severity: str = "error"  # or "warning": the file works, but likely not as meant

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        loc = f" {self.location}:" if self.location else ""
        kind = " warning:" if self.severity == "warning" else ""
        return f"{where}:{loc}{kind} {self.message}"


def _yaml_lines(root: Any) -> dict[tuple[str, ...], int]:
    """Key path -> line of a YAML node graph (already checked: no aliases, and
    nested no deeper than the limit)."""
    yaml = _lazy_import.load("yaml")  # counted: fork-safe (see taut._lazy_import)

    lines: dict[tuple[str, ...], int] = {}

    def walk(node: Any, prefix: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                name = str(getattr(key_node, "value", ""))
                path = (*prefix, name)
                lines[path] = key_node.start_mark.line + 1
                walk(value_node, path)

    if root is not None:
        walk(root, ())
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


def check_config_file(
    path: str | os.PathLike[str], *, include_warnings: bool = False
) -> list[ConfigProblem]:
    """Every problem of a config file, each with its location (strict).

    With ``include_warnings`` also the keys taut does not read (severity
    ``"warning"``): a misspelled key is named with the key it most likely
    means, and would otherwise be ignored in silence."""
    file = os.fspath(path)
    try:
        text = _read_text(file)
    except ConfigFileRefused as exc:
        return [ConfigProblem(file, "", None, f"not read: {exc}")]
    except OSError as exc:
        return [ConfigProblem(file, "", None, f"cannot read the file: {exc.strerror or exc}")]
    except UnicodeDecodeError as exc:
        return [ConfigProblem(file, "", None, f"not UTF-8 text: {exc}")]
    yaml_nodes: Any = None
    try:
        if Path(file).suffix.lower() in (".toml", ".json"):
            data = _parse_text(file, text)
        else:
            yaml_nodes, data = _yaml_document(file, text)
    except ConfigFileRefused as exc:
        return [ConfigProblem(file, "", None, f"refused: {exc}")]
    except Exception as exc:
        mark = getattr(exc, "problem_mark", None)
        line: int | None = mark.line + 1 if mark is not None else None
        if line is None:
            found = _ERROR_LINE.search(str(exc))
            line = int(found.group(1)) if found else getattr(exc, "lineno", None)
        return [ConfigProblem(file, "", line, f"cannot parse: {_one_line(exc)}")]
    suffix = Path(file).suffix.lower()
    if suffix == ".toml":
        positions = _toml_lines(text)
    else:
        if suffix == ".json":
            try:  # JSON is YAML: its node graph has the line numbers
                yaml_nodes = _yaml_document(file, text)[0]
            except Exception:  # JSON that YAML cannot read: no line numbers
                pass
        positions = _yaml_lines(yaml_nodes)

    def at(loc: str) -> int | None:
        return positions.get(tuple(loc.split("."))) if loc else None

    problems: list[ConfigProblem] = []
    if data is None:
        return problems
    if not isinstance(data, Mapping):
        return [
            ConfigProblem(
                file, "", None, f"expected a mapping at the top level, got {describe(data)}"
            )
        ]
    timeouts = data.get("timeouts")
    if timeouts is not None and not isinstance(timeouts, Mapping):
        problems.append(
            ConfigProblem(
                file, "timeouts", at("timeouts"), f"expected a mapping, got {describe(timeouts)}"
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
    if include_warnings:
        problems += _key_warnings(file, data, positions)
    return problems


def _key_warnings(
    file: str, data: Mapping[Any, Any], positions: Mapping[tuple[str, ...], int]
) -> list[ConfigProblem]:
    warnings = []
    for key in data:
        near = nearest_key(key, SECTIONS) if isinstance(key, str) else None
        if near is not None and key not in SECTIONS:
            # Other top-level keys belong to the application: only near misses.
            message = f"unknown key, ignored; did you mean {near!r}?"
            warnings.append(ConfigProblem(file, key, positions.get((key,)), message, "warning"))
    timeouts = data.get("timeouts")
    if isinstance(timeouts, Mapping):
        for path, near in unknown_timeout_keys(timeouts):
            if near is not None:
                message = f"unknown key, ignored; did you mean 'timeouts.{near}'?"
            else:
                message = (
                    f"not a timeout taut reads (taut reads {', '.join(TAUT_TIMEOUT_KEYS)}); "
                    "fine if your own code resolves it with taut.resolve_timeout"
                )
            loc = ("timeouts", *path)
            line = positions.get(loc)
            warnings.append(ConfigProblem(file, ".".join(loc), line, message, "warning"))
    return warnings
