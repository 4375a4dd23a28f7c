"""Config files: reading and parsing (YAML, TOML, JSON), and the cache that
re-reads a file only when its ``(mtime_ns, size)`` stamp changes.

A config file is untrusted input on the protected code path, so reading it is
bounded before any parsing starts: only a regular file is read (a FIFO, a
device or a directory is refused without blocking: the file is opened
non-blocking and checked with ``fstat`` before the first read), at most
:data:`MAX_CONFIG_BYTES` (1 MiB) of it; YAML aliases (``*name``) are refused,
so neither a recursive anchor nor an alias bomb can expand, and no document
may nest deeper than :data:`MAX_CONFIG_DEPTH` levels. What is refused raises
:class:`ConfigFileRefused`, which resolution turns into a ``ConfigWarning`` and
``config check`` into a reported problem.
"""

from __future__ import annotations

import functools
import io
import json
import math
import os
import re
import stat
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from taut import _lazy_import
from taut._checks import describe
from taut._fork_locks import fork_safe_lock
from taut.config.models import (
    SECTIONS,
    CapacityConfig,
    ConfigWarning,
    TautConfig,
    _prune_timeouts,
    nearest_key,
    unknown_timeout_keys,
)

__all__ = ["MAX_CONFIG_BYTES", "MAX_CONFIG_DEPTH", "ConfigFileRefused", "ConfigSource"]

MAX_CONFIG_BYTES = 1 << 20
"""The largest config file taut reads (1 MiB): a timeout config is a few lines."""
MAX_CONFIG_DEPTH = 100
"""The deepest nesting of mappings and lists a config document may have."""

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # absent on Windows, which has no FIFOs
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOCTTY = getattr(os, "O_NOCTTY", 0)


class ConfigFileRefused(ValueError):
    """A config file (or planning constraints, :meth:`taut.PlanningConstraints.load`
    and ``from_yaml``) that taut will not parse: not a regular file, too large,
    YAML aliases, or nested too deep. The message says which."""


