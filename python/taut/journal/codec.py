"""How a journal stores values and errors: ``json`` (safe) or ``pickle`` (trusted).

``json`` stores data, never code. A value must be JSON data (``dict`` with
``str`` keys, ``list``, ``str``, ``int``, ``float``, ``bool``, ``None``) or a
pydantic model, stored in its JSON form with its class name; anything else
(tuples, sets, bytes, datetimes, arbitrary objects) is refused when the call's
outcome is written, naming the call, rather than coming back as something else
on replay. A replayed model is rebuilt with ``model_validate`` only through a
class the program has already imported (nothing is imported because a row
names it); so a model is refused when written if its class cannot be found
again by its import path (one defined inside a function) or its own
``model_validate`` refuses its JSON form. An exception is stored as its
type name, message and traceback text and replays as
:class:`~taut.journal.errors.JournaledError` (a
:class:`~taut.journal.errors.JournaledTimeoutError`, also a ``TimeoutError``,
when the original was a ``TimeoutError``).

``pickle`` stores any value that pickles and loads back (loaded once when
it is written: one whose reducer fails on loading is refused then, naming
the call, not kept as a success no replay can read) and the exception
itself. Replaying it *unpickles* what the storage holds: whoever can write
the table can run code in every process that replays it. Use it only for storage as trusted as the
program's own files (a private SQLite file); never for a database shared
with other hosts or users unless every writer is trusted.

Each row records the codec that wrote it; a journal opened with ``json``
refuses to replay a ``pickle`` row instead of unpickling it.
"""

from __future__ import annotations

import json
import pickle
import sys
import traceback
from typing import Any, cast

from taut._checks import describe, shown
from taut.journal.errors import JournaledError, JournaledTimeoutError, JournalError

__all__ = ["CODECS", "Codec", "check_codec", "stand_in_for"]

_PICKLE_PROTOCOL = 5  # readable by every supported CPython (3.8+)
CODECS = ("json", "pickle")


def check_codec(codec: object) -> str:
    if not isinstance(codec, str) or codec not in CODECS:
        # describe(): a wrong codec may be any object, its __repr__ raising.
        raise ValueError(f"codec must be 'json' or 'pickle', got {describe(codec)}")
    return codec


def _type_name(obj: object) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


_SCALARS = (str, int, float, bool)
_MAX_DEPTH = 200  # deeper is almost surely a structure that refers to itself


