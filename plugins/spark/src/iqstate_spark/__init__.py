"""The Spark side of iqstate: Structured Streaming micro-batches into iqstate stores."""

from iqstate_spark.offsets import batch_position
from iqstate_spark.sink import StoreSink, to_store

__all__ = ["StoreSink", "batch_position", "to_store"]
