"""The heartbeat record of the members topic (SPEC 9): what one member reports, and its codec.

Key = the member id (unique per process incarnation). Value = a versioned JSON document
(never pickle): `{"v": 1, "host", "port", "stores": {name: partitions}, "actives": [[store,
partition]...], "restoring": [[store, partition]...], "lags": [[store, partition, lag]...],
"shapes": {name: "key_value, key_serde string, value_serde json"}}` (`shapes` came later:
a member without it is not compared).
Readers ignore fields they do not know, so a later version may add some; a document of
another version or shape does not decode (`ValueError`), and membership logs and skips it.
A null value is a tombstone: the member left (`iqstate_kafka.membership`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from iqstate.runtime.batch import StorePartition
from iqstate.runtime.metadata import HostInfo
from iqstate.runtime.spec import StoreSpec
from iqstate_kafka.assignor import Member

DOCUMENT_VERSION = 1
WRITER_KEY_PREFIX = b"writer/"
"""Keys of the members topic that are a writer's store declaration (`writer/<store>`,
`iqstate_kafka.declarations`), not a member's heartbeat: membership skips them."""


@dataclass(frozen=True)
class Heartbeat:
    """What one member reports: what the assignor needs (`member`), which of its actives are
    still restoring, and the stores it declares."""

    member: Member
    restoring: frozenset[StorePartition] = frozenset()
    stores: Mapping[str, int] = field(default_factory=dict)
    shapes: Mapping[str, str] = field(default_factory=dict)
    """Each store's type, serdes and partitioner (`store_shape`): instances that differ
    there answer the same key differently."""


def store_shape(spec: StoreSpec) -> str:
    """What instances of one application must agree on about a store, beyond its partition
    count: its type, its serdes and its partitioner (the engine may differ)."""
    return shape_of(spec.store_type, spec.key_serde, spec.value_serde, spec.partitioner)


def shape_of(store_type: str, key_serde: object, value_serde: object, partitioner: object) -> str:
    """`store_shape` of a store declared with these (a writer's declaration, say)."""
    shape = (
        f"{store_type}, key_serde {_serde_name(key_serde)}, value_serde {_serde_name(value_serde)}"
    )
    if partitioner is not None:
        shape += f", partitioner {getattr(partitioner, '__qualname__', type(partitioner).__name__)}"
    return shape


def _serde_name(serde: object) -> str:
    """How `StoreSpec.describe` names a serde (its `name`, else its class)."""
    return str(getattr(serde, "name", type(serde).__name__))


def is_global(shape: str) -> bool:
    """Whether a store of this `store_shape` is a global store (every member hosts it all)."""
    return shape.startswith("global_key_value,")


def encode(heartbeat: Heartbeat) -> bytes:
    """The record value of `heartbeat` (its key is the member id)."""
    member = heartbeat.member
    document = {
        "v": DOCUMENT_VERSION,
        "host": member.host.host,
        "port": member.host.port,
        "stores": dict(sorted(heartbeat.stores.items())),
        "actives": sorted([store, number] for store, number in member.actives),
        "restoring": sorted([store, number] for store, number in heartbeat.restoring),
        "lags": sorted([store, number, lag] for (store, number), lag in member.lags.items()),
        "shapes": dict(sorted(heartbeat.shapes.items())),
    }
    return json.dumps(document, separators=(",", ":")).encode()


def decode(member_id: str, value: bytes) -> Heartbeat:
    """The heartbeat in `value`; `ValueError` saying what is wrong with it."""
    try:
        document = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    if document.get("v") != DOCUMENT_VERSION:
        raise ValueError(f"version {document.get('v')!r}, this member reads {DOCUMENT_VERSION}")
    host, port = document.get("host"), document.get("port")
    if not isinstance(host, str) or not isinstance(port, int) or isinstance(port, bool):
        raise ValueError("host must be a string and port an int")
    stores = document.get("stores")
    if not isinstance(stores, dict) or not all(_is_int(count) for count in stores.values()):
        raise ValueError("stores must map names to partition counts")
    shapes = document.get("shapes", {})
    if not isinstance(shapes, dict) or not all(isinstance(v, str) for v in shapes.values()):
        shapes = {}  # another version's form: nothing to compare, the member still counts
    lags = {}
    for entry in _list(document, "lags"):
        if not (isinstance(entry, list) and len(entry) == 3 and _is_int(entry[2])):
            raise ValueError(f"lags entry {entry!r} is not [store, partition, lag]")
        lags[_partition(entry[:2])] = entry[2]
    return Heartbeat(
        Member(
            member_id,
            HostInfo(host, port),
            lags,
            frozenset(_partition(entry) for entry in _list(document, "actives")),
        ),
        frozenset(_partition(entry) for entry in _list(document, "restoring")),
        stores,
        shapes,
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _list(document: Mapping[str, object], name: str) -> list[object]:
    value = document.get(name)
    if not isinstance(value, list):
        raise ValueError(f"{name} must be a list")
    return value


def _partition(entry: object) -> StorePartition:
    if not (
        isinstance(entry, list)
        and len(entry) == 2
        and isinstance(entry[0], str)
        and _is_int(entry[1])
    ):
        raise ValueError(f"{entry!r} is not [store, partition]")
    return entry[0], entry[1]
