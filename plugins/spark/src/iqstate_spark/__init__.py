"""The Spark side of iqstate: Structured Streaming micro-batches into iqstate stores.

Names are imported on first use (PEP 562): every iqstate application imports this package
through its plugin entry point, and it must not pay for PySpark, PyArrow or pandas then.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from iqstate_spark.cluster_stores import ChangelogStore, ClusterStores
    from iqstate_spark.distributed import ClusterSink
    from iqstate_spark.offsets import batch_position
    from iqstate_spark.running import run_until_stopped
    from iqstate_spark.sink import StoreSink, to_store

_WHERE = {
    "ChangelogStore": "iqstate_spark.cluster_stores",
    "ClusterSink": "iqstate_spark.distributed",
    "ClusterStores": "iqstate_spark.cluster_stores",
    "StoreSink": "iqstate_spark.sink",
    "batch_position": "iqstate_spark.offsets",
    "run_until_stopped": "iqstate_spark.running",
    "to_store": "iqstate_spark.sink",
}

__all__ = [
    "ChangelogStore",
    "ClusterSink",
    "ClusterStores",
    "StoreSink",
    "batch_position",
    "run_until_stopped",
    "to_store",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'iqstate_spark' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
