"""The rounds of one request across the cluster: which replica to ask for each partition.

Round n asks each pending partition's next candidate (`ReplicaChoice` orders them); a
partition whose answer is a failure another replica may not have (`NOT_ACTIVE`,
`NOT_PRESENT`, `NOT_UP_TO_BOUND`, `STORE_EXCEPTION`, or no answer at all) is pending again,
until it runs out of candidates and keeps its last failure, or the first
`STORE_EXCEPTION`: what a store failed to read says more than that the next replica was
too far behind. No I/O here: the service does the asking.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from iqstate_http.local_answers import failure_entry
from iqstate_http.replica_choice import Replica, ReplicaChoice

RETRY_ELSEWHERE = frozenset({"NOT_ACTIVE", "NOT_PRESENT", "NOT_UP_TO_BOUND", "STORE_EXCEPTION"})
STORE_FAILED = "STORE_EXCEPTION"


class Placement:
    """Where each partition of one request is asked, round after round."""

    def __init__(
        self,
        choice: ReplicaChoice,
        store: str,
        partitions: list[int],
        acceptable_lag: int | None,
        local_only: bool = False,
    ) -> None:
        self._choice = choice
        self._store = store
        self._acceptable_lag = acceptable_lag
        self._local_only = local_only
        choose = choice.local_candidates if local_only else choice.candidates
        self._options = {p: choose(store, p, acceptable_lag) for p in partitions}
        self._next = dict.fromkeys(partitions, 0)
        self._pending = set(partitions)
        self.final: dict[int, dict[str, Any]] = {}
        """Each settled partition's entry: an answer, or its last failure."""

    def next_round(self) -> dict[Replica, list[int]]:
        """The partitions to ask now, by replica; empty when every partition is settled."""
        by_replica: dict[Replica, list[int]] = defaultdict(list)
        for partition in sorted(self._pending):
            options, index = self._options[partition], self._next[partition]
            if index < len(options):
                by_replica[options[index]].append(partition)
                self._next[partition] = index + 1
            elif partition not in self.final:
                reason, message = self._choice.why_none(
                    self._store, partition, self._acceptable_lag, self._local_only
                )
                self.final[partition] = failure_entry(reason.name, message, self._choice.this_host)
        self._pending = set()
        return dict(by_replica)

    def record(self, partition: int, entry: dict[str, Any]) -> None:
        """One partition's answer from the replica it was asked in this round."""
        if entry["ok"]:
            self.final[partition] = entry
            return
        self._failed(partition, entry)
        if entry["failure"] in RETRY_ELSEWHERE:
            self._pending.add(partition)

    def retry(self, partition: int, entry: dict[str, Any]) -> None:
        """A partition whose replica gave no answer: its failure, and the next candidate."""
        self._failed(partition, entry)
        self._pending.add(partition)

    def _failed(self, partition: int, entry: dict[str, Any]) -> None:
        """A failure for `partition`: its final entry unless a store already failed it."""
        earlier = self.final.get(partition)
        if earlier is None or earlier["ok"] or earlier["failure"] != STORE_FAILED:
            self.final[partition] = entry

    def again(self, partition: int) -> None:
        """Ask the partition's replica of this round again next round (its answer was
        dropped because another partition asked with it failed)."""
        self._next[partition] -= 1
        self._pending.add(partition)
