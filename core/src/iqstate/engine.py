"""What an engine plugin registers: the `Engine` record naming its store factories.

The factories and `check_config` may be given as import paths (`"package.module:Class"`):
they are imported the first time a store of the engine is declared or built, so loading
the plugin at every application's start does not import the engine's library.
The base class for an engine's stores is `iqstate.engine_store.EngineStore`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from iqstate.lazy import lazy
from iqstate.store import KeyValueStore, SessionStore, VersionedKeyValueStore, WindowStore

KeyValueStoreFactory = Callable[[str], KeyValueStore[bytes, bytes]]
"""`factory(store_name)` -> an uninitialised key-value store over bytes."""
WindowStoreFactory = Callable[[str, int, int], WindowStore[bytes, bytes]]
"""`factory(store_name, window_size_ms, retention_ms)` -> an uninitialised window store."""
VersionedStoreFactory = Callable[[str, int], VersionedKeyValueStore[bytes, bytes]]
"""`factory(store_name, history_retention_ms)` -> an uninitialised versioned store."""
SessionStoreFactory = Callable[[str, int], SessionStore[bytes, bytes]]
"""`factory(store_name, retention_ms)` -> an uninitialised session store."""
ConfigCheck = Callable[[Mapping[str, Any], str], None]
"""`check_config(config, store_name)` raises `ValueError` naming a bad engine option."""


@dataclass(frozen=True, init=False)
class Engine:
    """A storage engine as a plugin registers it with `iqstate_register_engines`.

    `versioned_store` and `session_store` are optional: without them the engine's stores of
    those types are kept in its key-value stores (`iqstate.versioned_store`,
    `iqstate.session_store`), with their commits and crash guarantees; an engine gives its
    own factory for a layout of its own. Timestamped and global stores are key-value
    stores to an engine.

    `key_value_store`, `window_store` and `check_config` are callables or import paths
    (`"iqstate_rocksdb.store:RocksDBKeyValueStore"`), which become `iqstate.lazy.LazyObject`s
    imported on first use; an import that fails raises `PluginError` naming the plugin, the
    engine and the path. `check_config` runs when a store is declared, so a typo fails there
    and not at `start()`. `plugin` is set by the registry to the plugin that registered it.

    `key_sizes`: the shortest and longest key, in bytes, the engine's key-value store keeps
    (LMDB: 1 to 511); None when any. The window, session and versioned stores kept in its
    key-value stores lay keys out with up to 9, 21 and 9 bytes more, so theirs are that much
    shorter. A batch with a key outside is refused before anything is written, and a
    follower skips such a record (logged and counted) instead of failing on it for ever.
    """

    name: str
    key_value_store: KeyValueStoreFactory
    window_store: WindowStoreFactory | None = None
    versioned_store: VersionedStoreFactory | None = None
    session_store: SessionStoreFactory | None = None
    persistent: bool = False
    description: str = ""
    check_config: ConfigCheck | None = None
    plugin: str = dataclasses.field(default="", compare=False)
    key_sizes: tuple[int, int] | None = None

    def __init__(
        self,
        name: str,
        key_value_store: KeyValueStoreFactory | str,
        window_store: WindowStoreFactory | str | None = None,
        persistent: bool = False,
        description: str = "",
        check_config: ConfigCheck | str | None = None,
        plugin: str = "",
        versioned_store: VersionedStoreFactory | str | None = None,
        session_store: SessionStoreFactory | str | None = None,
        key_sizes: tuple[int, int] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"Engine: name must be a non-empty string, got {name!r}")
        if key_sizes is not None and not (
            isinstance(key_sizes, tuple)
            and len(key_sizes) == 2
            and all(isinstance(size, int) and not isinstance(size, bool) for size in key_sizes)
            and 0 <= key_sizes[0] <= key_sizes[1]
        ):
            raise TypeError(
                f"engine {name!r}: key_sizes must be (shortest, longest), two ints with "
                f"0 <= shortest <= longest, got {key_sizes!r}"
            )
        owner = f"plugin {plugin!r}, engine {name!r}" if plugin else f"engine {name!r}"
        for field, value, optional in (
            ("key_value_store", key_value_store, False),
            ("window_store", window_store, True),
            ("versioned_store", versioned_store, True),
            ("session_store", session_store, True),
            ("check_config", check_config, True),
        ):
            if not (isinstance(value, str) or callable(value) or (optional and value is None)):
                raise TypeError(
                    f"{owner}: {field} must be a callable or an import path "
                    f"'module:attribute', got {value!r}"
                )
            object.__setattr__(self, field, lazy(value, f"{owner}, {field}"))
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "persistent", persistent)
        object.__setattr__(self, "description", description)
        object.__setattr__(self, "plugin", plugin)
        object.__setattr__(self, "key_sizes", key_sizes)

    def registered_by(self, plugin: str) -> Engine:
        """This engine as `plugin` registered it: its import errors then name the plugin."""
        return self if self.plugin == plugin else dataclasses.replace(self, plugin=plugin)
