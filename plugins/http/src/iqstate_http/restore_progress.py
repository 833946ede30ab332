"""While `iqstate serve` restores replicas from their changelogs: how far along each store is.

A store counts as restoring once its local replicas are, together, at least
`RESTORE_THRESHOLD` changelog records behind (the lags a follower reports), until they have
caught up. On a terminal each restoring store gets a progress bar on stderr, with records
per second and the time to go (`rich`); otherwise a log line every `log_every` seconds, and
one when the store has caught up. The small lags of normal following show nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)

from iqstate import Application

log = logging.getLogger("iqstate_http.restore")

RESTORE_THRESHOLD = 1_000
"""Records behind from which a store's catching up is shown as a restore."""


@dataclass
class _Restore:
    total: int
    started: float
    task: TaskID | None = None
    logged: float = 0.0


def behind_by_store(app: Application) -> dict[str, int]:
    """Records the local replicas of each store are behind their changelogs (known lags)."""
    behind: dict[str, int] = {}
    for store, partitions in app.all_local_store_partition_lags().items():
        behind[store] = sum(lag.offset_lag or 0 for lag in partitions.values())
    return behind


class RestoreProgress(threading.Thread):
    """Watches the local replicas' lags until `stop()` (a daemon thread)."""

    def __init__(
        self, app: Application, terminal: bool, interval: float = 0.5, log_every: float = 5.0
    ) -> None:
        super().__init__(name="iqstate-restore-progress", daemon=True)
        self._app = app
        self._interval, self._log_every = interval, log_every
        self._stopped = threading.Event()
        self._restores: dict[str, _Restore] = {}
        self._bars = (
            Progress(
                TextColumn("restoring {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]:>10,.0f} records/s"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            if terminal
            else None
        )

    def stop(self) -> None:
        self._stopped.set()
        self.join(timeout=5)

    def run(self) -> None:
        bars = self._bars
        if bars is not None:
            bars.start()
        try:
            while not self._stopped.wait(self._interval):
                try:
                    behind = behind_by_store(self._app)
                except Exception:  # the application is closing: nothing left to show
                    return
                for store, records in behind.items():
                    self._update(store, records, time.monotonic())
        finally:
            if bars is not None:
                bars.stop()

    def _update(self, store: str, records: int, now: float) -> None:
        restore = self._restores.get(store)
        if restore is None:
            if records < RESTORE_THRESHOLD:
                return
            restore = self._restores[store] = _Restore(records, now, logged=now)
            if self._bars is not None:
                restore.task = self._bars.add_task(store, total=records, rate=0.0)
            else:
                log.info("restoring %s: %d records behind", store, records)
        restore.total = max(restore.total, records)
        done = restore.total - records
        elapsed = max(now - restore.started, 1e-9)
        rate = done / elapsed
        if self._bars is not None and restore.task is not None:
            self._bars.update(restore.task, total=restore.total, completed=done, rate=rate)
        if records == 0:
            log.info("restored %s: %d records in %.1f s", store, restore.total, elapsed)
            if self._bars is not None and restore.task is not None:
                self._bars.remove_task(restore.task)
            del self._restores[store]
        elif self._bars is None and now - restore.logged >= self._log_every:
            restore.logged = now
            to_go = f", about {records / rate:.0f} s to go" if rate > 0 else ""
            log.info(
                "restoring %s: %d of %d records, %.0f records/s%s",
                store,
                done,
                restore.total,
                rate,
                to_go,
            )
