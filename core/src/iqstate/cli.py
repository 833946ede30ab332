"""The `iqstate` command."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from iqstate.engine import Engine
from iqstate.errors import IqstateError, PluginError
from iqstate.lazy import resolved
from iqstate.plugins import Command, PluginRegistry, default_registry
from iqstate.scaffold import ScaffoldError, render
from iqstate.session_store import LayeredSessionStore
from iqstate.versioned_store import LayeredVersionedStore


def _engine_stores(registry: PluginRegistry, name: str) -> list[tuple[str, type]]:
    """The store kinds and classes an engine's factories produce (imported now: this
    command is where an engine registered by import path gets loaded to be described)."""
    engine = registry.engines[name]
    stores: list[tuple[str, type]] = []
    for factory, default_kind in (
        (engine.key_value_store, f"{name}.key_value"),
        (engine.window_store, f"{name}.window"),
        (engine.versioned_store or LayeredVersionedStore, f"{name}.versioned"),
        (engine.session_store or LayeredSessionStore, f"{name}.session"),
    ):
        if factory is not None:
            target = resolved(factory)
            store_class = target if isinstance(target, type) else object
            stores.append((getattr(target, "kind", default_kind), store_class))
    return stores


def _store_types(engine: Engine) -> list[str]:
    """The store types of SPEC 6.1 an engine provides, and how."""
    kept = "kept in its key-value stores"
    return [
        "key_value",
        *(["window"] if engine.window_store is not None else []),
        "timestamped_key_value",
        "versioned_key_value" + ("" if engine.versioned_store is not None else f" ({kept})"),
        "session" + ("" if engine.session_store is not None else f" ({kept})"),
        "global_key_value",
    ]


def describe_plugins(registry: PluginRegistry) -> dict[str, Any]:
    """What `iqstate plugins` reports, as data; an engine whose stores cannot be imported
    is listed with the error instead of stopping the report."""
    handlers = registry.query_handlers
    engines = []
    for name in sorted(registry.engines):
        engine = registry.engines[name]
        try:
            stores, error = _engine_stores(registry, name), None
        except PluginError as failure:
            stores, error = [], str(failure)
        by_kind = {
            kind: sorted(q.__name__ for q in handlers.table_for_store(store_class, kind))
            for kind, store_class in stores
        }
        answers = {name for names in by_kind.values() for name in names}
        engines.append(
            {
                "name": name,
                "plugin": registry.engine_owners[name],
                "persistent": engine.persistent,
                "store_kinds": [kind for kind, _ in stores],
                "store_types": _store_types(engine),
                "answers": sorted(answers),
                "answers_by_kind": by_kind,
                "description": engine.description,
                "error": error,
            }
        )
    queries = [
        {
            "query": f"{query_type.__module__}.{query_type.__qualname__}",
            "answered_by": [
                {"kind": kind, "plugin": handlers.owner(kind, query_type)}
                for kind in handlers.answered_by(query_type)
            ],
        }
        for query_type in handlers.query_types()
    ]
    return {
        "plugins": registry.plugin_names,
        "unavailable_plugins": [
            {"name": f.name, "distribution": f.distribution, "error": f.error}
            for f in registry.failed_plugins.values()
        ],
        "blocked_plugins": registry.blocked_plugins,
        "engines": engines,
        "query_types": queries,
        "serdes": {name: registry.serde_owners[name] for name in sorted(registry.serdes)},
    }


def _print_plugins(report: dict[str, Any]) -> None:
    print("Plugins: " + ", ".join(report["plugins"]))
    for failed in report["unavailable_plugins"]:
        print(
            f"  {failed['name']}  (unavailable: distribution {failed['distribution']} failed "
            f"to load: {failed['error']})"
        )
    if report["blocked_plugins"]:
        print("Blocked (IQSTATE_BLOCK_PLUGINS): " + ", ".join(report["blocked_plugins"]))
    print("\nEngines:")
    for engine in report["engines"]:
        durability = "persistent" if engine["persistent"] else "in-memory"
        print(f"  {engine['name']}  ({durability}, from plugin {engine['plugin']})")
        if engine["description"]:
            print(f"      {engine['description']}")
        if engine["error"]:
            print(f"      unavailable: {engine['error']}")
            continue
        print(f"      store types: {', '.join(engine['store_types'])}")
        print("      store kinds, each answering (a handler reaches only the kind it names):")
        for kind, answered in engine["answers_by_kind"].items():
            print(f"        {kind}: {', '.join(answered) or '(no query types)'}")
    print("\nQuery types (store kind <- plugin that registered the handler):")
    for query in report["query_types"]:
        print(f"  {query['query']}")
        for answer in query["answered_by"]:
            print(f"      {answer['kind']}  <- {answer['plugin']}")
    print("\nSerdes: " + ", ".join(f"{n} ({p})" for n, p in report["serdes"].items()))


def new_store(name: str, output_dir: str, template: str | None, registry: PluginRegistry) -> int:
    """Render the store plugin template for `name`; a refused name is one line and exit code 2."""
    taken = set(registry.engines) | set(registry.plugin_names) | set(registry.failed_plugins)
    try:
        created = render(name, Path(output_dir), Path(template) if template else None, taken)
    except ScaffoldError as error:
        print(f"iqstate new-store: {error}", file=sys.stderr)
        return 2
    print(f"created {created}: cd there, then, in this environment (it has iqstate), "
          "pip install -e '.[testing]' && python -m pytest")  # fmt: skip
    return 0


def _add_plugin_command(commands: Any, command: Command) -> None:
    """Add a plugin's subcommand. One whose `add_arguments` fails (its module does not
    import, say) is reported and left unusable, so the other subcommands keep working."""
    subparser = commands.add_parser(command.name, help=command.help, description=command.help)
    subparser.set_defaults(iqstate_parser=subparser)
    try:
        command.add_arguments(subparser)
    except Exception as error:
        reason = (
            f"the command {command.name!r} of plugin {command.plugin!r} is unavailable: "
            f"{type(error).__name__}: {error}"
        )
        print(f"iqstate: warning: {reason}", file=sys.stderr)
        subparser.set_defaults(iqstate_unavailable_command=reason)


def _run_plugin_command(command: Command, args: argparse.Namespace) -> int:
    """Run a plugin's subcommand. An iqstate error it raises (a state directory in use, a
    broker that does not answer, its module missing) is a message and exit status 1; any
    other exception is a bug of the command: its traceback follows a line naming the plugin."""
    try:
        return command.run(args)
    except IqstateError as error:
        print(f"iqstate {command.name}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception:
        print(
            f"iqstate {command.name}: the command of plugin {command.plugin!r} failed "
            "unexpectedly (its traceback follows: report it to the plugin's authors)",
            file=sys.stderr,
        )
        raise


def unrecognized(arguments: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """argparse's message for arguments `parser` does not take, with the option meant
    where one is close (`--state_dir`: `--state-dir`)."""
    options = sorted(set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", parser.format_usage())))
    meant = []
    for argument in arguments:
        if argument.startswith("-"):
            given = argument.split("=", 1)[0]
            close = difflib.get_close_matches(given.replace("_", "-"), options, n=1)
            if close and close[0] != given:
                meant.append(f"{given}: did you mean {close[0]}?")
    hint = f" ({'; '.join(meant)})" if meant else ""
    return f"unrecognized arguments: {' '.join(arguments)}{hint}"


def build_parser(registry: PluginRegistry) -> argparse.ArgumentParser:
    """The `iqstate` parser: the built-in subcommands, then those of the plugins."""
    parser = argparse.ArgumentParser(prog="iqstate", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    plugins = commands.add_parser(
        "plugins", help="list installed engines, query types and which engine answers which"
    )
    plugins.add_argument("--json", action="store_true", help="print JSON instead of text")
    plugins.set_defaults(iqstate_parser=plugins)
    scaffold = commands.add_parser("new-store", help="scaffold a new store plugin distribution")
    scaffold.set_defaults(iqstate_parser=scaffold)
    scaffold.add_argument("name", help="the engine's name, e.g. my-store")
    scaffold.add_argument("--output-dir", default=".")
    scaffold.add_argument(
        "--template", default=None, help="another template (default: the one iqstate ships)"
    )
    for command in registry.commands.values():
        _add_plugin_command(commands, command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # the reader stopped early (`iqstate plugins | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return 0


def _main(argv: Sequence[str] | None) -> int:
    registry = default_registry()
    parser = build_parser(registry)
    args, unknown = parser.parse_known_args(argv)
    # the command line as given, for a plugin command that runs itself again in a worker
    args.iqstate_argv = list(sys.argv[1:] if argv is None else argv)
    if unknown:  # reported by the subcommand's parser: its usage, and the flag meant
        command_parser: argparse.ArgumentParser = getattr(args, "iqstate_parser", parser)
        command_parser.error(unrecognized(unknown, command_parser))
    unavailable = getattr(args, "iqstate_unavailable_command", None)
    if unavailable is not None:
        print(f"iqstate {args.command}: {unavailable}", file=sys.stderr)
        return 2
    if args.command == "new-store":
        return new_store(args.name, args.output_dir, args.template, registry)
    if args.command in registry.commands:
        return _run_plugin_command(registry.commands[args.command], args)
    if args.command == "plugins":
        report = describe_plugins(registry)
        if args.json:
            json.dump(report, sys.stdout, indent=2)
            print()
        else:
            _print_plugins(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
