"""`StallWatch`: tells a changelog reader that stopped fetching from one that is merely busy.

A librdkafka consumer of assigned partitions can stop fetching for good after a broker
restart while every other client carries on (confluentinc/librdkafka#5153, cured by a new
consumer; the members topic's consumer was seen doing so in CI). The follower cannot ask
librdkafka whether it is stuck, so it watches what it can see: a partition the broker says
holds records the reader has not read, while the reader reads nothing at all.

Any move of the reader in any partition restarts every wait: a reader restoring many
partitions fetches them in turns (a fetch holds a few partitions' worth of 16 MB), so one
partition may get nothing for a while although the reader is healthy. A partition whose
wait reaches the patience counts as stalled; the follower then replaces the reader, and
that partition's patience doubles (up to a bound) until it moves again, so a partition
that can never reach its end offset (a foreign writer's transaction marker at its tail: the
consumer never returns one) costs a new reader ever more rarely, not every wait.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class StallWatch(Generic[K]):
    """Waits of partitions behind their end offsets while the reader does not move.

    `stall_after`: seconds of such a wait after which a partition counts as stalled (its
    patience). `longest`: the most its patience grows to after replacements that did not
    make it move.
    """

    def __init__(self, stall_after: float, longest: float) -> None:
        if not 0 < stall_after <= longest:
            raise ValueError(
                f"need 0 < stall_after <= longest, got {stall_after!r} and {longest!r}"
            )
        self._stall_after = stall_after
        self._longest = longest
        self._positions: dict[K, int] = {}
        self._since: dict[K, float] = {}
        self._patience: dict[K, float] = {}

    def stalled(
        self, now: float, positions: Mapping[K, int], behind: Iterable[K]
    ) -> tuple[K, float] | None:
        """The first partition that waited its patience, and how long, or None.

        `positions`: the reader's next offset in each partition it reads. `behind`: those
        of them the broker's latest answer says hold records past it."""
        moved = False
        for key, position in positions.items():
            before = self._positions.get(key)
            if before is not None and before != position:
                moved = True
                self._patience.pop(key, None)
        self._positions = dict(positions)
        if moved:
            self._since.clear()
        self._since = {key: self._since.get(key, now) for key in behind}
        for key, since in self._since.items():
            if now - since >= self._patience.get(key, self._stall_after):
                return key, now - since
        return None

    def replaced(self, stalled: K | None = None) -> None:
        """The reader was replaced: every wait starts again, with the partition that
        stalled (if one did) given twice its patience."""
        if stalled is not None:
            patience = self._patience.get(stalled, self._stall_after)
            self._patience[stalled] = min(self._longest, 2 * patience)
        self._positions.clear()
        self._since.clear()
