"""``taut._named_tuple.NamedTuple`` builds, without ``typing``, the class that
``typing.NamedTuple`` builds from the same class body (``PoolStats`` is one)."""

from __future__ import annotations

import pickle
import typing

import pytest

from taut._named_tuple import NamedTuple


def build(base: typing.Any) -> typing.Any:
    class Point(base):  # type: ignore[misc, valid-type]
        """A point on a line, with a label."""

        x: int
        label: str = "origin"
        extra: tuple[int, ...] = ()

        def twice(self) -> int:
            return int(self.x) * 2

        @property
        def text(self) -> str:
            return f"{self.label}@{self.x}"

    return Point


THEIRS = build(typing.NamedTuple)
OURS = build(NamedTuple)


def what_users_see(cls: typing.Any) -> dict[str, object]:
    point = cls(3)
    return {
        "mro": [c.__name__ for c in cls.__mro__],
        "metaclass": type(cls),
        "doc": cls.__doc__,
        "field_doc": cls.x.__doc__,
        "fields": cls._fields,
        "defaults": cls._field_defaults,
        "new_defaults": cls.__new__.__defaults__,
        "match_args": getattr(cls, "__match_args__", None),  # 3.10+
        "slots": cls.__slots__,
        "names": cls.__name__,
        "qualname": cls.__qualname__,
        "module": cls.__module__,
        "repr": repr(point),
        "methods": (point.twice(), point.text),
        "tuple": (point == (3, "origin", ()), hash(point) == hash((3, "origin", ()))),
        "asdict": point._asdict(),
        "replace": repr(point._replace(x=4)),
        "make": repr(cls._make([5, "a", (1,)])),
        "hints": typing.get_type_hints(cls),
        "annotated": list(cls.__annotations__),
        "new_annotated": list(cls.__new__.__annotations__),
        # typing.NamedTuple adds __orig_bases__ (the class statement saw a
        # function as its base); ours has a class for a base.
        "dict": sorted(k for k in vars(cls) if k not in ("__orig_bases__", "__slotnames__")),
    }


def test_the_same_class_as_typing_named_tuple() -> None:
    assert what_users_see(OURS) == what_users_see(THEIRS)
    # The one difference: typing wraps the (string) annotations in ForwardRefs.
    assert OURS.__annotations__ == {"x": "int", "label": "str", "extra": "tuple[int, ...]"}


class Pickled(NamedTuple):
    number: int
    name: str = "one"


def test_pickled_by_name() -> None:
    for point in (Pickled(1), Pickled(2, "two")):
        again = pickle.loads(pickle.dumps(point))
        assert type(again) is Pickled and again == point


def test_a_field_without_a_default_after_one_with_a_default_is_refused() -> None:
    with pytest.raises(TypeError, match="Bad: field 'b' without a default follows a field"):

        class Bad(NamedTuple):
            a: int = 0
            b: int


def test_the_named_tuple_machinery_cannot_be_replaced() -> None:
    with pytest.raises(AttributeError, match="Bad: a NamedTuple class cannot set '_make'"):

        class Bad(NamedTuple):
            a: int

            @classmethod
            def _make(cls, iterable: object) -> None:
                raise NotImplementedError


def test_other_base_classes_and_no_fields_are_refused() -> None:
    with pytest.raises(TypeError, match="Mixed: a NamedTuple class has no other base class"):

        class Mixed(NamedTuple, int):  # type: ignore[misc]
            a: int

    with pytest.raises(TypeError, match="Empty: a NamedTuple class needs annotated fields"):

        class Empty(NamedTuple):
            pass
