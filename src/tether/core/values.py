"""Immutable values compared, hashed and shown by their fields: what a frozen dataclass is.

Written by hand because the values built on a door's way to the launch (the
request, the retention policy a run checks before it starts) must not load
``dataclasses``, which brings ``inspect`` (and ``ast``, ``dis``,
``tokenize``...) onto that path. A subclass names its fields in ``__slots__``,
sets them in ``__init__`` with :func:`object.__setattr__`, and gets equality
and hash by value, a ``Name(field=...)`` repr, pickling, and :meth:`replace`
(for :func:`dataclasses.replace`); assignment and deletion are refused.

A value with many fields, most of them optional, subclasses
:class:`DeclaredValue` instead and declares each field once, as an
annotation with its default, as in a dataclass: its field names, their
order, its keyword-only ``__init__`` and its defaults all come from that one
declaration, where a hand-written ``__slots__``, annotations, ``__init__``
and assignments would name every field four times, coupled by order alone.
Type checkers are told the same (``dataclass_transform``), so a constructor
call is checked field by field.
"""

from __future__ import annotations

# Built before the command is launched: no ``typing`` at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import ClassVar, Self, dataclass_transform
else:

    def dataclass_transform(**_options: object) -> object:
        """Only type checkers read it; ``typing`` is not loaded at run time (see the module)."""
        return lambda cls: cls


__all__ = ["DeclaredValue", "FrozenValue"]


class FrozenValue:
    """The base of an immutable value whose fields are its ``__slots__`` (see the module)."""

    __slots__ = ()

    def _names(self) -> tuple[str, ...]:
        names: tuple[str, ...] = self.__slots__
        return names

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._names())

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, FrozenValue)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._names())
        return f"{self.__class__.__qualname__}({shown})"

    def __getstate__(self) -> tuple[object, ...]:
        return self._values()

    def __setstate__(self, state: tuple[object, ...]) -> None:
        for name, value in zip(self._names(), state, strict=True):
            object.__setattr__(self, name, value)

    def as_dict(self) -> dict[str, object]:
        """The fields by name (as :func:`dataclasses.asdict` made for a dataclass, not deep)."""
        return dict(zip(self._names(), self._values(), strict=True))

    def replace(self, **changes: object) -> Self:
        """A copy with ``changes`` (as :func:`dataclasses.replace` made for a dataclass)."""
        values = self.as_dict()
        values.update(changes)
        return self.__class__(**values)


@dataclass_transform(kw_only_default=True, frozen_default=True)
class DeclaredValue(FrozenValue):
    """A :class:`FrozenValue` whose fields are its annotations, each with its default if any.

    Construction is by keyword only; a field without a default must be given,
    and a name that is no field is refused, both with :class:`TypeError` (as
    a dataclass's ``__init__`` would). A default that is a ``dict`` is copied
    for each value (a dataclass's ``default_factory=dict``), so no two values
    share one. The fields are not slots, which must be named before the class
    exists: the values keep them in a ``__dict__``, still read-only.
    """

    #: The fields, in the order they were declared (and repr shows them).
    _fields: ClassVar[tuple[str, ...]] = ()
    #: The fields that have a default, and that default.
    _defaults: ClassVar[dict[str, object]] = {}

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        # Strings (every module has ``from __future__ import annotations``), never evaluated.
        declared = cls.__annotations__
        cls._fields = tuple(name for name, kind in declared.items() if "ClassVar" not in kind)
        cls._defaults = {name: getattr(cls, name) for name in cls._fields if hasattr(cls, name)}

    def __init__(self, **values: object) -> None:
        for name in self._fields:
            if name in values:
                value = values.pop(name)
            elif name in self._defaults:
                value = self._defaults[name]
                if isinstance(value, dict):
                    value = dict(value)
            else:
                raise TypeError(f"{self.__class__.__qualname__}() needs the field {name!r}")
            object.__setattr__(self, name, value)
        if values:
            unknown = ", ".join(map(repr, values))
            raise TypeError(f"{self.__class__.__qualname__}() has no field {unknown}")

    def _names(self) -> tuple[str, ...]:
        return self._fields
