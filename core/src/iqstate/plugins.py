"""The plugin manager: loads `iqstate` entry points and collects what plugins register.

The built-in engine, the built-in queries' handlers and the serdes are registered by
default plugins through the same hooks as installed ones, called through pluggy's hook
callers. Registration happens when a `PluginRegistry` is built (once per process for the
default registry); stores copy their handler tables from it at `init`, and queries read
only those tables.

Every application loads every installed plugin, so registering must stay cheap: engine
factories, handlers, commands and codecs may be registered as import paths
(`"module:attribute"`, see `iqstate.lazy`), imported when first used.

Environment:
* `IQSTATE_BLOCK_PLUGINS`: comma-separated plugin names to block (entry-point names,
  or a default plugin's name such as `memory`);
* `IQSTATE_DISABLE_PLUGIN_AUTOLOAD`: set to skip loading entry points.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pluggy

from iqstate import hookspecs
from iqstate.dispatch import QueryHandler, QueryHandlerRegistry
from iqstate.engine import Engine
from iqstate.errors import PluginError, UnknownEngineError
from iqstate.lazy import lazy
from iqstate.queries import Query
from iqstate.serdes import Serde

ENTRY_POINT_GROUP = "iqstate"
BLOCK_ENV = "IQSTATE_BLOCK_PLUGINS"
DISABLE_AUTOLOAD_ENV = "IQSTATE_DISABLE_PLUGIN_AUTOLOAD"

DEFAULT_PLUGINS: dict[str, str] = {
    "memory": "iqstate.engines.memory",
    "builtins": "iqstate.builtin_plugin",
}
"""Default plugins by name: module to import."""


def blocked_from_env() -> set[str]:
    return {name.strip() for name in os.environ.get(BLOCK_ENV, "").split(",") if name.strip()}


def make_plugin_manager(
    *,
    load_entry_points: bool | None = None,
    blocked: Iterable[str] | None = None,
    extra_plugins: Iterable[tuple[str, object]] = (),
) -> pluggy.PluginManager:
    """A plugin manager with the default plugins, installed entry points and `extra_plugins`.

    `blocked` defaults to `IQSTATE_BLOCK_PLUGINS`; entry points load unless
    `IQSTATE_DISABLE_PLUGIN_AUTOLOAD` is set or `load_entry_points` is False.
    """
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    for name in blocked_from_env() if blocked is None else set(blocked):
        manager.set_blocked(name)
    for name, module in DEFAULT_PLUGINS.items():
        if not manager.is_blocked(name):
            manager.register(importlib.import_module(module), name=name)
    if load_entry_points is None:
        load_entry_points = not os.environ.get(DISABLE_AUTOLOAD_ENV)
    if load_entry_points:
        manager.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    for name, plugin in extra_plugins:
        manager.register(plugin, name=name)
    manager.check_pending()
    return manager


@dataclass(frozen=True)
class Command:
    """An `iqstate` subcommand a plugin provides (`add_arguments` and `run` may be
    `LazyObject`s, registered as import paths)."""

    name: str
    help: str
    add_arguments: Callable[[Any], None]
    run: Callable[[Any], int]
    plugin: str


@dataclass(frozen=True)
class QueryCodec:
    """How the HTTP service reads a query type from JSON and writes its results
    (`decode` and `encode` may be `LazyObject`s, registered as import paths)."""

    name: str
    query_type: type[Query[Any]]
    decode: Callable[..., Any]
    encode: Callable[..., Any]
    plugin: str
    resume: Callable[..., Any] | None = None
    """For a query whose rows are ordered by key (a range-type query): `resume(query, key,
    serialize_key) -> (query, within)`, a query of the same rows from `key` on (inclusive;
    all of them for `None`), and `within(key_bytes)`, false once its rows have left the
    original query's (`None` when they never do). The HTTP service pages such queries
    (`"merge": true`), a page's worth at a time when the query given is a `RangeQuery`."""


