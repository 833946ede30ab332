"""Which puts of a batch a store with a retention keeps: what a subscription announces.

Window, session and versioned stores drop a put whose time is too far behind the newest
time they have seen (Kafka's stores drop them too), so announcing a batch's entries as they
were written would announce changes the store never made. The store's `keeps(time)` answers
for its state before the batch; within the batch, each put's time raises the stream time
the later ones are judged against.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import compress
from typing import Any, TypeVar

from iqstate.store import SessionStore, VersionedKeyValueStore, WindowStore

T = TypeVar("T")


def kept_puts(
    times: Sequence[int],
    keeps: Callable[[int], bool],
    retention_ms: int,
    *,
    kept_at_boundary: bool,
) -> list[bool] | None:
    """For puts at `times` applied in order, whether the store keeps each; None when it
    keeps them all (the usual case, told apart in one pass).

    A put is kept when `keeps` says so (the stream time before the batch) and its time is
    within `retention_ms` of every earlier time of the batch: `kept_at_boundary` says
    whether a time exactly `retention_ms` behind is (versioned stores) or not (window and
    session stores)."""
    if not times:
        return None
    oldest, newest_of_all = min(times), max(times)
    behind = newest_of_all - oldest
    if keeps(oldest) and (behind <= retention_ms if kept_at_boundary else behind < retention_ms):
        return None  # `keeps` rises with the time: the oldest kept, all are
    flags: list[bool] = []
    newest: int | None = None
    dropped = False
    for time in times:
        kept = keeps(time) and (
            newest is None
            or (time >= newest - retention_ms if kept_at_boundary else time > newest - retention_ms)
        )
        flags.append(kept)
        dropped = dropped or not kept
        if newest is None or time > newest:
            newest = time
    return flags if dropped else None


def kept_windows(store: WindowStore[Any, Any], window_starts: Sequence[int]) -> list[bool] | None:
    """`kept_puts` of a window store: a window at `stream time - retention` is dropped."""
    return kept_puts(window_starts, store.keeps, store.retention_ms, kept_at_boundary=False)


def kept_sessions(store: SessionStore[Any, Any], session_ends: Sequence[int]) -> list[bool] | None:
    """`kept_puts` of a session store: a session ending at `stream time - retention` is
    dropped."""
    return kept_puts(session_ends, store.keeps, store.retention_ms, kept_at_boundary=False)


def kept_versions(
    store: VersionedKeyValueStore[Any, Any], timestamps: Sequence[int]
) -> list[bool] | None:
    """`kept_puts` of a versioned store: a version at `stream time - retention` is kept."""
    return kept_puts(timestamps, store.keeps, store.history_retention_ms, kept_at_boundary=True)


def only_kept(
    entries: list[T], kept: list[bool] | None, start: int = 0, end: int | None = None
) -> list[T]:
    """The entries in `[start, end)` the store kept (`kept`: each entry's flag, as
    `kept_puts` gives them; None when it kept all)."""
    if end is None:
        end = len(entries)
    if kept is None:
        return entries if start == 0 and end == len(entries) else entries[start:end]
    return list(compress(entries[start:end], kept[start:end]))


def expired_by_records(
    store: WindowStore[Any, Any] | SessionStore[Any, Any],
    records: Sequence[tuple[bytes, bytes | None]],
    times: Sequence[int],
    encode: Callable[..., bytes],
) -> list[bytes]:
    """Before window or session `records` (at `times`) are applied to `store`: the
    changelog keys of what applying them expires. Those of what the store holds that their
    newest time expires (`expired_by`, each encoded by `encode`), then those of `records`
    it will not hold once it applied them all (`expired_among`)."""
    if not records:
        return []
    held = [encode(*entry) for entry in store.expired_by(max(times))]
    return held + expired_among(records, times, store.keeps, store.retention_ms)


def expired_among(
    records: Sequence[tuple[bytes, bytes | None]],
    times: Sequence[int],
    keeps: Callable[[int], bool],
    retention_ms: int,
) -> list[bytes]:
    """The keys of window or session `records` (at `times`: a window's start, a session's
    end) that the store no longer holds once it applied them all: those it drops as they
    come (`keeps` is False before them) and those a later record's time expires. One
    `keeps` call when there are none (the usual case)."""
    limit = max(times) - retention_ms
    oldest = min(times)
    if oldest > limit and keeps(oldest):  # `keeps` rises with the time: none expires
        return []
    return [
        key
        for (key, _), time in zip(records, times, strict=True)
        if time <= limit or not keeps(time)
    ]