def _json_problem(value: object, where: str) -> str | None:
    """Where ``value`` stops being JSON data, or None when it is JSON data.

    A quick walk without paths first (values are usually fine and sometimes
    large); the path to the problem is worked out only when there is one."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if item is None or kind in _SCALARS:
            continue
        if depth < _MAX_DEPTH and kind is list:
            stack.extend((v, depth + 1) for v in cast("list[Any]", item))
        elif depth < _MAX_DEPTH and kind is dict:
            mapping = cast("dict[Any, Any]", item)
            if not all(type(k) is str for k in mapping):
                return _locate(value, where, 0)
            stack.extend((v, depth + 1) for v in mapping.values())
        else:
            return _locate(value, where, 0)
    return None


def _locate(item: object, path: str, depth: int, outer: dict[int, str] | None = None) -> str | None:
    """The first place in ``item`` that is not JSON data, named by its path.

    ``outer`` maps each list or dict on the way down (by id) to its path, so a
    value that contains itself is named as such, at the first repetition,
    rather than by a path hundreds of levels long."""
    kind = type(item)
    if item is None or kind in _SCALARS:
        return None
    outer = {} if outer is None else outer
    if kind is list or kind is dict:
        if id(item) in outer:
            again = _shortened(outer[id(item)])
            return f"{_shortened(path)} refers back to {again}: the value contains itself"
        if depth >= _MAX_DEPTH:
            return f"{_shortened(path)} is nested more than {_MAX_DEPTH} levels deep"
        outer[id(item)] = path
    if kind is list:
        for i, v in enumerate(cast("list[Any]", item)):
            found = _locate(v, f"{path}[{i}]", depth + 1, outer)
            if found is not None:
                return found
    elif kind is dict:
        for key, v in cast("dict[Any, Any]", item).items():
            if type(key) is not str:
                # shown(): the key is the program's object, and its __repr__
                # may raise; that must be this call's JournalError, not an
                # exception of the key's own that names no call.
                return f"{_shortened(path)} has a {type(key).__name__} key {shown(key)}"
            found = _locate(v, f"{path}[{key!r}]", depth + 1, outer)
            if found is not None:
                return found
    else:
        return f"{_shortened(path)} is a {_type_name(item)}"
    del outer[id(item)]  # a list or dict met twice side by side is not a cycle
    return None


def _shortened(path: str, limit: int = 120) -> str:
    """A path fit for one line of an error message: its head and its tail."""
    if len(path) <= limit:
        return path
    return f"{path[: limit // 2]}...{path[-(limit // 2) + 3 :]}"


def _pydantic_model_type(value: object) -> type[Any] | None:
    pydantic = sys.modules.get("pydantic")
    base = getattr(pydantic, "BaseModel", None)
    if base is not None and isinstance(value, base):
        return type(value)
    return None


class Codec:
    """Encodes outcomes for one journal; ``name`` is stored with each row."""

    def __init__(self, name: str) -> None:
        self.name = check_codec(name)

    # ------------------------------------------------------------ writing
    def dump_value(self, position: int, call_id: str, value: object) -> bytes:
        if self.name == "pickle":
            try:
                data = pickle.dumps(value, protocol=_PICKLE_PROTOCOL)
            except Exception as exc:
                raise JournalError(
                    f"cannot journal the value of call {call_id!r} at position {position}: "
                    f"{type(value).__name__} is not picklable ({exc})"
                ) from exc
            # Loaded once now: a value that pickles but fails to load (a
            # reducer that raises) would otherwise be kept as a success that
            # every replay then fails on.
            try:
                pickle.loads(data)
            except Exception as exc:
                raise JournalError(
                    f"cannot journal the value of call {call_id!r} at position {position}: "
                    f"{type(value).__name__} pickles but does not unpickle, so a replay could "
                    f"not rebuild it ({type(exc).__name__}: {exc})"
                ) from exc
            return data
        model = _pydantic_model_type(value)
        if model is not None:
            try:
                data = value.model_dump(mode="json")  # type: ignore[attr-defined]
            except Exception as exc:
                raise JournalError(
                    f"cannot journal the value of call {call_id!r} at position {position} "
                    f"with the json codec: {model.__qualname__}.model_dump(mode='json') "
                    f"failed: {exc}"
                ) from exc
            doc: dict[str, Any] = {"model": _model_name(model), "data": data}
        else:
            problem = _json_problem(value, "the value")
            if problem is not None:
                raise JournalError(
                    f"cannot journal the value of call {call_id!r} at position {position} "
                    f"with the json codec: {problem}; return JSON data (dict with str keys, "
                    f"list, str, int, float, bool, None) or a pydantic model, or open the "
                    f"journal with codec='pickle' (trusted storage only)"
                )
            doc = {"data": value}
        try:
            encoded = json.dumps(doc, separators=(",", ":")).encode()
        except (TypeError, ValueError, RecursionError) as exc:
            raise JournalError(
                f"cannot journal the value of call {call_id!r} at position {position} "
                f"with the json codec: {exc}"
            ) from exc
        if model is not None:
            _check_model_replays(model, encoded, position, call_id)
        return encoded

    def dump_error(self, error: BaseException | None) -> bytes | None:
        if error is None:
            return None
        if self.name == "pickle":
            return _pickle_error(error)
        doc: dict[str, Any] = {
            "type": _type_name(error),
            "message": _safe_str(error),
            "traceback": "".join(
                traceback.format_exception(type(error), error, error.__traceback__)
            ),
        }
        if isinstance(error, TimeoutError):
            # Its stand-in must still be caught by `except TimeoutError`.
            doc["timeout"] = True
        return json.dumps(doc, separators=(",", ":")).encode()

    # ------------------------------------------------------------ reading
    def load(
        self, stored_codec: str | None, position: int, call_id: str, value: Any, error: Any
    ) -> tuple[object, BaseException | None]:
        """Decode one row written with ``stored_codec`` (None: an old pickle row)."""
        stored = stored_codec or "pickle"
        if stored == "pickle" and self.name != "pickle":
            raise JournalError(
                f"call {call_id!r} at position {position} was journaled with the pickle "
                f"codec; this journal uses {self.name!r} and will not unpickle it (open it "
                f"with codec='pickle' only if you trust everyone who can write the storage)"
            )
        try:
            if stored == "pickle":
                py_value = pickle.loads(value) if value is not None else None
                py_error = pickle.loads(error) if error is not None else None
            else:
                py_value = _load_json_value(bytes(value)) if value is not None else None
                py_error = _load_json_error(bytes(error)) if error is not None else None
        except JournalError:
            raise
        except Exception as exc:
            raise JournalError(
                f"cannot replay call {call_id!r} at position {position}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return py_value, py_error


def _safe_str(error: BaseException) -> str:
    try:
        return str(error)
    except (Exception, SystemExit):
        # A SystemExit from the call's exception's own __str__ is part of the
        # outcome being stored, not a request to end the program (as
        # taut._checks.describe treats a __repr__ that raises it).
        return "<unprintable>"


def _pickle_error(error: BaseException) -> bytes:
    """Pickle ``error`` so that it also *unpickles* (exceptions with custom
    ``__init__`` signatures often do not); otherwise store a JournaledError."""
    try:
        data = pickle.dumps(error, protocol=_PICKLE_PROTOCOL)
        pickle.loads(data)
        return data
    except Exception:
        stand_in = stand_in_for(error)
        return pickle.dumps(stand_in, protocol=_PICKLE_PROTOCOL)


def _model_name(model: type[Any]) -> str:
    return f"{model.__module__}:{model.__qualname__}"


def _find_model(model_name: str) -> Any:
    """What ``model_name`` (``module:qualname``) names, or None."""
    module_name, _, qualname = model_name.partition(":")
    # Only a class the program has imported itself: a row never causes an import.
    target: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        target = getattr(target, part, None)
    return target


def _check_model_replays(model: type[Any], encoded: bytes, position: int, call_id: str) -> None:
    """Refuse, when the outcome is written, a model value that a replay
    could not rebuild: one whose class cannot be found again by its import
    path (defined inside a function, or replaced since), or whose JSON form
    its own ``model_validate`` refuses (a required field left out of dumps)."""
    where = (
        f"cannot journal the value of call {call_id!r} at position {position} with the json codec"
    )
    name = _model_name(model)
    if _find_model(name) is not model:
        raise JournalError(
            f"{where}: a replay could not find the pydantic model class {name} again by its "
            f"import path (a class defined inside a function, or a generic or replaced "
            f"one); define the model at module level, or open the journal with "
            f"codec='pickle' (trusted storage only)"
        )
    try:
        model.model_validate(json.loads(encoded)["data"])
    except Exception as exc:
        raise JournalError(
            f"{where}: {model.__qualname__}.model_validate refuses its own "
            f"model_dump(mode='json'), so a replay could not rebuild it: {exc}"
        ) from exc


def _load_json_value(data: bytes) -> object:
    doc = json.loads(data)
    model_name = doc.get("model")
    if model_name is None:
        return doc["data"]
    validate = getattr(_find_model(str(model_name)), "model_validate", None)
    if validate is None:
        raise JournalError(
            f"cannot rebuild pydantic model {model_name}: the class is not imported in "
            f"this process (a journal never imports code it names)"
        )
    return validate(doc["data"])


def _load_json_error(data: bytes) -> BaseException:
    doc = json.loads(data)
    kind = JournaledTimeoutError if doc.get("timeout") is True else JournaledError
    return kind(str(doc["type"]), str(doc["message"]), str(doc.get("traceback") or ""))


def stand_in_for(error: BaseException, *, timeout: bool = False) -> JournaledError:
    """A :class:`JournaledError` keeping ``error``'s type name, message and
    traceback text (a stand-in keeps its own); a :class:`JournaledTimeoutError`
    for a TimeoutError, or for anything when ``timeout`` is true."""
    timeout = timeout or isinstance(error, TimeoutError)
    if isinstance(error, JournaledError):
        if not timeout or isinstance(error, TimeoutError):
            return error
        name, message, text = error.original_type, error.message, error.traceback_text
    else:
        name, message = _type_name(error), _safe_str(error)
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return (JournaledTimeoutError if timeout else JournaledError)(name, message, text)
