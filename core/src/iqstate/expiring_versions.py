"""Versions a run of puts may write, or cut short, and expire in the same go.

`VersionedKeyValueStore.expired_by`, asked before the puts, names what the store holds
that their times expire. A run of puts spanning more than the history retention (a
replica catching up applies many batches at once) can also write a version and expire it
before the run ends, or move an out-of-order version into a key's history, which cuts the
version before it short, and expire that. The store never held those expired, so only
this before-and-after check names them; without it their changelog records stay for ever.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from iqstate.store import VersionedKeyValueStore

Version = tuple[Any, int]
"""A version by its key and timestamp."""


def versions_expiring(
    store: VersionedKeyValueStore[Any, Any], puts: Sequence[tuple[Any, int, Any]]
) -> list[Version]:
    """Before `puts` (`(key, timestamp, value)`, at least one) are applied to `store`: what
    it holds that their newest time expires (`expired_by`), then the versions they may
    write or cut short and expire with them (`versions_at_risk`). Pass the answer through
    `expired_now` after the puts."""
    held = store.expired_by(max(stamp for _, stamp, _ in puts))
    return held + versions_at_risk(store, puts)


def versions_at_risk(
    store: VersionedKeyValueStore[Any, Any], puts: Sequence[tuple[Any, int, Any]]
) -> list[Version]:
    """Before `puts` (`(key, timestamp, value)`) are applied to `store`: the versions they
    may write or cut short and expire with them. Empty unless some put is at or before the
    boundary the puts leave (the retention behind the newest of them, or the store's now;
    the usual case, told apart in one pass); else, for each key put there, the versions its
    puts write and those it holds (`held_timestamps`), but its newest unless that may be a
    tombstone: a current version is kept however old. Pass the answer through `expired_now`
    after the puts."""
    if not puts:
        return []
    stamps = [timestamp for _, timestamp, _ in puts]
    reach = max(stamps) - store.history_retention_ms
    keeps = store.keeps
    if min(stamps) > reach and keeps(min(stamps) - 1):
        return []  # every version written or cut short stays valid past the boundary
    # A put at or before the boundary after the puts: the newest's, or the store's now.
    behind = {key for key, stamp, _ in puts if stamp <= reach or not keeps(stamp - 1)}
    versions: dict[Any, dict[int, bool]] = {}  # key: timestamp: whether maybe a tombstone
    for key, stamp, value in puts:
        if key in behind:
            of_key = versions.setdefault(key, {})
            of_key[stamp] = of_key.get(stamp, False) or value is None
    at_risk: list[Version] = []
    for key, of_key in versions.items():
        held = store.held_timestamps(key)
        for stamp in held:
            of_key.setdefault(stamp, False)
        if held:  # the current version may be a tombstone: not left out below
            of_key[held[-1]] = True
        newest = max(of_key)
        at_risk += [(key, stamp) for stamp in of_key if stamp != newest or of_key[stamp]]
    return at_risk


def expired_now(
    store: VersionedKeyValueStore[Any, Any], versions: Sequence[Version]
) -> list[Version]:
    """Those of `versions` the store neither holds nor could be given again: behind its
    retention (`keeps` says no, so a later put at that time is dropped) and not held."""
    keeps, holds = store.keeps, store.holds_version
    return [(key, stamp) for key, stamp in versions if not keeps(stamp) and not holds(key, stamp)]
