"""iqstate-spark as a plugin: it adds the `iqstate demo` command, embedded or `--cluster`."""

from __future__ import annotations

from typing import Any

from iqstate.hookspecs import hookimpl


def _add_demo_arguments(parser: Any) -> None:
    from iqstate_spark.cluster_demo import add_arguments as add_cluster_arguments
    from iqstate_spark.demo_parts import add_common_arguments

    add_common_arguments(parser)
    add_cluster_arguments(parser)


def _run_demo(args: Any) -> int:
    if args.cluster:
        from iqstate_spark.cluster_demo import run as run_cluster

        return run_cluster(args)
    from iqstate_spark.demo import run

    return run(args)


@hookimpl
def iqstate_register_commands(register: Any) -> None:
    register(
        "demo",
        "run the demo: a Spark word-count pipeline into queryable stores, embedded in one "
        "process (RocksDB) or with --cluster (a Kafka broker, Spark executors and three "
        "serving instances)",
        _add_demo_arguments,
        _run_demo,
    )
