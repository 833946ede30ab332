"""Constructors of slotted value objects that skip `__init__`, for the query path.

A key lookup builds a `KeyQuery`, a `StateQueryRequest` twice, the partition's
`QueryResult` and the request's `StateQueryResult`; through `__init__` each is a Python
frame and a setter call per field. `slot_constructor(cls, names, fixed)` gives a callable
taking one value per slot of `names`, in order, that builds the instance as
`object.__new__(cls)` and the slots' own setters would, each slot of `fixed` set to its
value there: `iqstate_speedups.slots` in C where it is built (a request in 42 ns against
263 ns through `__init__`), the same steps in Python otherwise.

Callers pass values their checks have already accepted: nothing is validated per call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MemberDescriptorType
from typing import Any, TypeVar

T = TypeVar("T")


def slot_constructor(
    cls: type[T], names: tuple[str, ...], fixed: Mapping[str, Any] | None = None
) -> Callable[..., T]:
    """A callable building `cls` from one value per slot of `names`, the slots of `fixed`
    set to its values; `ValueError` when `cls` has its own `__new__`, a `__dict__` or is
    abstract, or a name is not one of its slots or is named twice; `TypeError` when `cls`
    is not a class or a name not a `str`."""
    try:
        from iqstate_speedups.slots import constructor
    except ImportError:
        return python_slot_constructor(cls, names, fixed)
    built: Callable[..., T] = constructor(cls, names, dict(fixed or {}))
    return built


def python_slot_constructor(
    cls: type[T], names: tuple[str, ...], fixed: Mapping[str, Any] | None = None
) -> Callable[..., T]:
    """`slot_constructor` without the C extension: the same checks and the same objects."""
    if not isinstance(cls, type):
        raise TypeError(f"constructor needs a class, not {type(cls).__name__}")
    plain = cls.__new__ is object.__new__ and not cls.__dictoffset__
    if not plain or getattr(cls, "__abstractmethods__", None):
        raise ValueError(
            f"{cls.__name__} is not a plain class (it has its own __new__, a __dict__ or is "
            "abstract)"
        )
    fixed = dict(fixed or {})
    every = (*names, *fixed)
    for name in every:
        if type(name) is not str:
            raise TypeError(f"slot names are str, not {type(name).__name__}")
    slots = [_slot(cls, name) for name in every]
    for index, name in enumerate(every):
        if slots[index] in slots[:index]:
            raise ValueError(f"slot {name!r} is named twice")
    setters = tuple(slot.__set__ for slot in slots[: len(names)])
    fixed_slots = slots[len(names) :]
    fixed_setters = tuple(zip((slot.__set__ for slot in fixed_slots), fixed.values(), strict=True))
    count = len(setters)
    new = object.__new__

    def construct(*values: Any, **keywords: Any) -> T:
        if keywords:
            raise TypeError(f"the constructor of {cls.__name__} takes no keyword values")
        if len(values) != count:
            raise TypeError(
                f"the constructor of {cls.__name__} takes {count} positional values "
                f"({len(values)} given)"
            )
        instance: T = new(cls)
        for setter, value in zip(setters, values, strict=True):
            setter(instance, value)
        for setter, value in fixed_setters:
            setter(instance, value)
        return instance

    return construct


def _slot(cls: type, name: str) -> MemberDescriptorType:
    """The member descriptor of `cls`'s slot `name`, as attribute lookup finds it."""
    for klass in cls.__mro__:
        if name in vars(klass):
            found = vars(klass)[name]
            if isinstance(found, MemberDescriptorType) and issubclass(cls, found.__objclass__):
                return found
            break
    raise ValueError(f"{cls.__name__} has no slot {name!r}")
