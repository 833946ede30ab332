"""A store's changelog records as Spark columns, where Spark's own expressions make them.

The distributed sink's fast path (`iqstate_spark.distributed`): for the common stores, Spark
itself can make every changelog record byte for byte, so Spark's Kafka sink writes them from
the executors' JVMs and no row visits a Python worker. That takes three things:

- **the bytes**: the store's key and value serdes are built-ins whose output a Spark
  expression reproduces exactly for the column's type (the table below); anything else (a
  plugin's serde, JSON of strings, floats or structs, whose escaping and number formatting
  Spark writes differently) goes through Python;
- **the partition**: a key-value store (or a global one) whose partitioning rule is Kafka's
  default partitioning (`iqstate.runtime.partitioner.follows_kafka_default`: murmur2 of the
  serialized key, or a store of one partition), which is what the sink's Java producer picks
  for a record with a key and no partition (`BuiltInPartitioner.partitionForKey`). A window
  or session store's record key holds times while its partition is chosen by the key alone,
  and a custom partitioner of several partitions is Python: both go through Python, as do
  timestamped and versioned stores, whose records the core's encoding makes;
- **the batch id**: one literal `iqstate.batch` header on every record.

| serde | column type | expression | the serde writes |
|---|---|---|---|
| string | string | `CAST(c AS BINARY)` | UTF-8 |
| bytes | binary | `c` (the marker key refused) | the bytes |
| int64 | integral | `unhex(lpad(hex(c ^ MIN), 16, '0'))` | 8 bytes big-endian, sign flipped |
| json | integral | `CAST(CAST(c AS STRING) AS BINARY)` | the decimal digits |
| json | boolean | `CAST(CAST(c AS STRING) AS BINARY)` | `true` / `false` |

(integral: tinyint, smallint, int, bigint.)

A null key fails the task with the same message as the Python path (`raise_error`), a null
value or a true `tombstone` column makes a tombstone, as in `iqstate_spark.rows`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from iqstate_kafka.format import BATCH_HEADER, MARKER_KEY, batch_headers

from iqstate.runtime.partitioner import follows_kafka_default
from iqstate.serdes import BytesSerde, Int64Serde, JsonSerde, Serde, StringSerde, serde_name
from iqstate_spark.cluster_stores import ChangelogStore
from iqstate_spark.rows import RowColumns, null_key

_INTEGRAL = frozenset({"tinyint", "smallint", "int", "bigint"})
_SIGN_BIT = -(1 << 63)

Expression = Callable[[Any], Any]
"""Column -> column of serialized bytes."""


def _utf8(column: Any) -> Any:
    return column.cast("binary")


def _as_is(column: Any) -> Any:
    return column


def _int64(column: Any) -> Any:
    from pyspark.sql import functions as F

    flipped = column.cast("bigint").bitwiseXOR(F.lit(_SIGN_BIT))
    return F.unhex(F.lpad(F.hex(flipped), 16, "0"))


def _text(column: Any) -> Any:
    return column.cast("string").cast("binary")


_EXPRESSIONS: dict[tuple[type[Serde[Any]], str], Expression] = {
    (StringSerde, "string"): _utf8,
    (BytesSerde, "binary"): _as_is,
    **{(Int64Serde, spark_type): _int64 for spark_type in _INTEGRAL},
    **{(JsonSerde, spark_type): _text for spark_type in _INTEGRAL},
    (JsonSerde, "boolean"): _text,
}


_NOT_KEY_VALUE = {
    "window": (
        "a window store's changelog key holds the window start but its partition comes "
        "from the key alone, which Spark's Kafka sink cannot pick"
    ),
    "session": (
        "a session store's changelog key holds the session's times but its partition comes "
        "from the key alone, which Spark's Kafka sink cannot pick"
    ),
    "timestamped_key_value": (
        "a timestamped store's record values carry their timestamp in the core's encoding "
        "(iqstate.timestamped), which Python makes"
    ),
    "versioned_key_value": (
        "a versioned store's records carry the version's timestamp in the core's encoding "
        "(iqstate.versioned_store), which Python makes"
    ),
}
"""Why Spark's Kafka sink does not write the stores of the other types."""


