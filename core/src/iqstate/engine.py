"""What an engine plugin registers: the `Engine` record naming its store factories.

The base class for an engine's stores is `iqstate.engine_store.EngineStore`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from iqstate.store import KeyValueStore, WindowStore

KeyValueStoreFactory = Callable[[str], KeyValueStore[bytes, bytes]]
"""`factory(store_name)` -> an uninitialised key-value store over bytes."""
WindowStoreFactory = Callable[[str, int, int], WindowStore[bytes, bytes]]
"""`factory(store_name, window_size_ms, retention_ms)` -> an uninitialised window store."""


@dataclass(frozen=True)
class Engine:
    """A storage engine as a plugin registers it with `iqstate_register_engines`."""

    name: str
    key_value_store: KeyValueStoreFactory
    window_store: WindowStoreFactory | None = None
    persistent: bool = False
    description: str = ""
    check_config: Callable[[Mapping[str, Any], str], None] | None = None
    """`check_config(config, store_name)` raises `ValueError` naming a bad engine option;
    called when a store is declared, so a typo fails there and not at `start()`."""
