"""Timeout configuration: precedence, validation, warnings, caching, ``config check``."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import taut
from taut import config as cfgmod
from taut.config import (
    ConfigWarning,
    TautConfig,
    check_config_file,
    concurrent_batch_timeout,
    load_config,
    resolve_timeout,
    sequential_call_timeout,
    tool_workers,
)
from taut.config import files as config_files
from taut.config import models as config_models

ENV = "TAUT_TEST_TIMEOUT_S"
KEY = "tools.concurrent_batch"


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("TAUT_CONFIG", raising=False)
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv(cfgmod.CONCURRENT_BATCH_ENV, raising=False)
    config_files._files.clear()
    cfgmod._resolved.clear()
    yield
    config_files._files.clear()
    cfgmod._resolved.clear()


def _max() -> float:
    return float(taut._core.MAX_TIMEOUT)


class Recorder:
    def __init__(self) -> None:
        self.items: list[warnings.WarningMessage] = []

    @property
    def messages(self) -> list[str]:
        return [str(w.message) for w in self.items if issubclass(w.category, ConfigWarning)]


@pytest.fixture
def rec() -> Iterator[Recorder]:
    r = Recorder()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r.items = caught
        yield r


def nested(value: Any) -> dict[str, Any]:
    return {"timeouts": {"tools": {"concurrent_batch": value}}}


# --------------------------------------------------------------------------- precedence
def test_default_when_nothing_configured(rec: Recorder) -> None:
    assert resolve_timeout(KEY, default=420, env_var=ENV) == 420.0
    assert resolve_timeout(KEY, default=None, env_var=ENV) is None
    assert rec.messages == []


def test_config_beats_env_beats_default(monkeypatch: pytest.MonkeyPatch, rec: Recorder) -> None:
    monkeypatch.setenv(ENV, "30")
    assert resolve_timeout(KEY, default=420, env_var=ENV) == 30.0
    assert resolve_timeout(KEY, default=420, env_var=ENV, config=nested(5)) == 5.0
    assert resolve_timeout(KEY, default=420, env_var=ENV, config={}) == 30.0
    assert resolve_timeout(KEY, default=420, config=nested(7.5)) == 7.5
    assert rec.messages == []


def test_dotted_keys_walk_nested_maps_and_literal_keys() -> None:
    cfg = {"timeouts": {"a": {"b": {"c": 3}}, "x.y": 4, "top": 2}}
    assert resolve_timeout("a.b.c", default=1, config=cfg) == 3.0
    assert resolve_timeout("x.y", default=1, config=cfg) == 4.0
    assert resolve_timeout("top", default=1, config=cfg) == 2.0
    assert resolve_timeout("a.b.missing", default=1, config=cfg) == 1.0
    assert resolve_timeout("top.deeper", default=1, config=cfg) == 1.0


def test_zero_disables_in_config_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_timeout(KEY, default=420, config=nested(0)) is None
    assert resolve_timeout(KEY, default=420, config=nested(0.0)) is None
    monkeypatch.setenv(ENV, "0")
    assert resolve_timeout(KEY, default=420, env_var=ENV) is None
    monkeypatch.setenv(ENV, " 0.0 ")
    assert resolve_timeout(KEY, default=420, env_var=ENV) is None
    # 0 from config wins over a positive env value.
    monkeypatch.setenv(ENV, "30")
    assert resolve_timeout(KEY, default=420, env_var=ENV, config=nested(0)) is None


def test_null_and_empty_mean_not_set(monkeypatch: pytest.MonkeyPatch, rec: Recorder) -> None:
    monkeypatch.setenv(ENV, "12")
    assert resolve_timeout(KEY, default=420, env_var=ENV, config=nested(None)) == 12.0
    monkeypatch.setenv(ENV, "  ")
    assert resolve_timeout(KEY, default=420, env_var=ENV, config=nested(None)) == 420.0
    assert rec.messages == []


# --------------------------------------------------------------------------- invalid values
INVALID = [
    pytest.param(True, "True (bool)", id="bool"),
    pytest.param(False, "False (bool)", id="false"),
    pytest.param(float("nan"), "nan (float)", id="nan"),
    pytest.param(-1, "-1 (int)", id="negative"),
    pytest.param(-0.5, "-0.5 (float)", id="negative-float"),
    pytest.param("30", "'30' (str)", id="text"),
    pytest.param([1, 2], "[1, 2] (list)", id="list"),
    pytest.param({"a": 1}, "{'a': 1} (dict)", id="dict"),
    pytest.param(object(), "(object)", id="object"),
]


@pytest.mark.parametrize(("value", "shown"), INVALID)
def test_invalid_config_value_warns_once_and_falls_through_to_env(
    monkeypatch: pytest.MonkeyPatch, rec: Recorder, value: Any, shown: str
) -> None:
    monkeypatch.setenv(ENV, "33")
    cfg = {"timeouts": {"tools": {"concurrent_batch": value}}}
    if isinstance(value, dict):
        cfg = {"timeouts": {"tools": {"concurrent_batch": value}}}
    assert resolve_timeout(KEY, default=420, env_var=ENV, config=cfg) == 33.0
    assert len(rec.messages) == 1, rec.messages
    msg = rec.messages[0]
    assert "'tools.concurrent_batch'" in msg
    assert shown in msg
    assert "config mapping at timeouts.tools.concurrent_batch" in msg
    assert ENV in msg  # says what it falls back to


@pytest.mark.parametrize("text", ["abc", "nan", "-nan", "sNaN", "-5", "true", "[1]", "1s", "-inf"])
def test_invalid_env_value_warns_once_and_falls_through_to_default(
    monkeypatch: pytest.MonkeyPatch, rec: Recorder, text: str
) -> None:
    monkeypatch.setenv(ENV, text)
    assert resolve_timeout(KEY, default=420, env_var=ENV) == 420.0
    assert len(rec.messages) == 1, rec.messages
    assert f"environment variable {ENV}" in rec.messages[0]
    assert repr(text) in rec.messages[0]
    assert "'tools.concurrent_batch'" in rec.messages[0]


def test_invalid_config_and_env_give_two_warnings_then_default(
    monkeypatch: pytest.MonkeyPatch, rec: Recorder
) -> None:
    monkeypatch.setenv(ENV, "soon")
    assert resolve_timeout(KEY, default=9, env_var=ENV, config=nested(True)) == 9.0
    assert len(rec.messages) == 2


def test_warning_is_a_taut_config_warning() -> None:
    assert issubclass(taut.ConfigWarning, UserWarning)
    with pytest.warns(taut.ConfigWarning, match="tools.concurrent_batch"):
        resolve_timeout(KEY, default=1, config=nested("x"))


def test_bad_key_or_default_is_a_programming_error() -> None:
    with pytest.raises(TypeError, match="key must be"):
        resolve_timeout("", default=1)
    with pytest.raises(TypeError, match=r"default must be .* got True \(bool\)"):
        resolve_timeout(KEY, default=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"default must not be NaN, got nan"):
        resolve_timeout(KEY, default=float("nan"))
    with pytest.raises(TypeError, match="default must be"):
        resolve_timeout(KEY, default=[1])  # type: ignore[arg-type]
    # A memoised default=1 must not make default=True pass.
    assert resolve_timeout(KEY, default=1) == 1.0
    with pytest.raises(TypeError, match=r"got True \(bool\)"):
        resolve_timeout(KEY, default=True)  # type: ignore[arg-type]


def test_default_goes_through_the_timeout_gate() -> None:
    # It refused what every other timeout parameter takes (Decimal, Fraction,
    # timedelta) and negative values, with a TypeError.
    import datetime
    from decimal import Decimal
    from fractions import Fraction

    assert resolve_timeout(KEY, default=Decimal("5")) == 5.0  # type: ignore[arg-type]
    assert resolve_timeout(KEY, default=Fraction(1, 2)) == 0.5  # type: ignore[arg-type]
    assert resolve_timeout(KEY, default=datetime.timedelta(seconds=5)) == 5.0  # type: ignore[arg-type]
    assert resolve_timeout(KEY, default=-1) == 0.0
    assert resolve_timeout(KEY, default=10**400) == taut.MAX_TIMEOUT


def test_hostile_mapping_never_raises(rec: Recorder) -> None:
    class Hostile(dict):  # type: ignore[type-arg]
        def __contains__(self, key: object) -> bool:
            raise RuntimeError("boom")

    cfg = {"timeouts": Hostile(tools={"concurrent_batch": 1})}
    assert resolve_timeout(KEY, default=4, config=cfg) == 4.0
    assert len(rec.messages) == 1 and "boom" in rec.messages[0]


# --------------------------------------------------------------------------- clamping
def test_clamp_is_the_cores() -> None:
    assert config_models.clamp_timeout is taut._core.clamp_timeout


@pytest.mark.parametrize("value", [1e300, 10**400, 2**63, 10**12, 2**32 + 1])
def test_huge_config_values_clamp(value: Any, rec: Recorder) -> None:
    got = resolve_timeout(KEY, default=1, config=nested(value))
    assert got == _max()
    assert rec.messages == []


@pytest.mark.parametrize("value", [1e6 + 1, 30 * 86400, 100 * 365.25 * 86400])
def test_long_config_values_are_kept_exactly(value: Any, rec: Recorder) -> None:
    assert resolve_timeout(KEY, default=1, config=nested(value)) == value
    assert rec.messages == []


def test_env_value_below_the_float_range_is_expired_not_disabled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV, "1e-400")
    got = resolve_timeout(KEY, default=1, env_var=ENV)
    assert got is not None and 0 < got < 1e-300
    monkeypatch.setenv(ENV, "0")
    assert resolve_timeout(KEY, default=1, env_var=ENV) is None


@pytest.mark.parametrize(("text", "seconds"), [("PT5M", 300.0), (" P1DT2H ", 93600.0)])
def test_env_values_take_iso_durations_like_config_files(
    monkeypatch: pytest.MonkeyPatch, rec: Recorder, text: str, seconds: float
) -> None:
    monkeypatch.setenv(ENV, text)
    assert resolve_timeout(KEY, default=1, env_var=ENV) == seconds
    monkeypatch.setenv(ENV, "PT0S")
    assert resolve_timeout(KEY, default=1, env_var=ENV) is None
    monkeypatch.setenv(ENV, "P1M")  # a month has no fixed length: refused, default kept
    assert resolve_timeout(KEY, default=1, env_var=ENV) == 1.0
    assert len(rec.messages) == 1 and "years and months" in rec.messages[0]


@pytest.mark.parametrize("text", ["1e400", "99999999999999999999999999999", "1e300"])
def test_huge_env_values_clamp(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv(ENV, text)
    got = resolve_timeout(KEY, default=1, env_var=ENV)
    assert got == _max()


def test_infinity_means_no_timeout(monkeypatch: pytest.MonkeyPatch, rec: Recorder) -> None:
    assert resolve_timeout(KEY, default=1, config=nested(float("inf"))) is None
    monkeypatch.setenv(ENV, "inf")
    assert resolve_timeout(KEY, default=1, env_var=ENV) is None
    assert resolve_timeout(KEY, default=float("inf")) is None
    assert rec.messages == []


def test_clamped_value_is_usable_by_os_primitives() -> None:
    import threading

    got = resolve_timeout(KEY, default=1, config=nested(10**400))
    assert got is not None
    lock = threading.Lock()
    with pytest.raises(OverflowError):
        lock.acquire(timeout=1e300)  # what an unclamped value does
    assert lock.acquire(timeout=got)


def test_huge_default_clamps() -> None:
    assert resolve_timeout(KEY, default=1e308) == _max()
    assert resolve_timeout(KEY, default=10**400) == _max()


# --------------------------------------------------------------------------- files
def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_yaml_toml_json_files(tmp_path: Path) -> None:
    y = write(tmp_path / "c.yaml", "timeouts:\n  tools:\n    concurrent_batch: 11\n")
    t = write(tmp_path / "c.toml", "[timeouts.tools]\nconcurrent_batch = 12\n")
    j = write(tmp_path / "c.json", json.dumps(nested(13)))
    yml = write(tmp_path / "c.yml", "timeouts: {tools: {concurrent_batch: 14}}\n")
    assert resolve_timeout(KEY, default=1, config=y) == 11.0
    assert resolve_timeout(KEY, default=1, config=str(t)) == 12.0
    assert resolve_timeout(KEY, default=1, config=j) == 13.0
    assert resolve_timeout(KEY, default=1, config=yml) == 14.0


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("c.yaml", "timeouts:\n  tools:\n    concurrent_batch: {v}\n"),
        ("c.toml", "[timeouts.tools]\nconcurrent_batch = {v}\n"),
        ("c.json", '{{"timeouts": {{"tools": {{"concurrent_batch": {v}}}}}}}'),
    ],
)
def test_a_file_value_below_the_float_range_is_expired_not_disabled(
    tmp_path: Path, rec: Recorder, name: str, text: str
) -> None:
    """A parser turns 1.0e-400 into 0.0, which would disable the timeout."""
    tiny = write(tmp_path / name, text.format(v="1.0e-400"))
    got = resolve_timeout(KEY, default=1, config=str(tiny))
    assert got is not None and 0 < got < 1e-300
    negative = write(tmp_path / ("neg-" + name), text.format(v="-1.0e-400"))
    assert resolve_timeout(KEY, default=1, config=str(negative)) == 1.0
    assert len(rec.messages) == 1 and "negative" in rec.messages[0]
    zero = write(tmp_path / ("zero-" + name), text.format(v="0.0"))
    assert resolve_timeout(KEY, default=1, config=str(zero)) is None


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("c.yaml", "timeouts:\n  tools:\n    concurrent_batch: {v}\n"),
        ("c.toml", "[timeouts.tools]\nconcurrent_batch = {v}\n"),
        ("c.json", '{{"timeouts": {{"tools": {{"concurrent_batch": {v}}}}}}}'),
    ],
)
def test_a_file_value_above_the_float_range_clamps_like_the_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rec: Recorder, name: str, text: str
) -> None:
    """A parser turns 1.0e400 into inf, which means no timeout at all; the
    same text in the environment is a huge finite number, clamped."""
    huge = write(tmp_path / name, text.format(v="1e400"))
    assert resolve_timeout(KEY, default=1, config=str(huge)) == _max()
    monkeypatch.setenv(ENV, "1e400")
    assert resolve_timeout(KEY, default=1, env_var=ENV) == _max()
    negative = write(tmp_path / ("neg-" + name), text.format(v="-1e400"))
    assert resolve_timeout(KEY, default=1, config=str(negative)) == 1.0
    assert len(rec.messages) == 1 and "negative" in rec.messages[0]
    infinite = "inf" if name != "c.yaml" else ".inf"
    if name != "c.json":  # JSON has no infinity (Python's reader takes Infinity)
        endless = write(tmp_path / ("inf-" + name), text.format(v=infinite))
        assert resolve_timeout(KEY, default=1, config=str(endless)) is None


def test_yaml_is_loaded_safely(tmp_path: Path, rec: Recorder) -> None:
    evil = write(
        tmp_path / "evil.yaml",
        "timeouts: !!python/object/apply:os.system ['echo pwned > /dev/null']\n",
    )
    assert resolve_timeout(KEY, default=5, config=evil) == 5.0
    assert any("broken" in m for m in rec.messages)


def test_taut_config_env_var_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = write(tmp_path / "c.yaml", "timeouts:\n  tools:\n    concurrent_batch: 21\n")
    monkeypatch.setenv("TAUT_CONFIG", str(f))
    monkeypatch.setenv(cfgmod.CONCURRENT_BATCH_ENV, "99")
    assert concurrent_batch_timeout() == 21.0
    # An explicit config argument wins over $TAUT_CONFIG.
    assert concurrent_batch_timeout({"timeouts": {}}) == 99.0


def test_file_value_warning_names_path_and_key(tmp_path: Path, rec: Recorder) -> None:
    f = write(tmp_path / "c.yaml", "timeouts:\n  tools:\n    concurrent_batch: yes\n")
    assert resolve_timeout(KEY, default=4, config=f) == 4.0
    assert len(rec.messages) == 1
    assert f"{f} at timeouts.tools.concurrent_batch" in rec.messages[0]
    assert "True (bool)" in rec.messages[0]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("broken.yaml", "timeouts:\n  a: [1\n"),
        ("broken.toml", "[timeouts\nx = 1\n"),
        ("broken.json", "{"),
        ("list.yaml", "- 1\n- 2\n"),
        ("scalar.yaml", "42\n"),
        ("timeouts-list.yaml", "timeouts: [1, 2]\n"),
        ("binary.yaml", "\udcff"),
    ],
)
def test_broken_file_warns_and_falls_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rec: Recorder, name: str, text: str
) -> None:
    f = tmp_path / name
    f.write_bytes(text.encode("utf-8", "surrogateescape"))
    monkeypatch.setenv(ENV, "8")
    assert resolve_timeout(KEY, default=4, env_var=ENV, config=f) == 8.0
    assert len(rec.messages) == 1, rec.messages
    assert str(f) in rec.messages[0]


def test_missing_file_warns_and_falls_through(tmp_path: Path, rec: Recorder) -> None:
    missing = tmp_path / "nope.yaml"
    assert resolve_timeout(KEY, default=4, config=missing) == 4.0
    assert len(rec.messages) == 1 and "not found" in rec.messages[0]
    assert load_config(missing) == TautConfig()


def test_directory_as_config_warns(tmp_path: Path, rec: Recorder) -> None:
    assert resolve_timeout(KEY, default=4, config=tmp_path) == 4.0
    assert len(rec.messages) == 1


def test_non_mapping_config_object_warns(rec: Recorder) -> None:
    assert resolve_timeout(KEY, default=4, config=42) == 4.0  # type: ignore[arg-type]
    assert len(rec.messages) == 1


# --------------------------------------------------------------------------- caching
def test_cached_until_file_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parses = []
    real = config_files._parse_text

    def counting(path: str, text: str) -> Any:
        parses.append(path)
        return real(path, text)

    monkeypatch.setattr(config_files, "_parse_text", counting)
    f = write(tmp_path / "c.yaml", "timeouts: {tools: {concurrent_batch: 5}}\n")
    os.utime(f, ns=(1_000_000_000, 1_000_000_000))
    for _ in range(50):
        assert resolve_timeout(KEY, default=1, config=f) == 5.0
        assert resolve_timeout("other", default=2, config=f) == 2.0
    assert len(parses) == 1
    # Same size, different mtime: re-read.
    write(f, "timeouts: {tools: {concurrent_batch: 6}}\n")
    os.utime(f, ns=(2_000_000_000, 2_000_000_000))
    assert resolve_timeout(KEY, default=1, config=f) == 6.0
    assert len(parses) == 2
    # Same mtime, different size: re-read.
    write(f, "timeouts: {tools: {concurrent_batch: 77}}\n")
    os.utime(f, ns=(2_000_000_000, 2_000_000_000))
    assert resolve_timeout(KEY, default=1, config=f) == 77.0
    assert len(parses) == 3
    # Deleted: warns, falls through; recreated: read again.
    f.unlink()
    with pytest.warns(ConfigWarning):
        assert resolve_timeout(KEY, default=1, config=f) == 1.0
    write(f, "timeouts: {tools: {concurrent_batch: 3}}\n")
    assert resolve_timeout(KEY, default=1, config=f) == 3.0


def test_cached_resolution_follows_env_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "10")
    assert resolve_timeout(KEY, default=1, env_var=ENV) == 10.0
    monkeypatch.setenv(ENV, "20")
    assert resolve_timeout(KEY, default=1, env_var=ENV) == 20.0
    monkeypatch.delenv(ENV)
    assert resolve_timeout(KEY, default=1, env_var=ENV) == 1.0


def test_cached_resolution_warns_only_once(tmp_path: Path, rec: Recorder) -> None:
    f = write(tmp_path / "c.yaml", "timeouts: {tools: {concurrent_batch: nope}}\n")
    for _ in range(20):
        assert resolve_timeout(KEY, default=1, config=f) == 1.0
    assert len(rec.messages) == 1


def test_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(cfgmod._RESOLVED_MAX + 10):
        monkeypatch.setenv(ENV, str(i + 1))
        assert resolve_timeout(KEY, default=1, env_var=ENV) == float(i + 1)
    assert len(cfgmod._resolved) <= cfgmod._RESOLVED_MAX


# --------------------------------------------------------------------------- model
class _Hostile:
    """A key or value whose every text form raises SystemExit."""

    def __repr__(self) -> str:
        raise SystemExit("from __repr__")

    __str__ = __format__ = __repr__  # type: ignore[assignment]


def test_hostile_keys_and_values_in_a_timeouts_mapping_are_named_not_raised() -> None:
    # Before: the SystemExit of the value's __repr__ (or the key's __format__)
    # escaped from validation and ended the program.
    with pytest.raises(ValidationError) as info:
        TautConfig.model_validate({"timeouts": {"a": _Hostile(), _Hostile(): 1}})
    text = str(info.value)
    assert "timeouts.a: invalid timeout <unrepresentable> (_Hostile)" in text, text
    assert "timeouts.<unrepresentable>: keys must be text, got <unrepresentable> (_Hostile)" in text


def test_taut_config_model_validates_and_documents() -> None:
    cfg = TautConfig.model_validate(
        {"timeouts": {"tools": {"concurrent_batch": 3}}, "capacity": {"tool_workers": 4}, "x": 1}
    )
    assert cfg.capacity.tool_workers == 4
    assert resolve_timeout(KEY, default=1, config=cfg) == 3.0
    with pytest.raises(ValidationError) as info:
        TautConfig.model_validate({"timeouts": {"a": True, "b": {"c": -1}}})
    text = str(info.value)
    assert "timeouts.a" in text and "timeouts.b.c" in text
    with pytest.raises(ValidationError):
        TautConfig.model_validate({"capacity": {"tool_workers": -1}})
    with pytest.raises(ValidationError):
        TautConfig.model_validate({"capacity": {"tool_workers": True}})
    with pytest.raises(ValidationError):
        TautConfig.model_validate({"capacity": {"tool_wrokers": 2}})
    schema = TautConfig.model_json_schema()
    text = json.dumps(schema)
    assert "0 = no ceiling" in text and "0 disables" in text
    assert TautConfig().capacity.tool_workers == cfgmod.TOOL_WORKERS_DEFAULT == 32


def test_tool_workers_from_config(tmp_path: Path, rec: Recorder) -> None:
    assert tool_workers() == 32  # bounded by default
    assert tool_workers({"capacity": {"tool_workers": 0}}) == 0  # 0 = no ceiling
    assert tool_workers({"capacity": {"tool_workers": 3}}) == 3
    assert tool_workers({"capacity": {"tool-workers": 2}}) == 2
    f = write(tmp_path / "c.toml", "[capacity]\ntool_workers = 5\n")
    assert tool_workers(f) == 5
    assert rec.messages == []
    assert tool_workers({"capacity": {"tool_workers": "many"}}) == 32
    assert len(rec.messages) == 1 and "capacity.tool_workers" in rec.messages[0]


def test_load_config_is_lenient(rec: Recorder) -> None:
    cfg = load_config({"timeouts": {"a": True, "b": 2, "c": {"d": "x", "e": 3}}})
    assert cfg.timeouts == {"b": 2, "c": {"e": 3}}
    assert load_config({"timeouts": "nope"}).timeouts == {}
    assert load_config(None) == TautConfig()


# --------------------------------------------------------------------------- layer keys
def test_concurrent_batch_legacy_contract(monkeypatch: pytest.MonkeyPatch) -> None:
    assert concurrent_batch_timeout() == 420.0
    monkeypatch.setenv("TAUT_CONCURRENT_TOOL_TIMEOUT_S", "90")
    assert concurrent_batch_timeout() == 90.0
    monkeypatch.setenv("TAUT_CONCURRENT_TOOL_TIMEOUT_S", "0")
    assert concurrent_batch_timeout() is None
    assert concurrent_batch_timeout(nested(15)) == 15.0


def test_sequential_call_defaults_to_resolved_concurrent(monkeypatch: pytest.MonkeyPatch) -> None:
    assert sequential_call_timeout() == 420.0
    monkeypatch.setenv("TAUT_CONCURRENT_TOOL_TIMEOUT_S", "60")
    assert sequential_call_timeout() == 60.0
    assert sequential_call_timeout(nested(0)) is None
    both = {"timeouts": {"tools": {"concurrent_batch": 100, "sequential_call": 7}}}
    assert sequential_call_timeout(both) == 7.0


# --------------------------------------------------------------------------- junk never raises
JUNK = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=10)
    | st.binary(max_size=5)
    | st.just(object()),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


SPECIAL_ENV = st.sampled_from(
    ["sNaN", "-nan", "1e400", "-1e400", "inf", "-0", "0x10", "1_000", "\u0661", " 5 ", "Infinity"]
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=JUNK, env=st.none() | SPECIAL_ENV | st.text(max_size=12))
def test_resolve_never_raises_on_junk(value: Any, env: str | None) -> None:
    os.environ.pop(ENV, None)
    if env is not None and "\x00" not in env:
        os.environ[ENV] = env
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for cfg in (nested(value), {"timeouts": value}, value, {"timeouts": {"tools": value}}):
                got = resolve_timeout(KEY, default=42, env_var=ENV, config=cfg)
                assert got is None or (0 <= got <= _max() and not math.isnan(got))
                load_config(cfg if isinstance(cfg, dict) else None)
    finally:
        os.environ.pop(ENV, None)


@settings(max_examples=200)
@given(seconds=st.integers(min_value=1, max_value=10**500) | st.floats(min_value=1e-9))
def test_valid_numbers_resolve_to_clamped_floats(seconds: float) -> None:
    got = resolve_timeout(KEY, default=1, config=nested(seconds))
    if seconds == float("inf"):
        assert got is None
    else:
        assert got == float(min(seconds, _max()))


# --------------------------------------------------------------------------- config check
def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taut", *args], capture_output=True, text=True, timeout=60
    )


def test_config_check_reports_every_problem_with_location(tmp_path: Path) -> None:
    f = write(
        tmp_path / "c.yaml",
        "app: {other: 1}\n"
        "timeouts:\n"
        "  tools:\n"
        "    concurrent_batch: true\n"
        "    sequential_call: .nan\n"
        "  fine: 5\n"
        "  neg: -3\n"
        "capacity:\n"
        "  tool_workers: many\n",
    )
    problems = check_config_file(f)
    got = {(p.location, p.line) for p in problems}
    assert got == {
        ("timeouts.tools.concurrent_batch", 4),
        ("timeouts.tools.sequential_call", 5),
        ("timeouts.neg", 7),
        ("capacity.tool_workers", 9),
    }
    out = run_cli("config", "check", str(f))
    assert out.returncode == 1
    assert f"{f}:4: timeouts.tools.concurrent_batch: invalid timeout True (bool)" in out.stdout
    assert f"{f}:9: capacity.tool_workers" in out.stdout


def test_config_check_toml_lines(tmp_path: Path) -> None:
    f = write(
        tmp_path / "c.toml",
        "[timeouts.tools]\nconcurrent_batch = true\nsequential_call = 30\n\n"
        "[capacity]\ntool_workers = -1\n",
    )
    got = {(p.location, p.line) for p in check_config_file(f)}
    assert got == {("timeouts.tools.concurrent_batch", 2), ("capacity.tool_workers", 6)}


def test_config_check_parse_error_and_missing(tmp_path: Path) -> None:
    f = write(tmp_path / "b.toml", "[timeouts]\nx = 1\ny = \n")
    problems = check_config_file(f)
    assert len(problems) == 1 and problems[0].line == 3
    out = run_cli("config", "check", str(f), str(tmp_path / "missing.yaml"))
    assert out.returncode == 1
    assert "cannot parse" in out.stdout and "cannot read" in out.stdout


def test_config_check_ok(tmp_path: Path) -> None:
    f = write(
        tmp_path / "ok.yaml",
        "timeouts: {tools: {concurrent_batch: 0}}\ncapacity: {tool_workers: 3}\n",
    )
    assert check_config_file(f) == []
    out = run_cli("config", "check", str(f))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "OK" in out.stdout and "tool_workers=3" in out.stdout


def test_config_check_accepts_empty_sections(tmp_path: Path) -> None:
    # An empty `capacity:` (YAML null) is "not set", like an empty `timeouts:`;
    # the CLI crashed with a pydantic traceback on it.
    f = write(tmp_path / "empty.yaml", "capacity:\ntimeouts:\n  tools:\n    concurrent_batch: 0\n")
    assert check_config_file(f) == []
    assert load_config(f).capacity.tool_workers == 32
    out = run_cli("config", "check", str(f))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "tool_workers=32" in out.stdout
    assert "tools.concurrent_batch=no timeout" in out.stdout
    assert "tools.sequential_call=no timeout" in out.stdout


def test_config_schema_cli() -> None:
    out = run_cli("config", "schema")
    assert out.returncode == 0
    assert json.loads(out.stdout)["title"] == "TautConfig"


def test_example_config_is_valid() -> None:
    example = Path(__file__).parent.parent / "examples" / "taut.yaml"
    assert check_config_file(example) == []
    assert concurrent_batch_timeout(example) == 300.0
    assert sequential_call_timeout(example) == 120.0
    assert tool_workers(example) == 4


# --------------------------------------------------------------------------- hostile files
# Each case must be refused in well under half a second; the 10 s bound only
# limits how long a regression (a hang, an expanding alias) takes to fail.
HOSTILE_BOUND = pytest.mark.timeout(10)


def alias_bomb(levels: int = 8) -> str:
    """About 1 KB of YAML that expands to 9**levels leaves if aliases expand."""
    keys = [f"k{i}" for i in range(9)]
    lines = ["timeouts:", "  l0: &l0 {" + ", ".join(f"{k}: 1" for k in keys) + "}"]
    for d in range(1, levels + 1):
        lines.append(f"  l{d}: &l{d} {{" + ", ".join(f"{k}: *l{d - 1}" for k in keys) + "}")
    return "\n".join(lines) + "\n"


def assert_refused(path: Path, reason: str, rec: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    """Resolution warns once, naming the file and the reason, and falls back;
    ``config check`` reports one problem naming both."""
    monkeypatch.setenv("TAUT_CONFIG", str(path))
    assert resolve_timeout(KEY, default=7) == 7.0
    assert load_config() == TautConfig()
    assert len(rec.messages) == 1, rec.messages
    assert str(path) in rec.messages[0] and reason in rec.messages[0]
    problems = check_config_file(path)
    assert len(problems) == 1, problems
    assert str(path) in str(problems[0]) and reason in str(problems[0])


@HOSTILE_BOUND
@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("recursive.yaml", "timeouts: &t {tools: *t}\n"),
        ("bomb.yaml", alias_bomb()),
        ("merge.yaml", "base: &b {concurrent_batch: 5}\ntimeouts:\n  tools: {<<: *b}\n"),
    ],
)
def test_yaml_aliases_are_refused(
    tmp_path: Path, rec: Recorder, monkeypatch: pytest.MonkeyPatch, name: str, text: str
) -> None:
    f = write(tmp_path / name, text)
    assert len(text) < 1200
    assert_refused(f, "YAML aliases", rec, monkeypatch)


@HOSTILE_BOUND
def test_recursive_anchor_is_a_reported_problem_on_the_command_line(tmp_path: Path) -> None:
    f = write(tmp_path / "recursive.yaml", "timeouts: &t {tools: *t}\n")
    out = run_cli("config", "check", str(f))
    assert out.returncode == 1, out.stderr
    assert "YAML aliases" in out.stdout and str(f) in out.stdout
    assert "Traceback" not in out.stderr


def test_anchors_without_aliases_are_fine(tmp_path: Path, rec: Recorder) -> None:
    f = write(tmp_path / "anchor.yaml", "timeouts: &t {tools: {concurrent_batch: 9}}\n")
    assert resolve_timeout(KEY, default=7, config=f) == 9.0
    assert rec.messages == [] and check_config_file(f) == []


@HOSTILE_BOUND
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo (POSIX)")
def test_a_fifo_is_refused_without_blocking(
    tmp_path: Path, rec: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)  # no writer ever opens it: reading it would block for ever
    assert_refused(fifo, "FIFO", rec, monkeypatch)


@HOSTILE_BOUND
@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_device_is_refused(rec: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    assert_refused(Path("/dev/zero"), "character device", rec, monkeypatch)


@HOSTILE_BOUND
def test_a_directory_is_refused(
    tmp_path: Path, rec: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert_refused(tmp_path, "directory", rec, monkeypatch)


@HOSTILE_BOUND
def test_files_over_one_mib_are_refused(
    tmp_path: Path, rec: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert config_files.MAX_CONFIG_BYTES == 1 << 20
    body = "timeouts: {tools: {concurrent_batch: 9}}\n"
    padding = "#" * ((1 << 20) - len(body) - 1) + "\n"
    at_limit = write(tmp_path / "limit.yaml", body + padding)
    assert at_limit.stat().st_size == 1 << 20
    assert resolve_timeout(KEY, default=7, config=at_limit) == 9.0
    assert rec.messages == []
    big = write(tmp_path / "big.yaml", body + ("# padding\n" * (5 << 20)))  # 50 MiB
    assert_refused(big, "larger than 1048576 bytes", rec, monkeypatch)


@HOSTILE_BOUND
@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("deep.yaml", "timeouts:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 120))),
        ("deep.json", '{"timeouts": ' + "[" * 150 + "]" * 150 + "}"),
    ],
)
def test_deep_nesting_is_refused(
    tmp_path: Path, rec: Recorder, monkeypatch: pytest.MonkeyPatch, name: str, text: str
) -> None:
    assert_refused(write(tmp_path / name, text), "nested deeper than 100 levels", rec, monkeypatch)


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        (
            "twice.yaml",
            "timeouts:\n  tools:\n    concurrent_batch: 5\n    concurrent_batch: 9\n",
            "at line 4 is given already at line 3",
        ),
        (
            "flow.yaml",
            "timeouts: {tools: {concurrent_batch: 5, concurrent_batch: 9}}\n",
            "at line 1 is given already at line 1",
        ),
        (
            "twice.json",
            '{"timeouts": {"tools": {"concurrent_batch": 5, "concurrent_batch": 9}}}',
            "is given twice in one object",
        ),
    ],
)
def test_a_key_given_twice_is_refused_naming_the_key(
    tmp_path: Path,
    rec: Recorder,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    text: str,
    where: str,
) -> None:
    # Before: the last value (9) applied in silence, and config check said OK.
    # TOML refuses such a file already; YAML and JSON now do too.
    assert_refused(
        write(tmp_path / name, text), f"the key 'concurrent_batch' {where}", rec, monkeypatch
    )


def test_a_yaml_base_60_number_is_text_refused_naming_its_key(tmp_path: Path) -> None:
    # Before: YAML 1.1 read `1:30` as 90 and `1:30:00` as 5400 (minutes or
    # hours, as the writer meant?); YAML 1.2 reads them as text, as taut now.
    f = write(
        tmp_path / "c.yaml",
        "timeouts:\n  tools:\n    concurrent_batch: 1:30\n    sequential_call: 1:30:00.5\n"
        "capacity:\n  tool_workers: 1:00\n",
    )
    got = {(p.location, p.line) for p in check_config_file(f)}
    assert got == {
        ("timeouts.tools.concurrent_batch", 3),
        ("timeouts.tools.sequential_call", 4),
        ("capacity.tool_workers", 6),
    }
    out = run_cli("config", "check", str(f))
    assert f"{f}:3: timeouts.tools.concurrent_batch: invalid timeout '1:30' (str)" in out.stdout
    # Quoted or not, the same text; a plain number is still a number.
    assert (
        resolve_timeout(
            KEY,
            default=7,
            config=write(tmp_path / "n.yaml", "timeouts:\n  tools:\n    concurrent_batch: 1_000\n"),
        )
        == 1000.0
    )


def test_a_merge_key_is_no_key_given_twice(tmp_path: Path, rec: Recorder) -> None:
    # `<<:` merges keys in that the mapping's own keys override, by design.
    text = "timeouts:\n  <<: {tools: {concurrent_batch: 3}}\n  tools: {concurrent_batch: 4}\n"
    f = write(tmp_path / "merge.yaml", text)
    assert resolve_timeout(KEY, default=7, config=f) == 4.0
    assert rec.messages == [] and check_config_file(f) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "timeouts:\n  <<: {tools: 3, tools: 4}\n",
            "the key 'tools' at line 2 is given already at line 2",
        ),
        (
            "timeouts:\n  <<: [{tools: 3}, {http: 1, http: 2}]\n",
            "the key 'http' at line 2 is given already at line 2",
        ),
        (
            "timeouts:\n  <<: {tools: 3}\n  <<: {tools: 4}\n",
            "the merge key '<<' at line 3 is given already at line 2",
        ),
        (
            # YAML says the first of the list wins, PyYAML takes the last.
            "timeouts:\n  <<: [{tools: 3},\n      {tools: 4}]\n",
            "the key 'tools' at line 3 is given already at line 2",
        ),
    ],
    ids=["merged-mapping", "merged-list", "merge-key-twice", "two-merged-mappings"],
)
def test_a_key_given_twice_inside_a_merge_is_refused(
    tmp_path: Path, rec: Recorder, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    # Before: PyYAML flattened the merged mapping into the outer one without
    # constructing it, so its repeats escaped the check (the last applied).
    assert_refused(write(tmp_path / "merge.yaml", text), message, rec, monkeypatch)


def test_mappings_merged_as_a_list_with_distinct_keys_all_apply(
    tmp_path: Path, rec: Recorder
) -> None:
    text = "timeouts:\n  <<: [{tools: {concurrent_batch: 3}}, {http: 2}]\n  http: 5\n"
    f = write(tmp_path / "merge.yaml", text)
    assert resolve_timeout(KEY, default=7, config=f) == 3.0
    assert resolve_timeout("http", default=7, config=f) == 5.0  # its own key wins
    assert rec.messages == [] and check_config_file(f) == []


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("bom.json", '{"timeouts": {"tools": {"concurrent_batch": 5}}}'),
        ("bom.toml", "[timeouts.tools]\nconcurrent_batch = 5\n"),
        ("bom.yaml", "timeouts:\n  tools:\n    concurrent_batch: 5\n"),
    ],
)
def test_a_file_that_starts_with_a_utf8_bom_is_read(
    tmp_path: Path, rec: Recorder, name: str, text: str
) -> None:
    # Windows editors write one; before, JSON and TOML said "cannot parse".
    f = tmp_path / name
    f.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    assert check_config_file(f, include_warnings=True) == []
    assert resolve_timeout(KEY, default=7, config=f) == 5.0
    assert rec.messages == []


def test_two_spellings_of_one_key_are_refused_naming_both(tmp_path: Path, rec: Recorder) -> None:
    # Before: "capacity.tool-workers: unknown key; did you mean 'tool_workers'?",
    # of a key taut reads, while the other spelling's value went unmentioned.
    f = write(tmp_path / "both.yaml", "capacity:\n  tool-workers: 4\n  tool_workers: 8\n")
    both = "'tool_workers' and 'tool-workers' are spellings of one key"
    [problem] = check_config_file(f, include_warnings=True)
    assert problem.location == "capacity" and both in problem.message
    assert tool_workers(f) == cfgmod.TOOL_WORKERS_DEFAULT
    assert len(rec.messages) == 1 and both in rec.messages[0] and str(f) in rec.messages[0]


@HOSTILE_BOUND
def test_a_yaml_syntax_error_names_the_file(
    tmp_path: Path, rec: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = write(tmp_path / "syntax.yaml", "timeouts:\n  tools: [1, 2\n")
    monkeypatch.setenv("TAUT_CONFIG", str(f))
    assert resolve_timeout(KEY, default=7) == 7.0
    assert len(rec.messages) == 1 and f'in "{f}", line' in rec.messages[0]
    assert "<unicode string>" not in rec.messages[0]
    problems = check_config_file(f)
    assert len(problems) == 1 and problems[0].line == 3
    assert f'in "{f}"' in problems[0].message and "<unicode string>" not in str(problems[0])


def test_the_c_yaml_loader_is_used_where_present() -> None:
    import yaml

    expected = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader
    assert config_files._yaml_loader() is expected


# --------------------------------------------------------------------------- ISO-8601 durations
@pytest.mark.parametrize(
    ("text", "seconds"),
    [("PT5M", 300.0), ("P1DT2H", 93600.0), ("PT0.5S", 0.5), ("PT1M30S", 90.0), (" PT5M ", 300.0)],
)
def test_iso_durations_are_accepted_in_timeouts(text: str, seconds: float, rec: Recorder) -> None:
    assert resolve_timeout(KEY, default=1, config=nested(text)) == seconds
    assert load_config(nested(text)).timeout_value(KEY) == text
    assert rec.messages == []


def test_iso_durations_mean_the_same_as_in_time_budget() -> None:
    for text in ("PT5M", "P1DT2H", "PT0.5S", "P1W"):
        budget = taut.PlanningConstraints(time_budget=text).time_budget_s
        assert resolve_timeout(KEY, default=1, config=nested(text)) == budget


def test_an_iso_zero_disables_like_0(rec: Recorder) -> None:
    assert resolve_timeout(KEY, default=1, config=nested("PT0S")) is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("PT0.0000001S", 1e-7),
        ("PT0.0000004S", 4e-7),
        ("PT0.0000000001H", 3.6e-7),
        ("P0.0000000000001W", 6.048e-8),
        ("PT0." + "0" * 400 + "1S", math.ulp(0.0)),
    ],
)
def test_a_tiny_iso_duration_never_becomes_the_0_that_disables(
    text: str, seconds: float, rec: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The ISO parser rounds to whole microseconds; a positive duration that
    # rounds to 0 keeps its exact (tiny, positive) value, like the same number
    # written in seconds, instead of turning the timeout off.
    assert resolve_timeout(KEY, default=1, config=nested(text)) == pytest.approx(seconds)
    f = write(tmp_path / "c.yaml", f"timeouts:\n  tools:\n    concurrent_batch: {text}\n")
    got = concurrent_batch_timeout(f)
    assert got is not None and got == pytest.approx(seconds) and got > 0
    assert check_config_file(f) == []
    monkeypatch.setenv(ENV, text)
    got = resolve_timeout(KEY, default=1, env_var=ENV)
    assert got is not None and got == pytest.approx(seconds) and got > 0
    assert rec.messages == []


def test_a_tiny_negative_iso_duration_is_refused_as_negative(rec: Recorder) -> None:
    assert resolve_timeout(KEY, default=7, config=nested("-PT0.0000001S")) == 7.0
    assert len(rec.messages) == 1 and "negative duration" in rec.messages[0]
    assert resolve_timeout(KEY, default=1, config=nested("-PT0S")) is None  # -0 is 0


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("P1M", "years and months have no fixed length"),
        ("P1Y", "years and months have no fixed length"),
        ("-PT5M", "negative duration"),
        ("PT", "not a valid ISO-8601 duration"),
        ("PT5X", "not a valid ISO-8601 duration"),
        ("PT99999999999999999999H", "beyond 999,999,999 days"),
        ("P1000000000D", "beyond 999,999,999 days"),
        ("5 minutes", "got text"),
    ],
)
def test_invalid_duration_text_is_rejected_with_a_reason(
    text: str, reason: str, rec: Recorder, tmp_path: Path
) -> None:
    assert resolve_timeout(KEY, default=7, config=nested(text)) == 7.0
    assert len(rec.messages) == 1 and reason in rec.messages[0], rec.messages
    assert "ISO-8601 duration such as PT5M" in rec.messages[0]
    f = write(tmp_path / "c.yaml", f"timeouts:\n  tools:\n    concurrent_batch: '{text}'\n")
    [problem] = check_config_file(f)
    assert problem.line == 3 and reason in problem.message


@pytest.mark.parametrize(
    "text", ["PT1H1H", "PT1S1H", "P1D1W", "P1DT1H1H", "P1DT", "PT1.5H30M", "pt5m", "PT\u0661S"]
)
def test_a_duration_with_a_unit_repeated_or_out_of_order_is_refused(
    text: str, rec: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the parser summed the parts (PT1H1H was two hours) in silence.
    reason = "each unit at most once, in the order W, D, T, H, M, S"
    assert resolve_timeout(KEY, default=7, config=nested(text)) == 7.0
    assert len(rec.messages) == 1 and repr(text) in rec.messages[0], rec.messages
    assert KEY in rec.messages[0] and reason in rec.messages[0]
    f = write(tmp_path / "c.yaml", f"timeouts:\n  tools:\n    concurrent_batch: {text}\n")
    [problem] = check_config_file(f)
    assert problem.location == "timeouts." + KEY and problem.line == 3
    assert repr(text) in problem.message and reason in problem.message
    monkeypatch.setenv(ENV, text)
    assert resolve_timeout(KEY, default=7, env_var=ENV) == 7.0


def test_an_exponent_without_a_dot_is_a_number_in_yaml_too(tmp_path: Path) -> None:
    # YAML 1.1 (PyYAML) alone reads 1e3 as the text "1e3"; quoted, it stays text.
    f = write(
        tmp_path / "c.yaml",
        "timeouts:\n  tools:\n    concurrent_batch: 1e3\n    sequential_call: 9E+1\n",
    )
    assert check_config_file(f, include_warnings=True) == []
    assert concurrent_batch_timeout(f) == 1000.0 and sequential_call_timeout(f) == 90.0
    quoted = write(tmp_path / "q.yaml", "timeouts:\n  tools:\n    concurrent_batch: '1e3'\n")
    [problem] = check_config_file(quoted)
    assert problem.line == 3 and "got text" in problem.message
    import yaml

    assert yaml.safe_load("x: 1e3") == {"x": "1e3"}  # PyYAML's own table is untouched


def test_iso_durations_in_a_file_and_in_config_check(tmp_path: Path) -> None:
    f = write(
        tmp_path / "c.yaml",
        "timeouts:\n  tools:\n    concurrent_batch: PT5M\n    sequential_call: PT1M30S\n",
    )
    assert check_config_file(f, include_warnings=True) == []
    assert concurrent_batch_timeout(f) == 300.0 and sequential_call_timeout(f) == 90.0
    out = run_cli("config", "check", str(f))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "tools.concurrent_batch=300 s [this file]" in out.stdout
    assert "tools.sequential_call=90 s [this file]" in out.stdout
    schema = json.dumps(TautConfig.model_json_schema())
    assert "ISO-8601" in schema


# --------------------------------------------------------------------------- unknown keys
MISSPELLED = (
    "app: {other: 1}\n"
    "timeout: 3\n"
    "timeouts:\n"
    "  tools:\n"
    "    concurent_batch: 5\n"
    "    sequential_call: 9\n"
    "  myapp:\n"
    "    http: 5\n"
    "capacity:\n"
    "  tool_workers: 4\n"
)


def test_config_check_warns_about_a_misspelled_key_with_the_nearest_one(tmp_path: Path) -> None:
    f = write(tmp_path / "c.yaml", MISSPELLED)
    assert check_config_file(f) == []  # warnings only on request: the file is valid
    found = check_config_file(f, include_warnings=True)
    assert all(p.severity == "warning" for p in found)
    by_location = {p.location: (p.line, p.message) for p in found}
    assert set(by_location) == {"timeout", "timeouts.tools.concurent_batch", "timeouts.myapp.http"}
    assert by_location["timeouts.tools.concurent_batch"] == (
        5,
        "unknown key, ignored; did you mean 'timeouts.tools.concurrent_batch'?",
    )
    assert by_location["timeout"] == (2, "unknown key, ignored; did you mean 'timeouts'?")
    assert "not a timeout taut reads" in by_location["timeouts.myapp.http"][1]
    # "app" is the application's own section: no warning about it
    out = run_cli("config", "check", str(f))
    assert out.returncode == 0, out.stdout + out.stderr
    assert (
        f"{f}:5: timeouts.tools.concurent_batch: warning: unknown key, ignored; "
        "did you mean 'timeouts.tools.concurrent_batch'?"
    ) in out.stdout
    assert f"{f}: OK with 3 warning(s)" in out.stdout
    assert "Traceback" not in out.stderr and "ConfigWarning" not in out.stderr
    strict = run_cli("config", "check", "--strict", str(f))
    assert strict.returncode == 1


def test_config_check_toml_warnings_have_lines(tmp_path: Path) -> None:
    f = write(tmp_path / "c.toml", "[timeouts.tools]\nconcurrent_bach = 3\n")
    [w] = check_config_file(f, include_warnings=True)
    assert (w.location, w.line, w.severity) == ("timeouts.tools.concurrent_bach", 2, "warning")
    assert "did you mean 'timeouts.tools.concurrent_batch'?" in w.message


def test_a_misspelled_capacity_key_is_an_error_naming_the_nearest_one(
    tmp_path: Path, rec: Recorder
) -> None:
    f = write(tmp_path / "c.yaml", "capacity:\n  tool_worker: 3\n")
    [problem] = check_config_file(f)
    assert (problem.location, problem.line) == ("capacity.tool_worker", 2)
    assert problem.message == "unknown key; did you mean 'tool_workers'?"
    assert tool_workers(f) == 32
    assert len(rec.messages) == 1 and "did you mean 'tool_workers'?" in rec.messages[0]


def test_resolution_warns_once_about_a_near_miss(tmp_path: Path, rec: Recorder) -> None:
    # A gateway never runs `config check`: the typo must not be silent there either.
    f = write(tmp_path / "c.yaml", MISSPELLED)
    for _ in range(3):
        assert concurrent_batch_timeout(f) == 420.0
    near = [m for m in rec.messages if "did you mean" in m]
    assert len(near) == 2, rec.messages  # `timeout` and `tools.concurent_batch`, once each
    assert any("timeouts.tools.concurent_batch" in m for m in near)
    assert not any("myapp" in m or "'app'" in m for m in rec.messages)  # the application's keys


def test_config_check_shows_where_each_value_comes_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = write(tmp_path / "c.yaml", "timeouts: {tools: {sequential_call: 30}}\n")
    out = run_cli("config", "check", str(f))
    assert "capacity.tool_workers=32 [default]" in out.stdout
    assert "tools.concurrent_batch=420 s [default]" in out.stdout
    assert "tools.sequential_call=30 s [this file]" in out.stdout
    assert "precedence: config file, then environment variable, then default" in out.stdout
    monkeypatch.setenv(cfgmod.CONCURRENT_BATCH_ENV, "60")
    out = run_cli("config", "check", str(f))
    assert "tools.concurrent_batch=60 s [$TAUT_CONCURRENT_TOOL_TIMEOUT_S]" in out.stdout
    g = write(tmp_path / "g.yaml", "timeouts: {tools: {concurrent_batch: 5}}\n")
    out = run_cli("config", "check", str(g))
    assert (
        "tools.concurrent_batch=5 s [this file, overrides $TAUT_CONCURRENT_TOOL_TIMEOUT_S]"
        in out.stdout
    )


def test_config_check_reports_an_ignored_environment_value_as_a_warning_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: a raw "<frozen runpy>:88: ConfigWarning: ..." on stderr, after
    # the OK line, and --strict passed.
    f = write(tmp_path / "c.yaml", "capacity: {tool_workers: 4}\n")
    monkeypatch.setenv(cfgmod.CONCURRENT_BATCH_ENV, "abc")
    out = run_cli("config", "check", str(f))
    assert out.returncode == 0 and "ConfigWarning" not in out.stderr, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("environment: warning: taut config: ignoring timeout")
    assert "'abc' (str) from environment variable TAUT_CONCURRENT_TOOL_TIMEOUT_S" in lines[0]
    assert lines[1].startswith(f"{f}: OK with 1 warning(s)")
    assert "tools.concurrent_batch=420 s [default]" in lines[1]
    assert run_cli("config", "check", "--strict", str(f)).returncode == 1


def test_config_check_passes_on_warnings_that_are_not_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only ConfigWarnings become report lines; another warning raised while
    # resolving (a library's DeprecationWarning, say) is shown as before,
    # not swallowed by the recording.
    from taut import cli

    real = cfgmod.resolve_timeout

    def noisy(key: str, *args: Any, **kwargs: Any) -> Any:
        if key == cfgmod.CONCURRENT_BATCH_KEY:  # the resolution that is recorded
            warnings.warn("from somewhere else", UserWarning, stacklevel=1)
        return real(key, *args, **kwargs)

    monkeypatch.setattr(cfgmod, "resolve_timeout", noisy)
    f = write(tmp_path / "c.yaml", "capacity: {tool_workers: 4}\n")
    with pytest.warns(UserWarning, match="from somewhere else"):
        effective, report_lines = cli._effective(str(f))
    assert report_lines == [] and "capacity.tool_workers=4 [this file]" in effective


def test_config_help_documents_the_precedence_and_defaults() -> None:
    from taut.cli import PRECEDENCE

    for args in (("config", "--help"), ("config", "check", "--help")):
        out = run_cli(*args)
        assert out.returncode == 0
        assert "1. the config file" in out.stdout and "$TAUT_CONFIG" in out.stdout
        assert "2. the key's environment variable" in out.stdout
        assert "3. the built-in default" in out.stdout
    assert f"tools.concurrent_batch: {cfgmod.CONCURRENT_BATCH_DEFAULT:g} s" in PRECEDENCE
    assert f"capacity.tool_workers: {cfgmod.TOOL_WORKERS_DEFAULT})" in PRECEDENCE


def test_config_warnings_point_at_the_callers_line_not_at_taut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rec: Recorder
) -> None:
    # Each reaches the warning through a different depth of taut's own code;
    # a warning pointing into taut tells the user nothing about which of
    # their calls read the bad value.
    bad = write(tmp_path / "c.yaml", "timeouts:\n  tools:\n    concurrent_batch: -5\n")
    monkeypatch.setenv(ENV, "soon")
    resolve_timeout(KEY, default=1, config=str(bad))
    resolve_timeout(KEY, default=1, env_var=ENV)
    resolve_timeout(KEY, default=1, config={"timeouts": 5})
    concurrent_batch_timeout(config=str(write(tmp_path / "d.yaml", "timeouts: [1]\n")))
    load_config(str(tmp_path / "missing.yaml"))
    files = {w.filename for w in rec.items if issubclass(w.category, ConfigWarning)}
    assert len(rec.messages) == 5
    assert files == {__file__}
