"""Which partitions of a persistent store have committed state, recorded beside the store.

A partition whose files vanished (its directory deleted, its data file emptied) would
otherwise reopen as a new, empty partition that answers every query with success. The
record tells "never written" from "lost": a partition in it that reopens holding nothing
(no fence, no position, no changelog offset) lost its data. The file changes only when a
partition commits for the first time, so batches do not pay for it.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from iqstate.errors import CorruptStateError
from iqstate.files import replace_atomically
from iqstate.storage_failures import machine_failures, read_own_json

RECORD_FILE = "committed-partitions.json"
_REMEDY = (
    "it lists the partitions of the store that hold committed data: restore it from a "
    "backup, or delete it to skip the check for lost partitions at the next start"
)


class CommittedPartitions:
    """The record file of one store: `{"partitions": [0, 2, ...]}`."""

    def __init__(self, store_directory: Path) -> None:
        self.path = store_directory / RECORD_FILE
        self._lock = threading.Lock()
        self._partitions = self._read()

    def _read(self) -> frozenset[int]:
        document = read_own_json(self.path, _REMEDY)
        if document is None:
            return frozenset()
        partitions = document.get("partitions") if isinstance(document, dict) else None
        if not isinstance(partitions, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) for p in partitions
        ):
            raise CorruptStateError(
                f"{self.path} is corrupt (it needs a list of integers under 'partitions'); "
                f"{_REMEDY}"
            )
        return frozenset(partitions)

    def __contains__(self, partition: int) -> bool:
        return partition in self._partitions

    def add(self, partition: int) -> None:
        """Record that `partition` holds committed state (written once per partition)."""
        if partition in self._partitions:
            return
        with self._lock, machine_failures(f"cannot write {self.path}"):
            partitions = self._partitions | {partition}
            replace_atomically(self.path, json.dumps({"partitions": sorted(partitions)}) + "\n")
            self._partitions = partitions
