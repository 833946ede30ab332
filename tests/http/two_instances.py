"""Two serving instances in one process, with a fixed layout: the forwarding tests' cluster.

Instance A is the running active of the even partitions of `counts` and a standby of the
odd ones, B the reverse; every instance holds the same data for its replicas (each writes
its partitions as a running active first, then takes the layout), so a standby answers
what its active answers. Standbys report a lag through `end_offsets`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iqstate_http import BackgroundServer, start_background
from support.network import free_port

from iqstate import ACTIVE, STANDBY, Application, Assignment, HostInfo, StaticAssignment
from iqstate.serdes import Serde

PARTITIONS = 6
ROWS = {f"key-{i:04d}": i for i in range(600)}
POSITION = {"src": {0: 100}}


@dataclass
class Instance:
    app: Application
    server: BackgroundServer
    host: HostInfo
    assignment: StaticAssignment

    @property
    def url(self) -> str:
        return self.server.url


def layout(a: HostInfo, b: HostInfo) -> dict[HostInfo, Assignment]:
    even = {p: ACTIVE if p % 2 == 0 else STANDBY for p in range(PARTITIONS)}
    odd = {p: STANDBY if p % 2 == 0 else ACTIVE for p in range(PARTITIONS)}
    return {a: Assignment({"counts": even}), b: Assignment({"counts": odd})}


@contextmanager
def two_instances(
    tmp_path: Path,
    rows: Mapping[str, Any] | None = None,
    standby_lag: int = 0,
    value_serde: str | Serde[Any] | tuple[str | Serde[Any], str | Serde[Any]] = "int64",
    **service: Any,
) -> Iterator[tuple[Instance, Instance]]:
    """Instances A and B serving `counts` (see the module doc), each with `value_serde`
    (or A and B with one each, a pair); `service` goes to `start_background` (limits,
    `max_rows`, ...)."""
    serdes = value_serde if isinstance(value_serde, tuple) else (value_serde, value_serde)
    hosts = [HostInfo("127.0.0.1", free_port()) for _ in range(2)]
    cluster = layout(*hosts)
    started: list[Instance] = []
    try:
        for name, host, serde in zip("ab", hosts, serdes, strict=True):
            mine = cluster[host]
            assignment = StaticAssignment(
                {host: Assignment({"counts": dict.fromkeys(range(PARTITIONS), ACTIVE)})},
                end_offsets={
                    ("counts", p): standby_lag
                    for p, role in mine.roles["counts"].items()
                    if not role.is_active
                },
            )
            app = Application("pair", tmp_path / name, str(host), assignment=assignment)
            app.key_value_store("counts", PARTITIONS, value_serde=serde)
            app.start()
            with app.begin_batch(position=POSITION, batch_id=1) as batch:
                batch.put_all("counts", list((rows if rows is not None else ROWS).items()))
            assignment.rebalance(cluster)
            server = start_background(app, port=host.port, **service)
            started.append(Instance(app, server, host, assignment))
        yield started[0], started[1]
    finally:
        for instance in started:
            instance.server.stop()
            instance.app.close()