@dataclass
class PluginRegistry:
    """Everything the installed plugins registered: engines, query handlers, serdes."""

    engines: dict[str, Engine] = field(default_factory=dict)
    engine_owners: dict[str, str] = field(default_factory=dict)
    query_handlers: QueryHandlerRegistry = field(default_factory=QueryHandlerRegistry)
    serdes: dict[str, Serde[Any]] = field(default_factory=dict)
    serde_owners: dict[str, str] = field(default_factory=dict)
    plugin_names: list[str] = field(default_factory=list)
    commands: dict[str, Command] = field(default_factory=dict)
    query_codecs: dict[str, QueryCodec] = field(default_factory=dict)

    @classmethod
    def from_plugin_manager(cls, manager: pluggy.PluginManager) -> PluginRegistry:
        registry = cls()
        registry.plugin_names = sorted(
            name for name, plugin in manager.list_name_plugin() if plugin is not None
        )
        hook = manager.hook
        _call_registering(hook.iqstate_register_engines, registry._engine_registrar)
        _call_registering(hook.iqstate_register_query_handlers, registry._handler_registrar)
        _call_registering(hook.iqstate_register_serdes, registry._serde_registrar)
        _call_registering(hook.iqstate_register_commands, registry._command_registrar)
        _call_registering(hook.iqstate_register_query_codecs, registry._codec_registrar)
        return registry

    def _codec_registrar(self, plugin: str) -> Callable[..., None]:
        def register(
            name: str,
            query_type: type[Query[Any]],
            decode: Callable[..., Any] | str,
            encode: Callable[..., Any] | str,
            resume: Callable[..., Any] | str | None = None,
        ) -> None:
            if name in self.query_codecs:
                owner = self.query_codecs[name].plugin
                raise PluginError(
                    f"plugins {owner!r} and {plugin!r} both register a query codec named {name!r}"
                )
            role = f"plugin {plugin!r}, query codec {name!r}"
            self.query_codecs[name] = QueryCodec(
                name,
                query_type,
                lazy(decode, f"{role}, decode"),
                lazy(encode, f"{role}, encode"),
                plugin,
                None if resume is None else lazy(resume, f"{role}, resume"),
            )

        return register

    def _command_registrar(
        self, plugin: str
    ) -> Callable[[str, str, Callable[[Any], None] | str, Callable[[Any], int] | str], None]:
        def register(
            name: str,
            help: str,
            add_arguments: Callable[[Any], None] | str,
            run: Callable[[Any], int] | str,
        ) -> None:
            if name in self.commands or name == "plugins":
                raise PluginError(f"plugin {plugin!r} registers the command {name!r} a second time")
            role = f"plugin {plugin!r}, command {name!r}"
            self.commands[name] = Command(
                name,
                help,
                lazy(add_arguments, f"{role}, add_arguments"),
                lazy(run, f"{role}, run"),
                plugin,
            )

        return register

    def _engine_registrar(self, plugin: str) -> Callable[[Engine], None]:
        def register(engine: Engine) -> None:
            if not isinstance(engine, Engine):
                raise PluginError(
                    f"plugin {plugin!r} registered {engine!r}; iqstate_register_engines takes "
                    "iqstate.engine.Engine records"
                )
            owner = self.engine_owners.get(engine.name)
            if owner is not None:
                raise PluginError(
                    f"plugins {owner!r} and {plugin!r} both register an engine named "
                    f"{engine.name!r}; uninstall one or block it with {BLOCK_ENV}={plugin}"
                )
            self.engines[engine.name] = engine.registered_by(plugin)
            self.engine_owners[engine.name] = plugin

        return register

    def _handler_registrar(
        self, plugin: str
    ) -> Callable[[type[Query[Any]], str | type, QueryHandler | str], None]:
        def register(
            query_type: type[Query[Any]], kind: str | type, handler: QueryHandler | str
        ) -> None:
            role = f"plugin {plugin!r}, handler of {getattr(query_type, '__name__', query_type)}"
            self.query_handlers.register(query_type, kind, lazy(handler, role), plugin=plugin)

        return register

    def _serde_registrar(self, plugin: str) -> Callable[[str, Serde[Any]], None]:
        def register(name: str, serde: Serde[Any]) -> None:
            if not (hasattr(serde, "serialize") and hasattr(serde, "deserialize")):
                raise PluginError(
                    f"plugin {plugin!r} registered serde {name!r} = {serde!r}, "
                    "which has no serialize/deserialize"
                )
            owner = self.serde_owners.get(name)
            if owner is not None:
                raise PluginError(
                    f"plugins {owner!r} and {plugin!r} both register a serde named {name!r}"
                )
            self.serdes[name] = serde
            self.serde_owners[name] = plugin

        return register

    def engine(self, name: str, *, store: str | None = None) -> Engine:
        """The engine called `name`; the error lists the installed engines."""
        engine = self.engines.get(name)
        if engine is None:
            who = f"store {store!r} names engine {name!r}" if store else f"engine {name!r}"
            installed = ", ".join(sorted(self.engines)) or "none"
            close = difflib.get_close_matches(name, self.engines, n=1)
            hint = (
                f"Did you mean {close[0]!r}?"
                if close
                else "Install the plugin that provides it (for example "
                f"`pip install iqstate-{name}`)."
            )
            raise UnknownEngineError(
                f"{who}, which no installed plugin provides; installed engines: {installed}. "
                + hint
            )
        return engine

    def serde(self, serde: str | Serde[Any], *, store: str | None = None) -> Serde[Any]:
        """Resolve a serde given by name (or pass a serde object through)."""
        if not isinstance(serde, str):
            if not (hasattr(serde, "serialize") and hasattr(serde, "deserialize")):
                raise TypeError(f"expected a Serde or a serde name, got {type(serde).__name__}")
            return serde
        found = self.serdes.get(serde)
        if found is None:
            where = f"store {store!r}: " if store else ""
            raise PluginError(
                f"{where}no serde named {serde!r}; registered serdes: "
                f"{', '.join(sorted(self.serdes))}"
            )
        return found


