"""Journal codecs: JSON by default on PostgreSQL (data, never code), pickle as an
explicit opt-in; the same choice on SQLite (pickle by default there)."""

from __future__ import annotations

import datetime
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _journals import Store, store_fixture
from pydantic import BaseModel, Field

import taut
from taut.journal import JournaledError, JournalError, PostgresJournal, SqliteJournal


class Weather(BaseModel):
    city: str
    celsius: float
    tags: list[str] = []


@pytest.fixture(params=["sqlite", "postgres"])
def json_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_fixture(request.param, tmp_path, codec="json")


@pytest.fixture(params=["sqlite", "postgres"])
def pickle_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_fixture(request.param, tmp_path, codec="pickle")


def test_defaults() -> None:
    import inspect

    assert inspect.signature(PostgresJournal).parameters["codec"].default == "json"
    assert inspect.signature(SqliteJournal).parameters["codec"].default == "pickle"


def test_json_round_trips_json_data_and_pydantic_models(json_store: Store) -> None:
    journal = json_store.open()
    data = {"a": [1, 2.5, None, True, "x"], "nested": {"k": []}, "nan": float("inf")}
    journal.reserve(["data", "model", "none"])
    journal.complete(0, "data", "ok", data, None)
    journal.complete(1, "model", "ok", Weather(city="Graz", celsius=3.5, tags=["cold"]), None)
    journal.complete(2, "none", "ok", None, None)
    got = json_store.rerun(journal).reserve(["data", "model", "none"])
    assert got[0] is not None and got[0].value == data
    assert got[1] is not None and got[1].value == Weather(city="Graz", celsius=3.5, tags=["cold"])
    assert isinstance(got[1].value, Weather)
    assert got[2] is not None and got[2].value is None


@pytest.mark.parametrize(
    ("value", "what"),
    [
        ((1, 2), "builtins.tuple"),
        ({1: "a"}, "int key"),
        ({"when": datetime.date(2026, 1, 1)}, "datetime.date"),
        ([b"raw"], "builtins.bytes"),
        ({"s": {1, 2}}, "builtins.set"),
    ],
)
def test_json_refuses_what_it_cannot_store_exactly_naming_the_call(
    json_store: Store, value: object, what: str
) -> None:
    journal = json_store.open()
    journal.reserve(["lookup_weather#0"])
    with pytest.raises(JournalError, match=r"call 'lookup_weather#0' at position 0") as info:
        journal.complete(0, "lookup_weather#0", "ok", value, None)
    assert what in str(info.value) and "codec='pickle'" in str(info.value)
    assert journal.records() == [(0, "lookup_weather#0", "pending")]  # nothing half-written


def test_json_errors_replay_as_journaled_errors_with_traceback(json_store: Store) -> None:
    journal = json_store.open()
    journal.reserve(["a"])
    try:
        raise KeyError("missing city")
    except KeyError as exc:
        journal.complete(0, "a", "error", None, exc)
    [record] = json_store.rerun(journal).reserve(["a"])
    assert record is not None and record.status == "error"
    error = record.error
    assert isinstance(error, JournaledError) and isinstance(error, Exception)
    assert error.original_type == "builtins.KeyError"
    assert error.message == "'missing city'"
    assert "Traceback" in error.traceback_text and "raise KeyError" in error.traceback_text
    assert str(error) == "builtins.KeyError: 'missing city'"


def test_json_journal_never_unpickles_a_pickle_row(json_store: Store) -> None:
    writer = json_store.open(codec="pickle")
    writer.reserve(["a"])
    writer.complete(0, "a", "ok", ("tuple", "value"), None)
    reader = json_store.rerun(writer)  # codec json (the store's)
    with pytest.raises(JournalError, match=r"pickle codec.*will not unpickle"):
        reader.reserve(["a"])


