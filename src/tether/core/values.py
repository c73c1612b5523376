"""The one base class of tether's immutable values: each field declared once, as in a dataclass.

A subclass declares its fields as annotations with any defaults, and gets what
``@dataclass(frozen=True)`` gives (``kw_only=True`` too) and :meth:`~DeclaredValue.replace`.
Why not ``dataclasses``: docs/architecture.md, "The import budget".
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import ClassVar, Self, dataclass_transform
else:

    def dataclass_transform(**_options: object) -> object:
        return lambda cls: cls


__all__ = ["DeclaredValue"]


@dataclass_transform(frozen_default=True)
class DeclaredValue:
    """An immutable value whose fields are its annotations (see the module); a missing or
    unknown field is a :class:`TypeError`; a ``dict`` default is copied, never shared."""

    __slots__ = ()
    #: The fields in declared order (and as a set), their defaults, the defaults that are
    #: copied for each value, and how many fields may be given by position.
    _fields: ClassVar[tuple[str, ...]] = ()
    _names: ClassVar[frozenset[str]] = frozenset()
    _defaults: ClassVar[dict[str, object]] = {}
    _copied: ClassVar[dict[str, dict[object, object]]] = {}
    _positional: ClassVar[int] = 0

    def __init_subclass__(cls, *, kw_only: bool = False) -> None:
        super().__init_subclass__()
        # Strings (every module has ``from __future__ import annotations``), never evaluated.
        declared = cls.__annotations__
        own = tuple(name for name, kind in declared.items() if "ClassVar" not in kind)
        cls._fields = cls._fields + own
        cls._names = frozenset(cls._fields)
        defaults = {name: getattr(cls, name) for name in own if hasattr(cls, name)}
        cls._defaults = cls._defaults | defaults
        cls._copied = {name: v for name, v in cls._defaults.items() if isinstance(v, dict)}
        cls._positional = 0 if kw_only else len(cls._fields)

    def __init__(self, *args: object, **kwargs: object) -> None:
        if kwargs or not args or len(args) != self._positional:
            object.__setattr__(self, "__dict__", self._gather(args, kwargs))
        else:
            self.__dict__.update(zip(self._fields, args, strict=True))

    @classmethod
    def _gather(cls, args: tuple[object, ...], kwargs: dict[str, object]) -> dict[str, object]:
        if len(args) > cls._positional:
            raise TypeError(f"{cls.__qualname__}() takes {cls._positional} fields by position")
        values = cls._defaults | {name: dict(kept) for name, kept in cls._copied.items()}
        values.update(zip(cls._fields, args, strict=False))
        if kwargs:
            if not kwargs.keys().isdisjoint(cls._fields[: len(args)]):
                raise TypeError(f"{cls.__qualname__}() got a field twice")
            values.update(kwargs)
        if values.keys() != cls._names:
            missing = [name for name in cls._fields if name not in values]
            wrong = "needs the field" if missing else "has no field"
            names = missing or [name for name in values if name not in cls._names]
            raise TypeError(f"{cls.__qualname__}() {wrong} {', '.join(map(repr, names))}")
        return values

    def _values(self) -> tuple[object, ...]:
        return tuple(map(self.__dict__.__getitem__, self._fields))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.as_dict().items())
        return f"{self.__class__.__qualname__}({shown})"

    def __getstate__(self) -> tuple[object, ...]:
        return self._values()

    def __setstate__(self, state: tuple[object, ...]) -> None:
        object.__setattr__(self, "__dict__", dict(zip(self._fields, state, strict=True)))

    def as_dict(self) -> dict[str, object]:
        """The fields by name, in declared order (:func:`dataclasses.asdict`, not deep)."""
        return dict(zip(self._fields, self._values(), strict=True))

    def replace(self, **changes: object) -> Self:
        """A copy with ``changes`` (:func:`dataclasses.replace`)."""
        return self.__class__(**(self.__dict__ | changes))