def _call_registering(
    hook: pluggy.HookCaller, registrar: Callable[[str], Callable[..., None]]
) -> None:
    """Call a registration hook through pluggy (so hook wrappers and tracing apply, as in
    pytest), with one `register` that tells which plugin's implementation is calling it:
    conflicts and `iqstate plugins` name the plugin that registered each thing."""
    owners = {impl.function.__code__: impl.plugin_name for impl in hook.get_hookimpls()}
    registrars: dict[str, Callable[..., None]] = {}

    def register(*args: Any, **kwargs: Any) -> None:
        plugin = _calling_plugin(owners)
        if plugin not in registrars:
            registrars[plugin] = registrar(plugin)
        registrars[plugin](*args, **kwargs)

    hook(register=register)


def _calling_plugin(owners: dict[Any, str]) -> str:
    """The plugin whose hook implementation is on the call stack (registration only)."""
    frame = inspect.currentframe()
    while frame is not None:
        plugin = owners.get(frame.f_code)
        if plugin is not None:
            return plugin
        frame = frame.f_back
    return "<unknown>"


_default_registry: PluginRegistry | None = None
_default_lock = threading.Lock()


def default_registry() -> PluginRegistry:
    """The registry of the default plugin manager, built on first use."""
    global _default_registry
    registry = _default_registry
    if registry is None:
        with _default_lock:
            if _default_registry is None:
                _default_registry = PluginRegistry.from_plugin_manager(make_plugin_manager())
            registry = _default_registry
    return registry


_builtin_registry: PluginRegistry | None = None


def builtin_registry() -> PluginRegistry:
    """A registry of the default plugins only (built-in engine, layers, queries, serdes):
    no entry point is loaded, so building it imports no installed plugin."""
    global _builtin_registry
    with _default_lock:
        if _builtin_registry is None:
            manager = make_plugin_manager(load_entry_points=False, blocked=())
            _builtin_registry = PluginRegistry.from_plugin_manager(manager)
        return _builtin_registry


def reset_default_registry() -> None:
    """Forget the default registry, so the next use loads plugins again."""
    global _default_registry
    with _default_lock:
        _default_registry = None