def test_json_model_class_is_never_imported_by_replay(json_store: Store) -> None:
    journal = json_store.open()
    journal.reserve(["a"])
    journal.complete(0, "a", "ok", Weather(city="x", celsius=1), None)
    journal.close()
    # A rerun in a process that has not imported the model's module: a clear
    # error, not an import of a module named by a database row.
    script = (
        "import sys\n"
        "from taut.journal import SqliteJournal, PostgresJournal, JournalError\n"
        f"kind, run, path = {json_store.spec()!r}.split(':', 2)\n"
        "import os\n"
        "j = (SqliteJournal(path, run=run, codec='json') if kind == 'sqlite' else\n"
        "     PostgresJournal(os.environ['TAUT_TEST_POSTGRES_DSN'], run=run))\n"
        "try:\n"
        "    j.reserve(['a'])\n"
        "except JournalError as exc:\n"
        "    print('refused', exc)\n"
        f"print('imported', {__name__!r} in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "refused cannot rebuild pydantic model" in out and "not imported" in out
    assert "imported False" in out


def test_pickle_opt_in_round_trips_any_picklable_value(pickle_store: Store) -> None:
    journal = pickle_store.open()
    journal.reserve(["a", "b"])
    journal.complete(0, "a", "ok", (1, {2, 3}, b"raw"), None)
    journal.complete(1, "b", "error", None, ValueError("bad"))
    got = pickle_store.rerun(journal).reserve(["a", "b"])
    assert got[0] is not None and got[0].value == (1, {2, 3}, b"raw")
    assert got[1] is not None and isinstance(got[1].error, ValueError)


def test_codec_is_validated(tmp_path: Path) -> None:
    for bad in ("yaml", "JSON", None, 1):
        with pytest.raises(ValueError, match="codec must be 'json' or 'pickle'"):
            SqliteJournal(tmp_path / "j.db", codec=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="codec must be 'json' or 'pickle'"):
            PostgresJournal("host=/nonexistent", codec=bad)  # type: ignore[arg-type]


def test_pickle_risk_is_documented() -> None:
    import taut.journal.codec as codec

    assert codec.__doc__ is not None and "can run code" in codec.__doc__
    assert "trusted" in (PostgresJournal.__doc__ or "")
    assert pickle.loads(pickle.dumps(JournaledError("a.B", "m"))).original_type == "a.B"
    assert taut.JournaledError is JournaledError


def test_json_refuses_a_value_that_contains_itself_without_hanging(tmp_path: Path) -> None:
    loop: list[object] = [1]
    loop.append({"again": loop})
    deep: list[object] = []
    for _ in range(300):
        deep = [deep]
    shared = [1, 2]
    journal = SqliteJournal(tmp_path / "j.db", codec="json")
    journal.reserve(["a", "b", "c", "d"])
    # Named at the first repetition, not by a path 200 levels long.
    itself = r"the value\[1\]\['again'\] refers back to the value: the value contains itself"
    with pytest.raises(JournalError, match=rf"call 'a'.*: {itself};"):
        journal.complete(0, "a", "ok", loop, None)
    with pytest.raises(JournalError, match=r"call 'b'.*nested more than 200 levels") as info:
        journal.complete(1, "b", "ok", deep, None)
    assert "[0][0]...[0][0]" in str(info.value) and len(str(info.value)) < 600
    big = {"rows": [{"i": i, "name": str(i)} for i in range(100_000)]}
    journal.complete(2, "c", "ok", big, None)  # large but plain: stored
    journal.complete(3, "d", "ok", [shared, shared], None)  # met twice, not a cycle
    journal.close()
    replayed = SqliteJournal(tmp_path / "j.db", codec="json").reserve(["a", "b", "c", "d"])
    assert replayed[2].value == big and replayed[3].value == [[1, 2], [1, 2]]


class Unserializable(BaseModel):
    model_config = {"arbitrary_types_allowed": True}
    lock: Any


def test_json_model_that_cannot_dump_is_refused_naming_the_call(tmp_path: Path) -> None:
    journal = SqliteJournal(tmp_path / "j.db", codec="json")
    journal.reserve(["a"])
    with pytest.raises(JournalError, match=r"call 'a' .*model_dump"):
        journal.complete(0, "a", "ok", Unserializable(lock=object()), None)


class _DoesNotUnpickle:
    """Pickles fine, but its reducer's call fails when the value is loaded."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (int, ("not a number",))


def test_pickle_refuses_at_record_time_a_value_that_does_not_unpickle(tmp_path: Path) -> None:
    journal = SqliteJournal(tmp_path / "j.db")
    journal.reserve(["a", "b"])
    with pytest.raises(
        JournalError, match=r"call 'a' at position 0.*does not unpickle.*ValueError"
    ):
        journal.complete(0, "a", "ok", _DoesNotUnpickle(), None)
    with pytest.raises(JournalError, match=r"call 'b' at position 1.*not picklable"):
        journal.complete(1, "b", "ok", lambda: 1, None)
    assert journal.records() == [(0, "a", "pending"), (1, "b", "pending")]
    journal.close()
    # Nothing was recorded that a rerun cannot replay: both calls run again.
    assert SqliteJournal(tmp_path / "j.db").reserve(["a", "b"]) == [None, None]


def _local_model() -> BaseModel:
    class Local(BaseModel):
        x: int

    return Local(x=1)


class WithExcludedField(BaseModel):
    city: str
    api_key: str = Field(exclude=True)  # required, yet left out of every dump


def test_json_refuses_at_record_time_a_model_that_replay_cannot_rebuild(tmp_path: Path) -> None:
    journal = SqliteJournal(tmp_path / "j.db", codec="json")
    journal.reserve(["local", "excluded"])
    with pytest.raises(
        JournalError, match=r"call 'local' at position 0.*_local_model.<locals>.Local.*import path"
    ):
        journal.complete(0, "local", "ok", _local_model(), None)
    with pytest.raises(
        JournalError, match=r"(?s)call 'excluded' at position 1.*WithExcludedField.*api_key"
    ):
        journal.complete(1, "excluded", "ok", WithExcludedField(city="Graz", api_key="k"), None)
    assert journal.records() == [(0, "local", "pending"), (1, "excluded", "pending")]


class _KeyWithBrokenRepr:
    """A dict key that is not a str and whose own ``__repr__`` fails (with
    an Exception, or a SystemExit): only the key's type can be shown."""

    def __init__(self, exit_: bool) -> None:
        self.exit_ = exit_

    def __repr__(self) -> str:
        if self.exit_:
            raise SystemExit("from the key's __repr__")
        raise RuntimeError("from the key's __repr__")


@pytest.mark.parametrize("exit_", [False, True], ids=["Exception", "SystemExit"])
def test_json_refuses_a_key_whose_repr_raises_naming_the_call(
    json_store: Store, exit_: bool
) -> None:
    journal = json_store.open()
    journal.reserve(["lookup#0"])
    # Before: the key's own RuntimeError (or SystemExit) left complete(),
    # naming no call; a gather raised it as it was. (Caught as BaseException
    # here so that a failure is reported without repr()ing the key.)
    try:
        journal.complete(0, "lookup#0", "ok", {_KeyWithBrokenRepr(exit_): 1}, None)
    except BaseException as exc:
        message = f"{type(exc).__name__}: {exc}"
    else:
        message = "nothing raised"
    assert message.startswith("JournalError: cannot journal the value of call 'lookup#0'")
    assert "_KeyWithBrokenRepr key <unrepresentable>" in message
    assert journal.records() == [(0, "lookup#0", "pending")]


class _ExitingStr(Exception):
    """A call's exception whose own ``__str__`` raises SystemExit."""

    def __str__(self) -> str:
        raise SystemExit(3)


def test_json_records_an_error_whose_str_raises_system_exit(json_store: Store) -> None:
    journal = json_store.open()
    journal.reserve(["a"])
    # Before: the SystemExit left complete() (a gather raised it, and a program
    # not catching it ended with status 3); the outcome was not recorded.
    journal.complete(0, "a", "error", None, _ExitingStr())
    [record] = json_store.rerun(journal).reserve(["a"])
    assert record is not None and record.status == "error"
    assert isinstance(record.error, JournaledError)
    assert record.error.original_type.endswith("_ExitingStr")
    assert record.error.message == "<unprintable>"


def test_a_gather_with_an_error_whose_str_raises_system_exit_records_every_call(
    tmp_path: Path,
) -> None:
    def fails() -> None:
        raise _ExitingStr()

    journal = SqliteJournal(tmp_path / "j.db", codec="json")
    outcomes = taut.gather(
        [taut.call(fails, call_id="fails"), taut.call(lambda: 5, call_id="five")],
        journal=journal,
    )
    assert [o.status for o in outcomes] == ["error", "ok"]
    assert journal.records() == [(0, "fails", "error"), (1, "five", "ok")]
    journal.close()