@dataclass(frozen=True)
class SparkRecords:
    """How the JVM makes `store`'s records from rows of one schema: the `key`, `value` and
    `headers` columns of Spark's Kafka sink, built per batch by `columns(batch_id)`."""

    store: ChangelogStore
    key_column: str
    value_column: str
    tombstone_column: str | None
    key: Expression
    value: Expression

    def columns(self, batch_id: int) -> list[Any]:
        """The Kafka sink's `key`, `value` and `headers` columns for batch `batch_id`."""
        from pyspark.sql import functions as F

        key_column, value_column = F.col(self.key_column), F.col(self.value_column)
        key = self.key(key_column)
        # A Spark string holds any bytes (`CAST(binary AS STRING)` checks nothing), so a
        # string key too can be the marker key; text must be UTF-8, as the serde makes it.
        key = F.when(key == F.lit(bytearray(MARKER_KEY)), _refuse_marker_key()).otherwise(key)
        if isinstance(self.store.key_serde, StringSerde):
            key = F.when(F.is_valid_utf8(key_column), key).otherwise(
                self._not_utf8("key", self.key_column)
            )
        refused = F.raise_error(F.lit(null_key(self.store.name, self.key_column)))
        key = F.when(key_column.isNull(), refused).otherwise(key)
        value = self.value(value_column)
        if isinstance(self.store.value_serde, StringSerde):
            value = F.when(value_column.isNull() | F.is_valid_utf8(value_column), value).otherwise(
                self._not_utf8("value", self.value_column)
            )
        if self.tombstone_column is not None:
            value = F.when(F.col(self.tombstone_column), F.lit(None)).otherwise(value)
        header = batch_headers(batch_id)[0][1]
        headers = F.array(
            F.struct(F.lit(BATCH_HEADER).alias("key"), F.lit(bytearray(header)).alias("value"))
        )
        return [key.alias("key"), value.cast("binary").alias("value"), headers.alias("headers")]

    def _not_utf8(self, role: str, column: str) -> Any:
        from pyspark.sql import functions as F

        return F.raise_error(
            F.lit(
                f"to_store({self.store.name!r}): a row's {role} (column {column!r}) is not "
                f"valid UTF-8 text, which the {role} serde 'string' makes and the serving "
                "instances read"
            )
        )


def spark_records(
    store: ChangelogStore, columns: RowColumns, types: dict[str, str]
) -> SparkRecords | str:
    """`store`'s records from rows with column `types` (name -> Spark simple type string) as
    Spark expressions, or why Spark cannot make them (then Python writes them)."""
    if store.store_type not in ("key_value", "global_key_value"):
        return _NOT_KEY_VALUE[store.store_type]
    if not follows_kafka_default(store.partitions, store.partitioner):
        return "the store has a custom partitioner (Python)"
    if not isinstance(columns.value, str):
        return "the value is made of several columns (a JSON object)"
    if columns.tombstone is not None and types.get(columns.tombstone) != "boolean":
        return f"the tombstone column {columns.tombstone!r} is not boolean"
    key = _expression(store.key_serde, types.get(columns.key))
    if key is None:
        return _unmatched("key", store.key_serde, columns.key, types)
    value = _expression(store.value_serde, types.get(columns.value))
    if value is None:
        return _unmatched("value", store.value_serde, columns.value, types)
    return SparkRecords(store, columns.key, columns.value, columns.tombstone, key, value)


def _expression(serde: Serde[Any], spark_type: str | None) -> Expression | None:
    if spark_type is None:
        return None
    return _EXPRESSIONS.get((type(serde), spark_type))


def _unmatched(role: str, serde: Serde[Any], column: str, types: dict[str, str]) -> str:
    return (
        f"no Spark expression writes the {role} serde {serde_name(serde)!r} "
        f"of column {column!r} ({types.get(column, 'missing')}) byte for byte"
    )


def _refuse_marker_key() -> Any:
    from pyspark.sql import functions as F

    return F.raise_error(
        F.lit(
            f"key {MARKER_KEY!r} is reserved for the changelog's batch markers and cannot be stored"
        )
    )