@dataclass(frozen=True)
class ConfigSource:
    """Where a configuration came from: a file path, or ``None`` for a mapping."""

    path: str | None

    def where(self, dotted: str) -> str:
        if self.path is None:
            return f"config mapping at {dotted}"
        return f"{self.path} at {dotted}"


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _read_text(path: str) -> str:
    """The text of config file ``path``: a regular file of at most
    :data:`MAX_CONFIG_BYTES`, UTF-8 (after a byte order mark, which Windows
    editors write and JSON and TOML parsers refuse). Never blocks on a FIFO
    or a device."""
    # O_NONBLOCK: opening a FIFO without a writer returns at once instead of
    # waiting for one; fstat then refuses it before anything is read.
    fd = os.open(path, os.O_RDONLY | _NONBLOCK | _CLOEXEC | _NOCTTY)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigFileRefused(f"{_kind(mode)}, not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_CONFIG_BYTES:  # the stat size may be stale: count what is read
            chunk = os.read(fd, MAX_CONFIG_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > MAX_CONFIG_BYTES:
        raise ConfigFileRefused(
            f"larger than {MAX_CONFIG_BYTES} bytes (1 MiB), the most a config file may have"
        )
    return b"".join(chunks).decode("utf-8-sig")


def _yaml_loader() -> type[Any]:
    # Third-party imports on first use go through taut's counted lazy load,
    # so that a fork() from another thread meanwhile cannot leave their
    # import locks held in the child (see taut._lazy_import).
    yaml = _lazy_import.load("yaml")

    # libyaml's parser when PyYAML has it (much faster, and it caps flow nesting);
    # both are safe loaders: they never construct arbitrary Python objects.
    loader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return loader


def _config_float(text: str) -> float:
    """A float written in a config file, meaning what the same text means in
    the environment (taut.config.models._parse_env). One too small for a
    float (``1e-400``) becomes the smallest float of its sign, not 0, which
    would disable a timeout (or turn a negative, refused value into an
    accepted one). One too large (``1e400``) becomes the largest finite
    float of its sign, clamped later like any huge timeout, not the infinity
    that means no timeout at all: only an infinity written as one does."""
    value = float(text)
    lowered = text.lower()
    if math.isinf(value) and "inf" not in lowered:
        return math.copysign(sys.float_info.max, value)
    mantissa = lowered.split("e")[0]
    if value == 0 and any(digit in mantissa for digit in "123456789"):
        return math.copysign(math.ulp(0.0), value)
    return value


_YAML_FLOAT = "tag:yaml.org,2002:float"
# YAML 1.1 (PyYAML's) reads `1e3`, an exponent without a dot, as the text
# "1e3"; YAML 1.2 and JSON read the number it looks like, and so does taut.
_EXPONENT_WITHOUT_DOT = re.compile(r"^[-+]?[0-9]+[eE][-+]?[0-9]+$")


_YAML_INT = "tag:yaml.org,2002:int"


def _yaml_int(loader: Any, node: Any) -> int | str:
    if ":" in str(node.value):
        return _base_60_as_text(loader, node)
    value: int = type(loader).construct_yaml_int(loader, node)
    return value


def _base_60_as_text(loader: Any, node: Any) -> str:
    """YAML 1.1 (PyYAML's) reads ``1:30`` as the base-60 number 90, and
    ``1:30:00`` as 5400: a duration some mean in minutes, others in hours.
    YAML 1.2 reads them as text, and so does taut, so such a timeout is
    refused naming its key, not taken for a number nobody wrote."""
    text: str = loader.construct_scalar(node)
    return text


def _yaml_float(loader: Any, node: Any) -> float | str:
    if ":" in str(node.value):
        return _base_60_as_text(loader, node)
    value: float = type(loader).construct_yaml_float(loader, node)
    if value == 0 or math.isinf(value):
        text = str(node.value).replace("_", "")
        return value if "inf" in text.lower() else _config_float(text)  # YAML writes .inf
    return value


# PyYAML and json keep the last of a key given twice in silence; TOML refuses it.
_ONCE = "a mapping gives each key once, and taut will not guess which value is meant"
_YAML_MERGE = "tag:yaml.org,2002:merge"


def _yaml_unique_mapping(loader: Any, node: Any, deep: bool = False) -> Any:
    """PyYAML's mapping of ``node``, refused if it gives a key twice."""
    _refuse_repeated_keys(loader, node)
    return type(loader).construct_mapping(loader, node, deep=deep)


def _refuse_repeated_keys(loader: Any, node: Any) -> None:
    """Refuse a mapping node that gives a key twice, or merges one in twice.

    ``<<: {...}`` (or ``<<: [{...}, {...}]``) merges keys in, which the
    mapping's own keys override by design. PyYAML flattens merged mappings
    into this one without constructing them, so their repeats are looked for
    here. Two mappings of one merge list giving the same key are refused too:
    YAML says the first wins, PyYAML takes the last."""
    own: dict[Any, int] = {}
    merged_in: dict[Any, int] = {}
    merge_line = 0
    for key_node, value_node in node.value:
        if key_node.tag != _YAML_MERGE:
            _note_key(loader, key_node, own)
            continue
        line = key_node.start_mark.line + 1
        if merge_line:
            raise ConfigFileRefused(
                f"the merge key '<<' at line {line} is given already at line "
                f"{merge_line}: {_ONCE} (merge several mappings as <<: [a, b])"
            )
        merge_line = line
        merged = value_node.value if value_node.id == "sequence" else [value_node]
        for mapping in merged:
            if mapping.id != "mapping":
                continue  # PyYAML's own error follows
            _refuse_repeated_keys(loader, mapping)
            for merged_key, _ in mapping.value:
                if merged_key.tag != _YAML_MERGE:
                    _note_key(loader, merged_key, merged_in)


def _note_key(loader: Any, key_node: Any, lines: dict[Any, int]) -> None:
    """Note the line of the key of ``key_node`` in ``lines``, refused if there."""
    key = loader.construct_object(key_node, deep=True)
    line = key_node.start_mark.line + 1
    try:
        first = lines.get(key)
    except TypeError:
        return  # an unhashable key: PyYAML's own error follows
    if first is not None:
        raise ConfigFileRefused(
            f"the key {key!r} at line {line} is given already at line {first}: {_ONCE}"
        )
    lines[key] = line


def _json_unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused if it gives a key twice."""
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ConfigFileRefused(f"the key {key!r} is given twice in one object: {_ONCE}")
            seen.add(key)
    return data


class _NamedText(io.StringIO):
    """YAML text that carries its file name into the parser's error marks
    (which otherwise say ``<unicode string>``)."""

    def __init__(self, text: str, name: str) -> None:
        super().__init__(text)
        self.name = name


def _yaml_document(path: str, text: str) -> tuple[Any, Any]:
    """``(node graph, data)`` of a YAML config text, ``(None, None)`` when it is
    empty; refused if it uses aliases or nests too deep. Composing never expands
    an alias, so the check is linear in the size of the text."""
    loader = _yaml_loader()(_NamedText(text, path))
    # On this loader only (PyYAML's tables are shared by every user of the class).
    loader.yaml_constructors = {
        **loader.yaml_constructors,
        _YAML_FLOAT: _yaml_float,
        _YAML_INT: _yaml_int,
    }
    resolvers = {first: list(rules) for first, rules in loader.yaml_implicit_resolvers.items()}
    for first in "-+0123456789":
        resolvers.setdefault(first, []).append((_YAML_FLOAT, _EXPONENT_WITHOUT_DOT))
    loader.yaml_implicit_resolvers = resolvers
    loader.construct_mapping = functools.partial(_yaml_unique_mapping, loader)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        _check_nodes(node)
        return node, loader.construct_document(node)
    finally:
        loader.dispose()


def _check_nodes(root: Any) -> None:
    yaml = _lazy_import.load("yaml")

    seen: set[int] = set()
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if id(node) in seen:
            # The composer hands out an anchored node again for each alias.
            mark = node.start_mark
            raise ConfigFileRefused(
                f"YAML aliases (*name) are not allowed in an untrusted taut file (a config "
                f"file, planning constraints): the node anchored at line {mark.line + 1} "
                "is used again"
            )
        seen.add(id(node))
        if depth > MAX_CONFIG_DEPTH:
            raise ConfigFileRefused(f"nested deeper than {MAX_CONFIG_DEPTH} levels")
        if isinstance(node, yaml.SequenceNode):
            stack.extend((child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.append((key, depth + 1))
                stack.append((value, depth + 1))


def _check_depth(data: Any) -> None:
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, Mapping):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth >= MAX_CONFIG_DEPTH:
            raise ConfigFileRefused(f"nested deeper than {MAX_CONFIG_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)


def _json_loads(text: str | bytes, **options: Any) -> Any:
    """``json.loads``, with a document nested too deep for the parser's
    recursion (``"[" * 100000``) a ``json.JSONDecodeError`` like any other
    malformed JSON, not a ``RecursionError``, and an object that gives a key
    twice refused (:class:`ConfigFileRefused`)."""
    try:
        return json.loads(text, object_pairs_hook=_json_unique_object, **options)
    except RecursionError:
        doc = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise json.JSONDecodeError(
            "nested too deep to parse (more levels than Python's recursion limit)", doc, 0
        ) from None


def _parse_text(path: str, text: str) -> Any:
    suffix = Path(path).suffix.lower()
    if suffix in (".toml", ".json"):
        if suffix == ".json":
            data = _json_loads(text, parse_float=_config_float)
        elif sys.version_info >= (3, 11):
            tomllib = _lazy_import.load("tomllib")
            data = tomllib.loads(text, parse_float=_config_float)
        else:  # pragma: no cover - exercised on 3.9/3.10 only
            tomli = _lazy_import.load("tomli")
            data = tomli.loads(text, parse_float=_config_float)
        _check_depth(data)
        return data
    # YAML is a superset of JSON, so unknown suffixes are read as YAML.
    return _yaml_document(path, text)[1]


@dataclass
class _FileState:
    stamp: tuple[int, int] | None
    timeouts: Mapping[Any, Any]
    config: TautConfig


_files: dict[str, _FileState] = {}
_files_lock = fork_safe_lock()


# taut's own source folder: a warning points past every frame in it.
_TAUT_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _warn(message: str) -> None:
    """Warn at the first frame outside taut: the user's call that read the
    bad value, however deep in taut (a tool batch, concurrent_batch_timeout,
    resolve_timeout) the reading happened."""
    level = 2  # _warn's caller
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_TAUT_FOLDER):
        frame = frame.f_back
        level += 1
    warnings.warn(message, ConfigWarning, stacklevel=level)


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_mtime_ns, st.st_size)


def _lenient(data: Any, source: ConfigSource) -> tuple[Mapping[Any, Any], TautConfig]:
    """Build the raw timeouts tree and a valid TautConfig from untrusted data.

    Invalid parts are dropped with a warning; never raises.
    """
    if data is None:
        return {}, TautConfig()
    if not isinstance(data, Mapping):
        _warn(
            f"taut config {source.path or 'mapping'} ignored: expected a mapping at the top "
            f"level, got {describe(data)}"
        )
        return {}, TautConfig()
    raw_timeouts = data.get("timeouts")
    if raw_timeouts is None:
        raw_timeouts = {}
    elif not isinstance(raw_timeouts, Mapping):
        _warn(
            f"taut config: {source.where('timeouts')} ignored: expected a mapping, got "
            f"{describe(raw_timeouts)}"
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
                f"{details or _one_line(exc)}"
            )
    try:
        cfg = TautConfig(timeouts=_prune_timeouts(raw_timeouts), capacity=capacity_cfg)
    except Exception:  # pragma: no cover - pruning leaves only valid leaves
        cfg = TautConfig(capacity=capacity_cfg)
    for message in _misspelled(data, raw_timeouts, source):
        _warn(message)
    return raw_timeouts, cfg


def _misspelled(
    data: Mapping[Any, Any], timeouts: Mapping[Any, Any], source: ConfigSource
) -> list[str]:
    """Warnings for keys that look like misspellings of keys taut reads.

    Only near misses: other top-level keys belong to the application around the
    taut sections, and other timeout keys may be resolved by the application
    itself (``config check`` lists every key taut does not read)."""
    messages = []
    try:
        for key in data:
            near = nearest_key(key, SECTIONS) if isinstance(key, str) else None
            if near is not None and key not in SECTIONS:
                messages.append(
                    f"taut config: {source.where(key)}: unknown key, ignored; "
                    f"did you mean {near!r}?"
                )
        for path, near in unknown_timeout_keys(timeouts):
            if near is not None:
                dotted = "timeouts." + ".".join(path)
                messages.append(
                    f"taut config: {source.where(dotted)}: unknown key, ignored; "
                    f"did you mean {'timeouts.' + near!r}?"
                )
    except Exception:  # a hostile mapping: the warnings are a courtesy, never a failure
        pass
    return messages


def _capacity_errors(exc: BaseException) -> list[tuple[str, str]]:
    # Counted: fork-safe (see taut._lazy_import).
    ValidationError = _lazy_import.load_from("pydantic", "ValidationError")

    if not isinstance(exc, ValidationError):
        return []
    out = []
    for error in exc.errors():
        loc = ".".join(["capacity", *(str(p) for p in error["loc"])])
        if error["type"] == "extra_forbidden" and error["loc"]:
            known = CapacityConfig.model_fields
            near = nearest_key(str(error["loc"][-1]), known)
            hint = f"; did you mean {near!r}?" if near else f" (known: {', '.join(known)})"
            out.append((loc, f"unknown key{hint}"))
        elif error["type"] == "value_error" and not error["loc"]:
            out.append((loc, str(error.get("ctx", {}).get("error", error["msg"]))))
        else:
            out.append((loc, f"{error['msg']}, got {describe(error.get('input'))}"))
    return out


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _load_file(path: str, on_reload: Callable[[], None]) -> _FileState:
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
            _warn(f"taut config file {path!r} not found or unreadable; ignoring it")
            state = _FileState(stamp, {}, TautConfig())
        else:
            try:
                data = _parse_text(path, _read_text(path))
            except ConfigFileRefused as exc:
                _warn(f"taut config file {path!r} ignored: {exc}")
                state = _FileState(stamp, {}, TautConfig())
            except Exception as exc:  # unreadable or unparsable: never breaks the caller
                _warn(f"taut config file {path!r} is broken, ignoring it: {_one_line(exc)}")
                state = _FileState(stamp, {}, TautConfig())
            else:
                raw, cfg = _lenient(data, source)
                state = _FileState(stamp, raw, cfg)
        _files[path] = state
        on_reload()
        return state
