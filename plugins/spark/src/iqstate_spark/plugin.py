"""iqstate-spark as a plugin: it adds the `iqstate demo` command."""

from __future__ import annotations

from typing import Any

from iqstate.hookspecs import hookimpl


def _add_demo_arguments(parser: Any) -> None:
    from iqstate_spark.demo import add_arguments

    add_arguments(parser)


def _run_demo(args: Any) -> int:
    from iqstate_spark.demo import run

    return run(args)


@hookimpl
def iqstate_register_commands(register: Any) -> None:
    register(
        "demo",
        "run the embedded demo: a Spark word-count pipeline into queryable RocksDB stores",
        _add_demo_arguments,
        _run_demo,
    )
