"""Default plugin: the built-in serdes, the built-in queries of every engine store (by
store interface), and the query handlers of the built-in layers."""

from __future__ import annotations

from typing import Any

from iqstate.hookspecs import hookimpl
from iqstate.layers.caching import (
    CachingKeyValueStore,
    caching_key_query,
    caching_limited_range_query,
    caching_range_query,
)
from iqstate.layers.metered import (
    MeteredKeyValueStore,
    MeteredWindowStore,
    metered_key_query,
    metered_limited_range_query,
    metered_range_query,
    metered_window_key_query,
    metered_window_range_query,
)
from iqstate.layers.metered_types import (
    MeteredSessionStore,
    MeteredTimestampedKeyValueStore,
    MeteredVersionedStore,
    metered_limited_versioned_range_query,
    metered_multi_versioned_key_query,
    metered_versioned_key_query,
    metered_versioned_range_query,
    timestamped_plain_key_query,
    timestamped_plain_limited_range_query,
    timestamped_plain_range_query,
)
from iqstate.queries import (
    KeyQuery,
    LimitedRangeQuery,
    LimitedTimestampedRangeQuery,
    LimitedVersionedRangeQuery,
    MultiVersionedKeyQuery,
    RangeQuery,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    VersionedKeyQuery,
    VersionedRangeQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from iqstate.serdes import BUILTIN_SERDES
from iqstate.store import KeyValueStore, SessionStore, VersionedKeyValueStore, WindowStore
from iqstate.store_handlers import (
    key_value_handlers,
    session_handlers,
    versioned_handlers,
    window_handlers,
)


@hookimpl
def iqstate_register_query_handlers(register: Any) -> None:
    # Every engine store answers the built-in queries through its store interface.
    for query_type, handler in key_value_handlers().items():
        register(query_type, KeyValueStore, handler)
    for query_type, handler in window_handlers().items():
        register(query_type, WindowStore, handler)
    for query_type, handler in versioned_handlers().items():
        register(query_type, VersionedKeyValueStore, handler)
    for query_type, handler in session_handlers().items():
        register(query_type, SessionStore, handler)
    # The layers' own handlers.
    register(KeyQuery, MeteredKeyValueStore.kind, metered_key_query)
    register(RangeQuery, MeteredKeyValueStore.kind, metered_range_query)
    register(WindowKeyQuery, MeteredWindowStore.kind, metered_window_key_query)
    register(WindowRangeQuery, MeteredWindowStore.kind, metered_window_range_query)
    register(KeyQuery, CachingKeyValueStore.kind, caching_key_query)
    register(RangeQuery, CachingKeyValueStore.kind, caching_range_query)
    register(LimitedRangeQuery, MeteredKeyValueStore.kind, metered_limited_range_query)
    register(LimitedRangeQuery, CachingKeyValueStore.kind, caching_limited_range_query)
    timestamped = MeteredTimestampedKeyValueStore.kind
    register(TimestampedKeyQuery, timestamped, metered_key_query)
    register(TimestampedRangeQuery, timestamped, metered_range_query)
    register(KeyQuery, timestamped, timestamped_plain_key_query)
    register(RangeQuery, timestamped, timestamped_plain_range_query)
    register(LimitedRangeQuery, timestamped, timestamped_plain_limited_range_query)
    register(LimitedTimestampedRangeQuery, timestamped, metered_limited_range_query)
    versioned = MeteredVersionedStore.kind
    register(VersionedKeyQuery, versioned, metered_versioned_key_query)
    register(KeyQuery, versioned, metered_versioned_key_query)
    register(MultiVersionedKeyQuery, versioned, metered_multi_versioned_key_query)
    register(VersionedRangeQuery, versioned, metered_versioned_range_query)
    register(LimitedVersionedRangeQuery, versioned, metered_limited_versioned_range_query)
    register(WindowRangeQuery, MeteredSessionStore.kind, metered_window_range_query)


@hookimpl
def iqstate_register_serdes(register: Any) -> None:
    for name, serde in BUILTIN_SERDES.items():
        register(name, serde)
