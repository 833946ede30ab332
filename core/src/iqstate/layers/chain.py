"""Assemble a store chain: metered -> caching (optional) -> change-logging (optional) -> engine."""

from __future__ import annotations

from typing import TypeVar

from iqstate.layers.caching import DEFAULT_CACHE_ENTRIES, CachingKeyValueStore
from iqstate.layers.changelogging import ChangeLoggingKeyValueStore, ChangeLoggingWindowStore
from iqstate.layers.metered import MeteredKeyValueStore, MeteredWindowStore
from iqstate.serdes import Serde
from iqstate.store import KeyValueStore, WindowStore

K = TypeVar("K")
V = TypeVar("V")


def build_key_value_chain(
    engine_store: KeyValueStore[bytes, bytes],
    key_serde: Serde[K],
    value_serde: Serde[V],
    *,
    caching: bool | int = False,
    logging: bool = False,
) -> MeteredKeyValueStore[K, V]:
    """Wrap an engine's key-value store; `caching` may be the buffer size in entries."""
    store: KeyValueStore[bytes, bytes] = engine_store
    if logging:
        store = ChangeLoggingKeyValueStore(store)
    if caching:
        size = DEFAULT_CACHE_ENTRIES if caching is True else int(caching)
        store = CachingKeyValueStore(store, size)
    return MeteredKeyValueStore(store, key_serde, value_serde)


def build_window_chain(
    engine_store: WindowStore[bytes, bytes],
    key_serde: Serde[K],
    value_serde: Serde[V],
    *,
    logging: bool = False,
) -> MeteredWindowStore[K, V]:
    """Wrap an engine's window store (window stores have no caching layer)."""
    store: WindowStore[bytes, bytes] = engine_store
    if logging:
        store = ChangeLoggingWindowStore(store)
    return MeteredWindowStore(store, key_serde, value_serde)
