"""iqstate: queryable partitioned state for streaming pipelines (Kafka Streams IQv2 for Python)."""

from iqstate.changelog import ChangelogRecord, ChangelogWriter, InMemoryChangelog
from iqstate.context import StateStoreContext
from iqstate.engine import Engine, EngineStore
from iqstate.errors import (
    ClosedStoreError,
    IllegalQueryResultAccess,
    InvalidStateStoreError,
    InvalidStateStorePartitionError,
    IqstateError,
    PluginError,
    SerializationError,
    StreamsNotStartedError,
    StreamsStoppedError,
    UnknownEngineError,
    UnknownStateStoreError,
    UnsupportedOperationError,
)
from iqstate.iterators import KeyValueIterator
from iqstate.position import Position, PositionBound, TopicPartition
from iqstate.queries import (
    KeyQuery,
    Query,
    RangeQuery,
    ResultOrder,
    Windowed,
    WindowKeyQuery,
    WindowRangeQuery,
)
from iqstate.request import StateQueryRequest
from iqstate.results import FailureReason, QueryResult, StateQueryResult
from iqstate.serdes import Serde, Serdes
from iqstate.store import KeyValueStore, QueryConfig, StateStore, WindowStore

__version__ = "0.1.0"

__all__ = [
    "ChangelogRecord",
    "ChangelogWriter",
    "ClosedStoreError",
    "Engine",
    "EngineStore",
    "FailureReason",
    "IllegalQueryResultAccess",
    "InMemoryChangelog",
    "InvalidStateStoreError",
    "InvalidStateStorePartitionError",
    "IqstateError",
    "KeyQuery",
    "KeyValueIterator",
    "KeyValueStore",
    "PluginError",
    "Position",
    "PositionBound",
    "Query",
    "QueryConfig",
    "QueryResult",
    "RangeQuery",
    "ResultOrder",
    "Serde",
    "Serdes",
    "SerializationError",
    "StateQueryRequest",
    "StateQueryResult",
    "StateStore",
    "StateStoreContext",
    "StreamsNotStartedError",
    "StreamsStoppedError",
    "TopicPartition",
    "UnknownEngineError",
    "UnknownStateStoreError",
    "UnsupportedOperationError",
    "WindowKeyQuery",
    "WindowRangeQuery",
    "WindowStore",
    "Windowed",
    "__version__",
]
