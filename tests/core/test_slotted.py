"""`iqstate.slotted`: the query path's constructors build what `__init__` builds, in C and in
Python alike, and refuse classes and names they cannot build safely."""

from __future__ import annotations

import abc
import enum
import gc
import importlib
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iqstate import KeyQuery, Position, PositionBound, QueryResult, StateQueryRequest
from iqstate.results import StateQueryResult, partition_results_of, success_of
from iqstate.slotted import python_slot_constructor, slot_constructor


def _compiled() -> Any:
    """`iqstate_speedups.slots`, or None where it is not built (it is optional: the Python
    twin is then tested alone)."""
    try:
        return importlib.import_module("iqstate_speedups.slots")
    except ImportError:
        return None


compiled = _compiled()

needs_compiled = pytest.mark.skipif(compiled is None, reason="iqstate_speedups.slots not built")

Maker = Callable[..., Callable[..., Any]]


def c_constructor(cls: type, names: tuple[str, ...], fixed: dict[str, Any] | None = None) -> Any:
    assert compiled is not None
    return compiled.constructor(cls, names, dict(fixed or {}))


MAKERS = [
    pytest.param(c_constructor, id="c", marks=needs_compiled),
    pytest.param(python_slot_constructor, id="python"),
]


class Pair:
    __slots__ = ("left", "right")

    def __init__(self, left: object, right: object) -> None:
        self.left = left
        self.right = right


class Tracked(Pair):
    """A subclass adding a slot: slots of the base are found through the MRO."""

    __slots__ = ("extra",)


class OwnNew:
    __slots__ = ("value",)

    def __new__(cls) -> OwnNew:
        return super().__new__(cls)


class Abstract(abc.ABC):
    __slots__ = ("value",)

    @abc.abstractmethod
    def run(self) -> None: ...


class WithDict:
    __slots__ = ("value", "__dict__")


class Evil(str):
    """A name whose hash runs Python code (it could change the names while they are read)."""

    def __hash__(self) -> int:
        return 0


class Borrowed:
    """A class attribute that is another class's slot."""

    __slots__ = ()
    value = Pair.__dict__["left"]


class WithProperty:
    __slots__ = ("value",)

    @property
    def computed(self) -> int:
        return 1


values = st.one_of(st.none(), st.integers(), st.text(), st.binary(), st.lists(st.integers()))


@pytest.mark.parametrize("make", MAKERS)
@given(left=values, right=values)
def test_an_instance_holds_the_values_given(make: Maker, left: object, right: object) -> None:
    built = make(Pair, ("left", "right"))(left, right)
    assert type(built) is Pair
    assert (built.left, built.right) == (left, right)
    assert not hasattr(built, "__dict__")


@pytest.mark.parametrize("make", MAKERS)
def test_fixed_slots_take_their_values_and_base_slots_are_found(make: Maker) -> None:
    built = make(Tracked, ("extra",), {"left": 1, "right": "r"})("e")
    assert (built.left, built.right, built.extra) == (1, "r", "e")
    assert gc.is_tracked(built), "an instance that can hold containers is tracked by the GC"


@pytest.mark.parametrize("make", MAKERS)
def test_values_outlive_the_constructor_and_are_released_with_the_instance(make: Maker) -> None:
    marker = object()
    before = sys.getrefcount(marker)
    constructor = make(Pair, ("left",), {"right": marker})
    built = [constructor(marker) for _ in range(100)]
    del constructor
    assert all(item.left is marker and item.right is marker for item in built)
    del built
    gc.collect()
    assert sys.getrefcount(marker) == before


