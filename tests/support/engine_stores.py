"""Opening one engine store partition directly, as the engine tests do."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from iqstate.context import ProcessingGuarantee
from iqstate.store import StateStore
from iqstate.testing import make_context

S = TypeVar("S", bound=StateStore)


def opened(
    store: S,
    root: Path,
    guarantee: ProcessingGuarantee = "exactly_once",
    *,
    sync: bool = False,
    **config: object,
) -> S:
    """`store` initialised as partition 0 of its name under `root`, with engine options
    `config` and durable commits if `sync`."""
    context = make_context(
        root, store.name, processing_guarantee=guarantee, config=config, sync_commits=sync
    )
    store.init(context)
    return store
