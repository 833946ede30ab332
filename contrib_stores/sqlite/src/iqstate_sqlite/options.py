"""The sqlite engine's one option, `sync_commits`, overridable per store through `config`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class SQLiteSettings:
    """Per-store SQLite options."""

    sync_commits: bool | None = None
    """`PRAGMA synchronous=FULL`: every commit survives power loss, not only a crash of the
    process (`NORMAL` otherwise). `None` follows the runtime (`StateStoreContext.
    sync_commits`: on under exactly-once for a store without a changelog)."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, store: str) -> SQLiteSettings:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(
                f"store {store!r}: unknown sqlite option(s) {unknown}; known: {sorted(known)}"
            )
        settings = cls(**dict(config))
        if settings.sync_commits is not None and not isinstance(settings.sync_commits, bool):
            raise ValueError(
                f"store {store!r}: sqlite option sync_commits must be true, false or None, "
                f"got {settings.sync_commits!r}"
            )
        return settings

    def syncs(self, runtime_default: bool) -> bool:
        """Whether commits are fsynced: this store's option, else the runtime's choice."""
        return runtime_default if self.sync_commits is None else self.sync_commits


def check_config(config: Mapping[str, Any], store: str) -> None:
    """Refuse an unknown or invalid option when a store is declared (`Engine.check_config`)."""
    SQLiteSettings.from_config(config, store=store)
