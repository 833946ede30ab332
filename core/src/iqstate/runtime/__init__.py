"""The runtime: an `Application` hosting partitioned stores, batches, queries, discovery."""

from iqstate.runtime.app import Application, AppState
from iqstate.runtime.assignment import (
    ACTIVE,
    ACTIVE_CUT_OFF,
    ACTIVE_RESTORING,
    STANDBY,
    Assignment,
    AssignmentProvider,
    Contact,
    PartitionRole,
    Role,
    StandaloneAssignment,
    StaticAssignment,
)
from iqstate.runtime.batch import Batch
from iqstate.runtime.iqv1 import (
    CompositeReadOnlyKeyValueStore,
    CompositeReadOnlySessionStore,
    CompositeReadOnlyWindowStore,
    QueryableStoreType,
    QueryableStoreTypes,
    StoreQueryParameters,
)
from iqstate.runtime.metadata import (
    Departure,
    HostInfo,
    InstanceStatus,
    KeyQueryMetadata,
    LagInfo,
    ReplicaStatus,
    StreamsMetadata,
)
from iqstate.runtime.partitioner import murmur2, partition_for_bytes

__all__ = [
    "ACTIVE",
    "ACTIVE_CUT_OFF",
    "ACTIVE_RESTORING",
    "STANDBY",
    "AppState",
    "Application",
    "Assignment",
    "AssignmentProvider",
    "Batch",
    "CompositeReadOnlyKeyValueStore",
    "CompositeReadOnlySessionStore",
    "CompositeReadOnlyWindowStore",
    "Contact",
    "Departure",
    "HostInfo",
    "InstanceStatus",
    "KeyQueryMetadata",
    "LagInfo",
    "PartitionRole",
    "QueryableStoreType",
    "QueryableStoreTypes",
    "ReplicaStatus",
    "Role",
    "StandaloneAssignment",
    "StaticAssignment",
    "StoreQueryParameters",
    "StreamsMetadata",
    "murmur2",
    "partition_for_bytes",
]
