"""Spark's Kafka connector (`spark-sql-kafka-0-10`), the version of the installed PySpark.

PySpark's wheel ships no connector. `kafka_connector_jars()` fetches it once from Maven
Central with `mvn` into iqstate's cache (`~/.cache/iqstate/spark-sql-kafka-<version>/`,
the same mechanism as the test broker's jars) and returns the jars Spark lacks: the
connector, its token provider, `kafka-clients` and `commons-pool2`. Give them to a session
as `spark.jars`: Spark ships them to every executor itself. (`spark.jars.packages` does the
same through Spark's Ivy resolver, and needs it to reach a repository at every start.)

The connector must be exactly the PySpark version: iqstate-spark pins a PySpark whose
connector Maven Central serves.
"""

from __future__ import annotations

from pathlib import Path

CONNECTOR = "spark-sql-kafka-0-10_2.13"
_NEEDED = (CONNECTOR, "spark-token-provider-kafka-0-10_2.13", "kafka-clients", "commons-pool2")


def kafka_connector_jars(version: str | None = None, cache: Path | None = None) -> list[Path]:
    """The jars that add Spark's Kafka source and sink to a PySpark `version` session
    (default: the installed PySpark's), fetched on first use."""
    from iqstate_kafka.maven import maven_jars

    if version is None:
        import pyspark

        version = pyspark.__version__
    lib = maven_jars(
        "org.apache.spark", CONNECTOR, version, f"spark-sql-kafka-{version}", cache,
        "Spark's Kafka connector",
    )  # fmt: skip
    jars = sorted(
        path
        for path in lib.glob("*.jar")
        if any(path.name.startswith(f"{name}-") for name in _NEEDED)
    )
    found = {name for name in _NEEDED if any(j.name.startswith(f"{name}-") for j in jars)}
    if found != set(_NEEDED):
        raise RuntimeError(
            f"{lib} lacks {', '.join(sorted(set(_NEEDED) - found))}; delete the folder to "
            "fetch the connector again"
        )
    return jars
