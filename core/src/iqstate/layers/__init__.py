"""The wrapper layers of a store chain: metered -> caching -> change-logging -> engine."""

from iqstate.layers.caching import CachingKeyValueStore
from iqstate.layers.chain import build_key_value_chain, build_window_chain
from iqstate.layers.changelogging import ChangeLoggingKeyValueStore, ChangeLoggingWindowStore
from iqstate.layers.facades import (
    KeyValueWriteHandle,
    ReadOnlyKeyValueView,
    ReadOnlyWindowView,
    WindowWriteHandle,
)
from iqstate.layers.metered import MeteredKeyValueStore, MeteredWindowStore
from iqstate.layers.wrapped import WrappedStore

__all__ = [
    "CachingKeyValueStore",
    "ChangeLoggingKeyValueStore",
    "ChangeLoggingWindowStore",
    "KeyValueWriteHandle",
    "MeteredKeyValueStore",
    "MeteredWindowStore",
    "ReadOnlyKeyValueView",
    "ReadOnlyWindowView",
    "WindowWriteHandle",
    "WrappedStore",
    "build_key_value_chain",
    "build_window_chain",
]
