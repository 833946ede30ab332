"""A local Spark session that stays on loopback and keeps the console readable."""

from __future__ import annotations

import os
from typing import Any


def local_session(name: str, shuffle_partitions: int = 2) -> Any:
    """`local[2]` Spark bound to 127.0.0.1, UTC session time zone, no UI, no progress bars."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (
        SparkSession.builder.master("local[2]")
        .appName(name)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
