"""``typing.NamedTuple``'s class syntax, for the modules that ``import taut``
loads, without importing ``typing``.

``import taut`` means to cost what ``import concurrent.futures`` does, and
``typing`` (with what it imports that ``concurrent.futures`` does not) made
it a sixth slower. A module writes::

    TYPE_CHECKING = False
    if TYPE_CHECKING:
        from typing import NamedTuple
    else:
        from taut._named_tuple import NamedTuple

so type checkers see ``typing.NamedTuple`` and the run time gets the class
that it would have built: a ``collections.namedtuple`` (a direct subclass of
``tuple``) with the class body's fields, defaults, docstring and methods, and
its annotations in ``__annotations__``, which ``typing.get_type_hints``
resolves as it does for ``typing.NamedTuple``'s (which holds them as
``ForwardRef``s, this as the strings they are). The defining module uses
``from __future__ import annotations``, so that the class body holds its
annotations in an ``__annotations__`` dict on every Python version (from 3.14
on, PEP 649 evaluates them lazily otherwise); with no fields found, this
raises ``TypeError``. Not supported: named tuples without fields, generic ones
and the functional form (``NamedTuple("P", [...])``).
"""

from __future__ import annotations

import collections

__all__ = ["NamedTuple"]

# What a class body may not set: the named tuple's own machinery.
_RESERVED = frozenset(
    {
        "__new__",
        "__init__",
        "__slots__",
        "__getnewargs__",
        "_fields",
        "_field_defaults",
        "_make",
        "_replace",
        "_asdict",
    }
)
# Given to collections.namedtuple, or set from the fields, rather than copied.
_NOT_COPIED = frozenset({"__module__", "__annotations__"})


class _NamedTupleMeta(type):
    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, object]) -> type:
        if not bases:  # NamedTuple itself
            return super().__new__(mcs, name, bases, namespace)
        if bases != (NamedTuple,):
            raise TypeError(f"{name}: a NamedTuple class has no other base class, got {bases!r}")
        annotations = namespace.get("__annotations__")
        if not isinstance(annotations, dict) or not annotations:
            raise TypeError(
                f"{name}: a NamedTuple class needs annotated fields, in a module with "
                "`from __future__ import annotations`"
            )
        fields = list(annotations)
        defaults = []
        for field in fields:
            if field in namespace:
                defaults.append(namespace[field])
            elif defaults:
                raise TypeError(
                    f"{name}: field {field!r} without a default follows a field with one"
                )
        module = str(namespace["__module__"])
        # mypy reads a namedtuple() call as a type definition, which needs literals.
        cls: type = collections.namedtuple(name, fields, defaults=defaults, module=module)  # type: ignore[misc]
        cls.__annotations__ = cls.__new__.__annotations__ = dict(annotations)
        for key, value in namespace.items():
            if key in _RESERVED:
                raise AttributeError(f"{name}: a NamedTuple class cannot set {key!r}")
            if key not in _NOT_COPIED and key not in annotations:
                setattr(cls, key, value)
        return cls


class NamedTuple(metaclass=_NamedTupleMeta):
    """Base class of a named tuple written as a class (see the module's docstring)."""
