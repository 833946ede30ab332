"""PrefixScanQuery from its own distribution, answered by engines that do not know it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from iqstate_http import start_background
from iqstate_prefix_scan import PrefixScanQuery

from iqstate import Application, FailureReason, Serdes, StateQueryRequest, StateStoreContext
from iqstate.engines.memory import MemoryKeyValueStore
from iqstate.layers import build_key_value_chain
from iqstate.plugins import PluginRegistry, default_registry, make_plugin_manager

WORDS = {"spark": 3, "spam": 1, "sparrow": 2, "kafka": 5, "sp": 9}


def scan(app: Application, prefix: str) -> dict[str, int]:
    result = app.query(
        StateQueryRequest.in_store("words").with_query(PrefixScanQuery.with_prefix(prefix))
    )
    found: dict[str, int] = {}
    for partition_result in result.partition_results.values():
        assert partition_result.is_success, partition_result
        with partition_result.result as pairs:
            found.update(pairs)
    return found


@pytest.mark.parametrize("engine", ["memory", "rocksdb", "lmdb", "sqlite"])
@pytest.mark.parametrize("caching", [False, True])
def test_every_engine_answers_through_app_query(tmp_path: Path, engine: str, caching: bool) -> None:
    app = Application("prefix", tmp_path)
    app.key_value_store("words", 3, engine=engine, value_serde="int64", caching=caching)
    with app:
        with app.begin_batch(batch_id=1) as batch:
            batch.put_all("words", WORDS.items())
        assert scan(app, "spa") == {"spark": 3, "spam": 1, "sparrow": 2}
        assert scan(app, "sp") == {k: v for k, v in WORDS.items() if k.startswith("sp")}
        assert scan(app, "zzz") == {}


@pytest.mark.parametrize("engine", ["memory", "rocksdb", "lmdb"])
@pytest.mark.parametrize("key_serde", ["string", "bytes"])
def test_a_timestamped_store_answers_plain_values_and_other_types_refuse(
    tmp_path: Path, engine: str, key_serde: str
) -> None:
    """A timestamped store answers a prefix scan with its values (as its `RangeQuery`).
    It used to pass the typed query to the layers beneath, which scanned with a `str`
    prefix (a STORE_EXCEPTION) or answered the stored bytes, timestamp and all. Store types
    the plugin does not serve (versioned, window, session) answer UNKNOWN_QUERY_TYPE,
    naming what they do answer, not the query passed down to bytes."""
    app = Application("prefix", tmp_path)
    app.timestamped_key_value_store("prices", 2, engine=engine, key_serde=key_serde,
                                    value_serde="string")  # fmt: skip
    app.versioned_key_value_store("history", 2, 10_000, engine=engine, key_serde=key_serde)
    app.window_store("views", 2, 100, 1_000, engine=engine, key_serde=key_serde)
    app.session_store("visits", 2, 1_000, engine=engine, key_serde=key_serde)
    key = (lambda text: text) if key_serde == "string" else str.encode
    with app:
        with app.begin_batch(batch_id=1) as batch:
            for symbol, price in {"AAPL": "191.5", "AMZN": "180.0", "MSFT": "410.2"}.items():
                batch.put("prices", key(symbol), price, timestamp=5)
                batch.put("history", key(symbol), price, timestamp=5)
        found: dict[Any, str] = {}
        for answer in app.query(
            StateQueryRequest.in_store("prices").with_query(PrefixScanQuery(key("A")))
        ).partition_results.values():
            assert answer.is_success, answer
            with answer.result as pairs:
                found.update(pairs)
        assert found == {key("AAPL"): "191.5", key("AMZN"): "180.0"}
        for store in ("history", "views", "visits"):
            answers = app.query(
                StateQueryRequest.in_store(store).with_query(PrefixScanQuery(key("A")))
            ).partition_results.values()
            for answer in answers:
                assert answer.failure_reason is FailureReason.UNKNOWN_QUERY_TYPE, (store, answer)
                assert "It answers" in answer.failure_message
                assert "PrefixScanQuery" not in answer.failure_message.split("It answers")[1]


def test_caching_layer_merges_its_buffer() -> None:
    store = build_key_value_chain(
        MemoryKeyValueStore("words"), Serdes.string(), Serdes.int64(), caching=True
    )
    store.init(
        StateStoreContext(
            application_id="a",
            store_name="words",
            partition=0,
            query_handlers=default_registry().query_handlers,
        )
    )
    store.put_all(WORDS.items())
    store.commit({})
    store.put("spade", 7)
    store.delete("spam")
    result = store.query(PrefixScanQuery.with_prefix("spa"))
    assert list(result.result) == [("spade", 7), ("spark", 3), ("sparrow", 2)]


def test_without_the_plugin_the_query_is_unknown(tmp_path: Path) -> None:
    plugins = PluginRegistry.from_plugin_manager(make_plugin_manager(blocked=["prefix-scan"]))
    app = Application("prefix", tmp_path, plugins=plugins)
    app.key_value_store("words", 2)
    with app:
        result = app.query(
            StateQueryRequest.in_store("words").with_query(PrefixScanQuery.with_prefix("s"))
        )
        reasons = {r.failure_reason for r in result.partition_results.values()}
        assert reasons == {FailureReason.UNKNOWN_QUERY_TYPE}


def test_over_http_through_the_codec_hook(tmp_path: Path) -> None:
    app = Application("prefix", tmp_path)
    app.key_value_store("words", 2, value_serde="int64")
    with app:
        with app.begin_batch() as batch:
            batch.put_all("words", WORDS.items())
        server = start_background(app)
        try:
            body: dict[str, Any] = {
                "store": "words",
                "query": {"type": "prefix_scan", "prefix": "spa"},
            }
            answer = httpx.post(server.url + "/v1/query", json=body).json()
            pairs = sorted(tuple(p) for r in answer["partitions"].values() for p in r["value"])
            assert pairs == [("spam", 1), ("spark", 3), ("sparrow", 2)]
            bad = httpx.post(
                server.url + "/v1/query", json={"store": "words", "query": {"type": "prefix_scan"}}
            )
            assert bad.status_code == 400 and "prefix" in bad.json()["error"]["message"]
        finally:
            server.stop()