@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize(
    ("cls", "names", "fixed", "message"),
    [
        (OwnNew, ("value",), {}, "not a plain class"),
        (Abstract, ("value",), {}, "not a plain class"),
        (Pair, ("middle",), {}, "has no slot 'middle'"),
        (WithProperty, ("computed",), {}, "has no slot 'computed'"),
        (Pair, ("left", "left"), {}, "named twice"),
        (Pair, ("left",), {"left": 1}, "named twice"),
        (WithDict, ("value",), {}, "not a plain class"),
        (Borrowed, ("value",), {}, "not a writable object slot|has no slot"),
    ],
)
def test_what_cannot_be_built_safely_is_refused_when_the_constructor_is_made(
    make: Maker, cls: type, names: tuple[str, ...], fixed: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        make(cls, names, fixed)


@pytest.mark.parametrize("make", MAKERS)
def test_a_call_with_the_wrong_number_of_values_names_the_class(make: Maker) -> None:
    constructor = make(Pair, ("left", "right"))
    with pytest.raises(TypeError, match="Pair takes 2 positional values"):
        constructor(1)
    with pytest.raises(TypeError, match="Pair takes 2 positional values"):
        constructor(1, 2, 3)
    with pytest.raises(TypeError, match="Pair takes no keyword values"):
        constructor(1, right=2)


@pytest.mark.parametrize("make", MAKERS)
def test_names_that_are_not_exact_strings_or_a_class_that_is_not_one_are_refused(
    make: Maker,
) -> None:
    with pytest.raises(TypeError, match="slot names are str"):
        make(Pair, (Evil("left"),))
    with pytest.raises(TypeError, match="slot names are str"):
        make(Pair, (), {Evil("left"): 1})
    with pytest.raises(TypeError, match="slot names are str"):
        make(Pair, (1,))
    with pytest.raises(TypeError, match="needs a class"):
        make(Pair(1, 2), ("left",))


@needs_compiled
def test_the_c_constructor_refuses_malformed_arguments() -> None:
    assert compiled is not None
    with pytest.raises(TypeError, match="tuple of slot names"):
        compiled.constructor(Pair, ["left"], {})
    with pytest.raises(TypeError, match="takes 3 arguments"):
        compiled.constructor(Pair, ("left",))


@needs_compiled
def test_slot_constructor_uses_the_compiled_one_where_it_is_built() -> None:
    assert type(slot_constructor(Pair, ("left", "right"))).__module__ == "iqstate_speedups.slots"


@given(value=values, position=st.sampled_from([None, Position.from_map({"t": {0: 3}})]))
def test_the_query_paths_results_equal_those_built_by_their_classes(
    value: object, position: Position | None
) -> None:
    fast, slow = success_of(value, position), QueryResult.for_result(value, position)
    assert (fast.result, fast.position, fast.is_success, fast.execution_info) == (
        slow.result,
        slow.position,
        slow.is_success,
        slow.execution_info,
    )
    mapping = {2: fast}
    gathered = partition_results_of(mapping)
    assert gathered.partition_results is mapping
    assert gathered.global_result is None
    assert repr(gathered) == repr(StateQueryResult({2: fast}))


class Color(enum.IntEnum):
    RED = 1


@given(key=st.text(min_size=1), partitions=st.frozensets(st.integers(0, 50), max_size=4))
def test_requests_built_by_the_options_equal_requests_built_field_by_field(
    key: str, partitions: frozenset[int]
) -> None:
    query: KeyQuery[str, str] = KeyQuery.with_key(key)
    assert query == KeyQuery(key)
    request = StateQueryRequest.in_store("s").with_query(query)
    assert request == StateQueryRequest("s", query, None, PositionBound.unbounded(), False, False)
    named = request.with_partitions(partitions).require_active().enable_execution_info()
    assert named == StateQueryRequest("s", query, partitions, PositionBound.unbounded(), True, True)
    assert named.with_all_partitions().is_all_partitions


@pytest.mark.parametrize("bad", [True, -1, "1", 1.0, None])
def test_with_partitions_still_refuses_what_is_not_a_partition(bad: object) -> None:
    request = StateQueryRequest.in_store("s").with_query(KeyQuery.with_key("k"))
    with pytest.raises(ValueError, match="partitions must be ints >= 0"):
        request.with_partitions([0, bad])  # type: ignore[list-item]


def test_with_partitions_takes_int_subclasses_other_than_bool() -> None:
    request = StateQueryRequest.in_store("s").with_query(KeyQuery.with_key("k"))
    assert request.with_partitions([Color.RED]).partitions == {1}


class NamedKeyQuery(KeyQuery[str, str]):
    """A subclass: `with_key` must build it through its own `__init__`."""

    __slots__ = ()


def test_with_key_refuses_none_and_builds_subclasses_as_themselves() -> None:
    with pytest.raises(ValueError, match="must not be None"):
        KeyQuery.with_key(None)
    built = NamedKeyQuery.with_key("k")
    assert type(built) is NamedKeyQuery
    assert (built.key, built.is_skip_cache) == ("k", False)
    with pytest.raises(AttributeError, match="immutable"):
        KeyQuery.with_key("k").key = "other"
