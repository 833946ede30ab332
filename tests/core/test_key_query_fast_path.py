"""The metered layer's fused `KeyQuery` path answers exactly as the general layered path."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from iqstate import (
    KeyQuery,
    Position,
    PositionBound,
    QueryConfig,
    QueryResult,
    Serdes,
    StateStoreContext,
)
from iqstate.engines.memory import MemoryKeyValueStore
from iqstate.layers import MeteredKeyValueStore, build_key_value_chain
from iqstate.layers.metered import metered_key_query, metered_key_query_on_engine


def context() -> StateStoreContext:
    return StateStoreContext(application_id="app", store_name="s", partition=0)


def chain(caching: bool = False) -> MeteredKeyValueStore[Any, Any]:
    store = build_key_value_chain(
        MemoryKeyValueStore("s"), Serdes.string(), Serdes.json(), caching=caching
    )
    store.init(context())
    return store


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


def test_the_default_chain_uses_the_fused_handler() -> None:
    assert chain()._handlers[KeyQuery] is metered_key_query_on_engine


def test_a_layer_or_an_engine_with_its_own_query_keeps_the_general_path() -> None:
    assert chain(caching=True)._handlers[KeyQuery] is metered_key_query
    store = build_key_value_chain(OverridingEngine("s"), Serdes.string(), Serdes.json())
    store.init(context())
    assert store._handlers[KeyQuery] is metered_key_query
    assert store.query(KeyQuery.with_key("k")).result == "from the override"
    own = build_key_value_chain(PositionOverridingEngine("s"), Serdes.string(), Serdes.json())
    own.init(context())
    assert own._handlers[KeyQuery] is metered_key_query
    assert own.query(KeyQuery.with_key("k")).position == Position.from_map({"own": {0: 1}})


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


def filled(fused: bool, closed: bool) -> MeteredKeyValueStore[Any, Any]:
    store = chain()
    if not fused:
        store._handlers[KeyQuery] = metered_key_query
        store._fused_key_query = False
    store.put_all([("a", {"n": 1}), ("b", None)])
    store.innermost().put(b"bad-json", b"{not json")  # type: ignore[attr-defined]
    store.update_position(Position.from_map({"in": {0: 5}}))
    if closed:
        store.innermost().close()
    return store


@given(key=keys, bound=bounds, execution_info=st.booleans(), closed=st.booleans())
def test_fused_and_general_paths_give_the_same_answer(
    key: object, bound: PositionBound, execution_info: bool, closed: bool
) -> None:
    config = QueryConfig.WITH_EXECUTION_INFO if execution_info else QueryConfig.DEFAULT
    query: KeyQuery[Any, Any] = KeyQuery.with_key(key)
    fused = filled(fused=True, closed=closed).query(query, bound, config)
    general = filled(fused=False, closed=closed).query(query, bound, config)
    assert describe(fused) == describe(general)
    if isinstance(key, str):  # the runtime passes keys it could serialize, with their bytes
        for with_fusion in (True, False):
            given_bytes = filled(fused=with_fusion, closed=closed).query_serialized_key(
                query, key.encode(), bound, config
            )
            assert describe(given_bytes) == describe(general)
