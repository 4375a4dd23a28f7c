"""What a journal raises, and the messages a run's lease is refused with."""

from __future__ import annotations

from taut.journal.lease import Lease

__all__ = [
    "JournalBusy",
    "JournalError",
    "JournaledError",
    "JournaledTimeoutError",
    "busy_message",
    "stale_message",
]


class JournalError(RuntimeError):
    """The journal could not be read or written (the call's outcome is not durable)."""


class JournalBusy(JournalError):
    """The run is leased by another live runner; retry once it has finished or
    its lease has run out."""


class JournaledError(Exception):
    """Stands in for a call's exception on replay when the exception itself was
    not stored (the ``json`` codec) or could not be pickled faithfully.

    ``original_type`` is the qualified name of the original exception type,
    ``message`` its ``str()`` and ``traceback_text`` the formatted traceback
    of the original failure ("" when unknown).
    """

    def __init__(self, original_type: str, message: str, traceback_text: str = "") -> None:
        super().__init__(original_type, message)
        self.original_type = original_type
        self.message = message
        self.traceback_text = traceback_text

    def __reduce__(self) -> tuple[type[JournaledError], tuple[str, str, str]]:
        return (JournaledError, (self.original_type, self.message, self.traceback_text))

    def __str__(self) -> str:
        return f"{self.original_type}: {self.message}"


class JournaledTimeoutError(JournaledError, TimeoutError):
    """A :class:`JournaledError` standing in for a :class:`TimeoutError` (a
    ``timeout`` outcome, or a call that raised a TimeoutError): replayed, it
    is still caught by ``except TimeoutError``, as the original was."""

    def __new__(cls, *args: object, **kwargs: object) -> JournaledTimeoutError:
        # OSError.__new__ would take (original_type, message) for (errno, strerror).
        return super().__new__(cls)

    def __init__(self, original_type: str, message: str, traceback_text: str = "") -> None:
        super().__init__(original_type, message, traceback_text)
        self.args = (original_type, message)  # OSError's __init__ left them empty

    def __reduce__(self) -> tuple[type[JournaledError], tuple[str, str, str]]:
        return (JournaledTimeoutError, (self.original_type, self.message, self.traceback_text))


def busy_message(run: str, where: str, owner: str, expires_in: float) -> str:
    return (
        f"run {run!r} of {where} is leased by another live runner ({owner}) for "
        f"{max(expires_in, 0.0):.1f} s more; wait for it to finish, or for its lease to "
        f"run out if it died"
    )


def stale_message(run: str, where: str, lease: Lease) -> str:
    return (
        f"this runner's lease on run {run!r} of {where} ({lease.describe()}) was taken "
        f"over by another runner after it ran out; the write is refused so the new "
        f"owner's state is not clobbered"
    )
