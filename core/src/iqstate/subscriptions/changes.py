"""What a subscription yields: whole committed batches of changes, and the changes in them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NoReturn

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


class ReadOnlyChanges(list[Change]):
    """A `ChangeBatch`'s changes: a list that refuses to change.

    Subscribers in step yield one shared `ChangeBatch` per committed batch (1,000 private
    copies of its list cost the committer the garbage collector's walks over them): none
    may alter what the others read. `list(batch.changes)` is a list of one's own."""

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(
            "a ChangeBatch's changes are shared with other subscribers and cannot be "
            "changed: copy them first (list(batch.changes))"
        )

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse

    def __reduce__(self) -> tuple[type[list[Change]], tuple[list[Change]]]:
        return list, (list(self),)  # pickled and copied as a plain list
