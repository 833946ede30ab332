"""How the conformance suite obtains stores: a factory per store type, and contexts."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from iqstate.context import ProcessingGuarantee, StateStoreContext
from iqstate.dispatch import QueryHandlerRegistry
from iqstate.engine import Engine, SessionStoreFactory, VersionedStoreFactory
from iqstate.plugins import default_registry
from iqstate.session_store import session_store_factory
from iqstate.store import KeyValueStore, WindowStore
from iqstate.versioned_store import versioned_store_factory


@dataclass(frozen=True)
class StoreFactory:
    """Builds uninitialised engine stores over bytes, as an engine plugin would."""

    key_value: Callable[[str], KeyValueStore[bytes, bytes]]
    window: Callable[[str, int, int], WindowStore[bytes, bytes]] | None = None
    versioned: VersionedStoreFactory | None = None
    session: SessionStoreFactory | None = None

    @classmethod
    def for_engine(cls, engine: Engine) -> StoreFactory:
        return cls(
            key_value=engine.key_value_store,
            window=engine.window_store,
            versioned=versioned_store_factory(engine),
            session=session_store_factory(engine),
        )


def store_directory(root: Path, store_name: str, partition: int) -> Path:
    """`<root>/<store>/<partition>/`, the layout the runtime uses below an application."""
    directory = root / store_name / str(partition)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def make_context(
    root: Path,
    store_name: str,
    partition: int = 0,
    *,
    processing_guarantee: ProcessingGuarantee = "exactly_once",
    query_handlers: QueryHandlerRegistry | None = None,
    config: Mapping[str, object] | None = None,
    sync_commits: bool = False,
) -> StateStoreContext:
    """A context for one store partition whose directory lives under `root`; without
    `query_handlers`, the stores answer with those of every installed plugin. `config` is
    the engine's options, `sync_commits` whether a commit must be durable when it returns."""
    if query_handlers is None:
        query_handlers = default_registry().query_handlers
    return StateStoreContext(
        application_id="conformance",
        store_name=store_name,
        partition=partition,
        directory=store_directory(root, store_name, partition),
        config=config or {},
        processing_guarantee=processing_guarantee,
        query_handlers=query_handlers,
        sync_commits=sync_commits,
    )
