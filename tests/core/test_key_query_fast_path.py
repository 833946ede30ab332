"""The store chain's fused key lookup answers exactly as the general layered path."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iqstate import (
    FailureReason,
    KeyQuery,
    Position,
    PositionBound,
    QueryConfig,
    QueryResult,
    Serdes,
    StateStoreContext,
)
from iqstate.engines.memory import MemoryKeyValueStore
from iqstate.layers.chain import KeyValueStoreChain, key_value_chain


def context() -> StateStoreContext:
    return StateStoreContext(application_id="app", store_name="s", partition=0)


def chain(caching: bool = False, engine: MemoryKeyValueStore | None = None) -> KeyValueStoreChain:
    store = key_value_chain(
        engine or MemoryKeyValueStore("s"), Serdes.string(), Serdes.json(), caching=caching
    )
    store.init(context())
    return store


def is_fused(store: KeyValueStoreChain) -> bool:
    return store.key_lookup == store._fused_key_lookup


class OverridingEngine(MemoryKeyValueStore):
    """An engine with its own `query`: the fused path must not bypass it."""

    def query(self, query: Any, position_bound: Any = None, config: Any = None) -> Any:
        result: QueryResult[Any] = QueryResult.for_result(b'"from the override"')
        result.position = self.position
        return result


class PositionOverridingEngine(MemoryKeyValueStore):
    """An engine computing its own position: the fused path must ask it."""

    @property
    def position(self) -> Position:
        return Position.from_map({"own": {0: 1}})


def lookup(store: KeyValueStoreChain, key: str) -> QueryResult[Any]:
    return store.key_lookup(
        KeyQuery.with_key(key), key.encode(), PositionBound.unbounded(), QueryConfig.DEFAULT
    )


def test_the_default_chain_uses_the_fused_lookup() -> None:
    assert is_fused(chain())


def test_a_layer_or_an_engine_with_its_own_query_keeps_the_general_path() -> None:
    assert not is_fused(chain(caching=True))
    overriding = chain(engine=OverridingEngine("s"))
    assert not is_fused(overriding)
    assert lookup(overriding, "k").result == "from the override"
    own = chain(engine=PositionOverridingEngine("s"))
    assert not is_fused(own)
    assert lookup(own, "k").position == Position.from_map({"own": {0: 1}})


def describe(result: QueryResult[Any]) -> tuple[object, ...]:
    if result.is_failure:
        outcome: tuple[object, ...] = (result.failure_reason, result.failure_message)
    else:
        outcome = ("ok", result.result)
    return (*outcome, result.position, len(result.execution_info))


keys = st.one_of(st.sampled_from(["a", "b", "bad-json", "missing"]), st.integers(0, 3))
bounds = st.sampled_from(
    [
        PositionBound.unbounded(),
        PositionBound.at(Position.from_map({"in": {0: 1}})),
        PositionBound.at(Position.from_map({"in": {0: 99}})),
        PositionBound.at(Position.from_map({"other": {0: 1}})),
    ]
)


def filled(closed: bool) -> KeyValueStoreChain:
    store = chain()
    store.typed.put_all([("a", {"n": 1}), ("b", None)])
    engine: Any = store.engine
    engine.put(b"bad-json", b"{not json")
    store.update_position(Position.from_map({"in": {0: 5}}))
    if closed:
        engine.close()
    return store


@given(key=keys, bound=bounds, execution_info=st.booleans(), closed=st.booleans())
def test_fused_and_general_paths_give_the_same_answer(
    key: object, bound: PositionBound, execution_info: bool, closed: bool
) -> None:
    config = QueryConfig.WITH_EXECUTION_INFO if execution_info else QueryConfig.DEFAULT
    query: KeyQuery[Any, Any] = KeyQuery.with_key(key)
    general = filled(closed).query(query, bound, config)
    if isinstance(key, str):  # the runtime passes keys it could serialize, with their bytes
        fused = filled(closed)
        assert is_fused(fused)
        assert describe(fused.key_lookup(query, key.encode(), bound, config)) == describe(general)


def bytes_valued(closed: bool) -> KeyValueStoreChain:
    store = key_value_chain(MemoryKeyValueStore("s"), Serdes.string(), Serdes.bytes())
    store.init(context())
    store.typed.put_all([("a", b"\x00raw"), ("b", None)])
    store.update_position(Position.from_map({"in": {0: 5}}))
    if closed:
        engine: Any = store.engine
        engine.close()
    return store


@given(key=st.sampled_from(["a", "b", "c"]), bound=bounds, closed=st.booleans())
def test_bytes_values_are_answered_alike_without_decoding(
    key: str, bound: PositionBound, closed: bool
) -> None:
    query: KeyQuery[Any, Any] = KeyQuery.with_key(key)
    general = bytes_valued(closed).query(query, bound, QueryConfig.DEFAULT)
    fused = bytes_valued(closed)
    assert is_fused(fused)
    answer = fused.key_lookup(query, key.encode(), bound, QueryConfig.DEFAULT)
    assert describe(answer) == describe(general)


def string_valued() -> KeyValueStoreChain:
    """String values, one of them stored as bytes that are not UTF-8."""
    store = key_value_chain(MemoryKeyValueStore("s"), Serdes.string(), Serdes.string())
    store.init(context())
    store.typed.put_all([("a", "text")])
    engine: Any = store.engine
    engine.put(b"bad", b"\xff\xfe")
    store.update_position(Position.from_map({"in": {0: 5}}))
    return store


@pytest.mark.parametrize("key", ["a", "bad", "absent"])
def test_string_values_decoded_quickly_fail_as_the_layers_fail(key: str) -> None:
    query: KeyQuery[Any, Any] = KeyQuery.with_key(key)
    general, fused = string_valued(), string_valued()
    assert is_fused(fused)
    unbounded, config = PositionBound.unbounded(), QueryConfig.DEFAULT
    expected = describe(general.query(query, unbounded, config))
    assert describe(fused.key_lookup(query, key.encode(), unbounded, config)) == expected
    if key == "bad":  # the layers' failure, naming the serde and the bytes
        assert expected[0] is FailureReason.STORE_EXCEPTION
        assert "serde string cannot decode" in str(expected[1])
