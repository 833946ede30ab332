"""The JSON form of change batches (SPEC 12): what `/v1/stores/{store}/changes` sends as each
event's `data`, and what `RemoteQueryClient.subscribe` reads back.

`{"partition", "position", "snapshot", "changes": [...]}`; a change is `{"key", "value"}`
in the store's JSON form (`codecs.to_json`: bytes as base64), `value` null for a delete;
window and session stores add `"start"` and `"end"` (the window `[start, end)`, as a
`window_range` answer writes windows), timestamped and versioned stores `"timestamp"`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from iqstate import Change, ChangeBatch
from iqstate.subscriptions.cursor import Progress
from iqstate_http.codecs import position_from_json, position_to_json, to_json


def change_json(change: Change) -> dict[str, Any]:
    body: dict[str, Any] = {"key": to_json(change.key), "value": to_json(change.value)}
    if change.window is not None:
        body["start"], body["end"] = change.window
    if change.timestamp is not None:
        body["timestamp"] = change.timestamp
    return body


def batch_json(batch: ChangeBatch) -> dict[str, Any]:
    """An event's `data` (the cursor travels as the event's `id`)."""
    return {
        "partition": batch.partition,
        "position": position_to_json(batch.position),
        "snapshot": batch.snapshot,
        "changes": [change_json(change) for change in batch.changes],
    }


def batch_from_json(body: Any, cursor: str) -> ChangeBatch:
    """An event's `data` and `id` as the `ChangeBatch` it was (keys and values in their
    JSON forms, as the client's other answers give them); `ValueError` when malformed."""
    try:
        changes = [
            Change(
                item["key"],
                item["value"],
                window=(int(item["start"]), int(item["end"])) if "start" in item else None,
                timestamp=None if item.get("timestamp") is None else int(item["timestamp"]),
            )
            for item in body["changes"]
        ]
        return ChangeBatch(
            int(body["partition"]),
            position_from_json(body["position"] or {}),
            cursor,
            bool(body["snapshot"]),
            changes,
        )
    except (KeyError, TypeError) as error:
        raise ValueError(f"a change event that is not a change batch: {error!r}") from None


def already_past(
    progress: Mapping[int, Progress], partition: int, got: Progress, snapshot: bool
) -> bool:
    """Whether a stream at `progress` is past a batch of `partition` at `got` already: a
    replica behind the one that served the partition before replays what was had (same
    lineage, an earlier mark, or the same mark again; a snapshot of an earlier mark)."""
    had = progress.get(partition)
    if had is None or had.lineage != got.lineage:
        return False
    return got.mark < had.mark or (got.mark == had.mark and not snapshot)
