"""LMDB options with sane defaults, overridable per store through `config={...}`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class LMDBSettings:
    """Per-store LMDB options."""

    initial_map_mb: int = 64
    max_readers: int = 126
    sync_commits: bool | None = None
    """fsync at every commit, so a commit survives power loss and not only a crash of the
    process. `None` follows the runtime (`StateStoreContext.sync_commits`: on under
    exactly-once for a store without a changelog)."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, store: str) -> LMDBSettings:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(
                f"store {store!r}: unknown lmdb option(s) {unknown}; known: {sorted(known)}"
            )
        settings = cls(**dict(config))
        for name in ("initial_map_mb", "max_readers"):
            value = getattr(settings, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"store {store!r}: lmdb option {name} must be an int >= 1, got {value!r}"
                )
        if settings.sync_commits is not None and not isinstance(settings.sync_commits, bool):
            raise ValueError(
                f"store {store!r}: lmdb option sync_commits must be true, false or None, "
                f"got {settings.sync_commits!r}"
            )
        return settings

    def syncs(self, runtime_default: bool) -> bool:
        """Whether commits are fsynced: this store's option, else the runtime's choice."""
        return runtime_default if self.sync_commits is None else self.sync_commits


def check_config(config: Mapping[str, Any], store: str) -> None:
    """Refuse an unknown or invalid option when a store is declared (`Engine.check_config`)."""
    LMDBSettings.from_config(config, store=store)
