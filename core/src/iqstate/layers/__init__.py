"""The wrapper layers of a store chain: metered -> caching -> change-logging -> engine."""

from iqstate.layers.caching import CachingKeyValueStore
from iqstate.layers.chain import build_key_value_chain, build_window_chain
from iqstate.layers.changelogging import ChangeLoggingKeyValueStore, ChangeLoggingWindowStore
from iqstate.layers.metered import MeteredKeyValueStore, MeteredWindowStore
from iqstate.layers.wrapped import WrappedStore

__all__ = [
    "CachingKeyValueStore",
    "ChangeLoggingKeyValueStore",
    "ChangeLoggingWindowStore",
    "MeteredKeyValueStore",
    "MeteredWindowStore",
    "WrappedStore",
    "build_key_value_chain",
    "build_window_chain",
]
