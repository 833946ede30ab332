"""What a store receives at `init`: where it lives, which partition it is, how to behave."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from iqstate.changelog import ChangelogWriter
from iqstate.errors import IqstateError
from iqstate.position import TopicPartition

if TYPE_CHECKING:
    from iqstate.dispatch import QueryHandlerRegistry
    from iqstate.store import StateStore

ProcessingGuarantee = Literal["exactly_once", "at_least_once"]
CommitCallback = Callable[[], None]
"""Invoked after a successful commit, when the store is known to be consistent (KIP-796)."""


@dataclass
class StateStoreContext:
    """The environment of one store partition.

    `directory` is the store partition's own directory (`None` for a store that keeps
    nothing on disk); `config` holds per-store engine options. Stores may register a
    commit callback with `register` during `init` (KIP-796); the runtime runs the commit
    callbacks after each successful commit.
    """

    application_id: str
    store_name: str
    partition: int
    directory: Path | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    processing_guarantee: ProcessingGuarantee = "exactly_once"
    changelog_partition: TopicPartition | None = None
    changelog_writer: ChangelogWriter | None = None
    query_handlers: QueryHandlerRegistry | None = None
    sync_commits: bool = False
    """Whether a commit must survive power loss (fsync) before it returns.

    The runtime sets it under exactly-once when the store has no changelog: then the store
    is the only copy of a batch the pipeline will not replay. An engine option may override
    it per store."""
    _registrations: dict[int, CommitCallback | None] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.config = MappingProxyType(dict(self.config))
        if self.processing_guarantee not in ("exactly_once", "at_least_once"):
            raise ValueError(
                "processing_guarantee must be 'exactly_once' or 'at_least_once', "
                f"got {self.processing_guarantee!r}"
            )

    @property
    def handlers(self) -> QueryHandlerRegistry:
        """The handlers stores build their tables from: those given, else the built-in
        ones (no installed plugin is loaded for a context built without handlers)."""
        if self.query_handlers is None:
            from iqstate.plugins import builtin_registry

            self.query_handlers = builtin_registry().query_handlers
        return self.query_handlers

    def register(self, store: StateStore, commit_callback: CommitCallback | None = None) -> None:
        """Register a store's commit callback (once per store). It runs after every batch
        commit of the partition, a pipeline's and one read from a changelog (distributed
        mode); restoring from the application's own changelog while the partition opens
        runs none (nothing reads the partition yet)."""
        key = id(store)
        if key in self._registrations:
            raise IqstateError(f"store {store.name!r} is already registered with this context")
        self._registrations[key] = commit_callback

    def run_commit_callbacks(self) -> None:
        """Called by the runtime after a successful commit of this store partition."""
        for callback in self._registrations.values():
            if callback is not None:
                callback()
