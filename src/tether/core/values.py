"""Immutable values compared, hashed and shown by their fields: what a frozen dataclass is.

Written by hand because the values built on a door's way to the launch (the
request, the retention policy a run checks before it starts) must not load
``dataclasses``, which brings ``inspect`` (and ``ast``, ``dis``,
``tokenize``...) onto that path. A subclass names its fields in ``__slots__``,
sets them in ``__init__`` with :func:`object.__setattr__`, and gets equality
and hash by value, a ``Name(field=...)`` repr, pickling, and :meth:`replace`
(for :func:`dataclasses.replace`); assignment and deletion are refused.
"""

from __future__ import annotations

# Built before the command is launched: no ``typing`` at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Self

__all__ = ["FrozenValue"]


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
