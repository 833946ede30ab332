"""What a subscription yields: whole committed batches of changes, and the changes in them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from iqstate.position import Position


@dataclass(frozen=True, slots=True)
class Change:
    """One key's change: its new `value` (`None` for a delete).

    Window stores add `window=(start_ms, end_ms)` (the window `[start, end)`), session
    stores the session `(start_ms, end_ms)` in `window`; timestamped and versioned stores
    add the `timestamp` the value was put with (a versioned store's change is one version:
    the key's current value is the change with the newest timestamp)."""

    key: Any
    value: Any
    window: tuple[int, int] | None = None
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class ChangeBatch:
    """The matching changes of one committed batch of one partition, in write order.

    `position` is the partition's position after the batch; `cursor` resumes the whole
    subscription after this batch (`app.subscribe(..., from_cursor=batch.cursor)`).
    A `snapshot` batch is every matching key of the partition at `position` instead: the
    caller replaces what it holds of that partition with it."""

    partition: int
    position: Position
    cursor: str
    snapshot: bool
    changes: list[Change] = field(default_factory=list)
