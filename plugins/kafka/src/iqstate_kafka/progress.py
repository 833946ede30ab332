"""What the follower knows about the replicas hosted here, as membership and assignment use it.

The follower (which applies the changelogs) implements `ReplicaProgress`; the Kafka assignment
provider reads it to announce this instance's replicas in its heartbeats (so every instance
can prefer a caught-up replica as a partition's active), to answer `end_offset` for lags, and
to keep an active `RESTORING` until it has caught up to the end offset seen when it became
active. The follower calls the listener it is given when an active catches up, so the
provider re-announces the assignment with that partition `RUNNING`, and when a replica is
rebuilt from an empty store, so that an active goes back to `RESTORING` until it catches up
again (it would otherwise answer from a partly restored store as if complete).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from iqstate.runtime.batch import StorePartition

CaughtUpListener = Callable[[StorePartition], None]
"""`listener((store, partition))`: an active replica hosted here reached its target offset."""


class ReplicaProgress(Protocol):
    """The state of the replicas hosted here, as the follower sees it."""

    def lags(self) -> Mapping[StorePartition, int]:
        """Offsets each hosted replica is behind the end of its changelog partition."""
        ...

    def end_offset(self, store: str, partition: int) -> int | None:
        """The last known end offset of a hosted replica's changelog partition."""
        ...

    def caught_up(self, store: str, partition: int) -> bool:
        """Whether a hosted active replica reached the end offset seen when it became
        active; False until the follower itself follows it as the active."""
        ...

    def cut_off(self, store: str, partition: int) -> None:
        """The hosted active replica was cut off: it is no longer caught up, until the
        follower follows it as an active again and it reaches a new target (whether or not
        the follower saw the cut-off role in between)."""
        ...

    def on_caught_up(self, listener: CaughtUpListener) -> None:
        """Call `listener` whenever an active replica hosted here catches up."""
        ...

    def on_rebuilt(self, listener: CaughtUpListener) -> None:
        """Call `listener` whenever a replica hosted here is emptied to be rebuilt (an
        active is no longer caught up)."""
        ...
