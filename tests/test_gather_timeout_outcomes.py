"""A ``timeout`` outcome unwraps to a TimeoutError however it was made: by a
gather, by hand, or replayed from a journal of either codec."""

from __future__ import annotations

import pickle
import threading
from pathlib import Path
from typing import Any

import pytest

import taut
from taut.gather import Outcome
from taut.journal import JournaledError, JournaledTimeoutError

pytestmark = pytest.mark.timeout(60)

LONG = 20.0


def _raised(outcome: Outcome) -> BaseException:
    with pytest.raises(BaseException) as err:
        outcome.unwrap()
    return err.value


def test_a_timeout_outcome_made_without_an_error_unwraps_to_a_timeout_error() -> None:
    error = _raised(Outcome("x", "timeout"))
    assert isinstance(error, taut.DeadlineExpired) and "'x'" in str(error)
    assert isinstance(Outcome("x", "timeout").error, TimeoutError)


def test_a_timeout_outcome_with_a_stored_error_keeps_its_text_as_a_timeout_error() -> None:
    stored = JournaledError("taut.deadline.DeadlineExpired", "deadline expired", "Traceback ...")
    error = _raised(Outcome("x", "timeout", error=stored))
    assert isinstance(error, TimeoutError) and isinstance(error, JournaledError)
    assert (error.original_type, error.message, error.traceback_text) == (
        "taut.deadline.DeadlineExpired",
        "deadline expired",
        "Traceback ...",
    )


def test_a_journaled_timeout_error_survives_pickling_and_is_no_os_error_number() -> None:
    error = pickle.loads(pickle.dumps(JournaledTimeoutError("a.B", "m", "tb")))
    assert type(error) is JournaledTimeoutError and isinstance(error, TimeoutError)
    assert (error.original_type, error.message, error.traceback_text) == ("a.B", "m", "tb")
    assert error.errno is None and str(error) == "a.B: m"
    assert taut.JournaledTimeoutError is JournaledTimeoutError


class OddTimeout(TimeoutError):
    """Does not unpickle (a required argument the default reduce drops)."""

    def __init__(self, what: str, seconds: float) -> None:
        super().__init__(f"{what} after {seconds}s")


@pytest.mark.parametrize("codec", ["json", "pickle"])
def test_replayed_timeouts_and_timeout_errors_are_still_timeout_errors(
    codec: str, tmp_path: Path
) -> None:
    go = threading.Event()

    def slow() -> int:
        go.wait(LONG)
        return 1

    def odd() -> None:
        raise OddTimeout("upstream", 3.0)

    def handles() -> list[Any]:
        return [taut.call(slow, call_id="slow"), taut.call(odd, call_id="odd")]

    path = str(tmp_path / f"{codec}.db")
    with taut.SqliteJournal(path, codec=codec) as journal:
        first = taut.gather(handles(), timeout=0.05, journal=journal)
    go.set()
    assert [o.status for o in first] == ["timeout", "error"]
    with taut.SqliteJournal(path, codec=codec) as journal:
        again = taut.gather(handles(), timeout=LONG, journal=journal)
    assert [(o.status, o.replayed) for o in again] == [("timeout", True), ("error", True)]
    timed_out, failed = _raised(again[0]), _raised(again[1])
    assert isinstance(timed_out, TimeoutError) and "gather deadline" in str(timed_out)
    assert isinstance(failed, TimeoutError) and "upstream after 3.0s" in str(failed)
