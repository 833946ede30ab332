"""The application's state directory: its lock, the store directories and what they record.

`<state_dir>/<application_id>/` holds one directory per persistent store, with the store's
declaration (`store.json`, so a store declared differently on a later run is refused), the
record of partitions with committed data, and one directory per partition. Like Kafka
Streams' `StateDirectory`, it is locked for the whole life of a running application.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from iqstate.errors import CorruptStateError, IncompatibleStateError
from iqstate.files import replace_atomically
from iqstate.runtime.committed import CommittedPartitions
from iqstate.runtime.lock import DirectoryLock
from iqstate.runtime.spec import StoreSpec
from iqstate.storage_failures import machine_failures, read_own_json

STORE_METADATA_FILE = "store.json"


class StateDirectory:
    """`<state_dir>/<application_id>/`: locking, checking and laying out store directories."""

    def __init__(self, state_dir: Path, application_id: str) -> None:
        self.path = state_dir / application_id
        self._lock = DirectoryLock(self.path)
        self._new_declarations: dict[Path, dict[str, object]] = {}
        """`store.json` files `check_stores` found missing, to write at `record_new_stores`."""

    def lock(self) -> None:
        """Take the directory for this process; `StateDirectoryLockedError` names the holder."""
        self._lock.acquire()

    def unlock(self) -> None:
        self._lock.release()

    def check_stores(self, specs: list[StoreSpec]) -> dict[str, CommittedPartitions]:
        """Recognise persistent stores from an earlier run, refuse ones declared differently
        (a store declared in memory where a persistent one was kept, too: its data would be
        silently ignored), and return each persistent store's record of partitions with
        committed data. New stores are recorded by `record_new_stores`, once the start has
        passed its checks."""
        records: dict[str, CommittedPartitions] = {}
        self._new_declarations = {}
        for spec in specs:
            directory = self.path / spec.name
            metadata_file = directory / STORE_METADATA_FILE
            declared = spec.describe()
            if not spec.engine.persistent:
                self._check_declared(spec.name, declared, metadata_file)
                continue
            with machine_failures(f"store directory {directory} cannot be created"):
                directory.mkdir(parents=True, exist_ok=True)
            if not self._check_declared(spec.name, declared, metadata_file):
                self._new_declarations[metadata_file] = declared
            records[spec.name] = CommittedPartitions(directory)
        return records

    @staticmethod
    def _check_declared(name: str, declared: dict[str, Any], metadata_file: Path) -> bool:
        """Whether `metadata_file` records store `name`, after refusing one recorded
        otherwise than `declared` (`IncompatibleStateError`) or a damaged record
        (`CorruptStateError`)."""
        remedy = (
            "it records how the store was declared when it was created: restore it from "
            "a backup, or, if the store is declared as it was then, write "
            f"{json.dumps(declared, sort_keys=True)} to it"
        )
        recorded = read_own_json(metadata_file, remedy)
        if recorded is None:
            return False
        if not isinstance(recorded, dict):
            raise CorruptStateError(
                f"{metadata_file} is corrupt (it needs a JSON object); {remedy}"
            )
        if recorded != declared:
            differ = ", ".join(
                f"{name} {recorded.get(name)!r} then, {declared.get(name)!r} now"
                for name in sorted({*recorded, *declared})
                if recorded.get(name) != declared.get(name)
            )
            raise IncompatibleStateError(
                f"store {name!r} in {metadata_file.parent} was created otherwise than it "
                f"is declared: {differ}; move the directory away or declare the store as it was"
            )
        return True

    def record_new_stores(self) -> None:
        """Write the declaration of each store `check_stores` found new: after the checks
        of a start (the cluster's topics, say), so that a start they refuse records nothing
        a corrected declaration would then contradict."""
        for metadata_file, declared in self._new_declarations.items():
            with machine_failures(f"cannot write {metadata_file}"):
                replace_atomically(metadata_file, json.dumps(declared, sort_keys=True))
        self._new_declarations = {}

    def partition_directory(self, spec: StoreSpec, partition: int) -> Path | None:
        """The directory of a persistent store partition (created), `None` for others."""
        if not spec.engine.persistent:
            return None
        directory = self.path / spec.name / str(partition)
        with machine_failures(f"partition directory {directory} cannot be created"):
            directory.mkdir(parents=True, exist_ok=True)
        return directory
