"""The plugin manager: loads `iqstate` entry points and collects what plugins register.

The built-in engine, the built-in queries' handlers and the serdes are registered by
default plugins through the same hooks as installed ones, called through pluggy's hook
callers. Registration happens when a `PluginRegistry` is built (once per process for the
default registry); stores copy their handler tables from it at `init`, and queries read
only those tables.

Every application loads every installed plugin, so registering must stay cheap: engine
factories, handlers, commands and codecs may be registered as import paths
(`"module:attribute"`, see `iqstate.lazy`), imported when first used.

An entry point that fails to load (a typo in its path, an exception in its module, a hook
pluggy refuses) is skipped with a logged warning: the other plugins keep working, `iqstate
plugins` lists it as unavailable, and a store of an engine it would have provided fails
saying why. A plugin that loads but registers something wrong (a bad `register` call, a
name another plugin has) stops the registry with an error naming it: block it with
`IQSTATE_BLOCK_PLUGINS` to start without it.

Environment:
* `IQSTATE_BLOCK_PLUGINS`: comma-separated plugin names to block (entry-point names,
  or a default plugin's name such as `memory`);
* `IQSTATE_DISABLE_PLUGIN_AUTOLOAD`: set to skip loading entry points.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import inspect
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pluggy

from iqstate import hookspecs
from iqstate.dispatch import QueryHandler, QueryHandlerRegistry, conflict_message
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

BUILTIN_COMMANDS = frozenset({"plugins", "new-store"})
"""The subcommands of `iqstate` itself, which no plugin command may shadow."""

logger = logging.getLogger(__name__)


def blocked_from_env() -> set[str]:
    return {name.strip() for name in os.environ.get(BLOCK_ENV, "").split(",") if name.strip()}


@dataclass(frozen=True)
class PluginLoadFailure:
    """An entry point that could not be imported or registered, and why."""

    name: str
    distribution: str
    error: str

    def describe(self) -> str:
        where = f"plugin {self.name!r} (distribution {self.distribution!r})"
        return f"{where} failed to load: {self.error}"


class PluginManager(pluggy.PluginManager):
    """pluggy's manager for the `iqstate` hooks, remembering the entry points that failed
    to load (so the registry can list them and explain what they would have provided)."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT)
        self.add_hookspecs(hookspecs)
        self.load_failures: dict[str, PluginLoadFailure] = {}

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> None:
        """Register the installed entry points of `group` one by one; one that fails is
        skipped with a warning, so one broken plugin does not stop every application."""
        for distribution in importlib.metadata.distributions():
            for entry_point in distribution.entry_points:
                if (
                    entry_point.group != group
                    or self.has_plugin(entry_point.name)
                    or self.is_blocked(entry_point.name)
                ):
                    continue
                try:
                    self._register_entry_point(entry_point)
                except Exception as error:
                    self._skip(entry_point.name, distribution.name, error)
                else:  # another distribution's entry point of that name may have failed
                    self.load_failures.pop(entry_point.name, None)

    def _register_entry_point(self, entry_point: importlib.metadata.EntryPoint) -> None:
        """Import and register one entry point; undone when its hooks are refused."""
        self.register_checked(entry_point.load(), entry_point.name)

    def register_checked(self, plugin: object, name: str) -> None:
        """Register `plugin` as `name`, refusing a hook iqstate does not have (`PluginError`,
        the registration undone) and warning of hook functions that would do nothing."""
        self.register(plugin, name=name)
        try:
            self._check_hooks_known(plugin, name)
        except Exception:
            self.unregister(name=name)
            raise
        self._warn_hooks_doing_nothing(plugin, name)

    def _warn_hooks_doing_nothing(self, plugin: object, name: str) -> None:
        """Warn about hook functions pluggy registers silently as nothing: one named like a
        hook but without `@hookimpl`, or one without the `register` parameter."""
        hooks = set(_hook_names())
        for attribute in dir(plugin):
            if attribute not in hooks:
                continue
            if self.parse_hookimpl_opts(plugin, attribute) is None:
                logger.warning(
                    "iqstate: plugin %r defines %s without @hookimpl, so it is never called",
                    name,
                    attribute,
                )
            elif "register" not in inspect.signature(getattr(plugin, attribute)).parameters:
                logger.warning(
                    "iqstate: plugin %r implements %s without its register parameter, so it "
                    "registers nothing",
                    name,
                    attribute,
                )

    def _check_hooks_known(self, plugin: object, name: str) -> None:
        """Refuse a plugin implementing a hook iqstate does not have (a misspelt name would
        otherwise register nothing, silently)."""
        for caller in self.get_hookcallers(plugin) or []:
            if caller.has_spec() or all(
                impl.optionalhook for impl in caller.get_hookimpls() if impl.plugin is plugin
            ):
                continue
            close = difflib.get_close_matches(caller.name, _hook_names(), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise PluginError(
                f"plugin {name!r} implements {caller.name!r}, which is not an iqstate hook"
                f"{hint} (the hooks: {', '.join(_hook_names())})"
            )

    def _skip(self, name: str, distribution: str, error: Exception) -> None:
        failure = PluginLoadFailure(name, distribution, f"{type(error).__name__}: {error}")
        self.load_failures[name] = failure
        logger.warning(
            "iqstate: %s; skipping it. Fix or uninstall %r, or stop loading it with %s=%s",
            failure.describe(),
            distribution,
            BLOCK_ENV,
            name,
        )


def _hook_names() -> list[str]:
    return [name for name in vars(hookspecs) if name.startswith("iqstate_register_")]


def make_plugin_manager(
    *,
    load_entry_points: bool | None = None,
    blocked: Iterable[str] | None = None,
    extra_plugins: Iterable[tuple[str, object]] = (),
) -> PluginManager:
    """A plugin manager with the default plugins, installed entry points and `extra_plugins`.

    `blocked` defaults to `IQSTATE_BLOCK_PLUGINS`; entry points load unless
    `IQSTATE_DISABLE_PLUGIN_AUTOLOAD` is set or `load_entry_points` is False. An entry
    point that fails to load is skipped (see `PluginManager.load_entry_points`).
    """
    manager = PluginManager()
    for name in blocked_from_env() if blocked is None else set(blocked):
        manager.set_blocked(name)
    for name, module in DEFAULT_PLUGINS.items():
        if not manager.is_blocked(name):
            manager.register(importlib.import_module(module), name=name)
    if load_entry_points is None:
        load_entry_points = not os.environ.get(DISABLE_AUTOLOAD_ENV)
    if load_entry_points:
        manager.load_entry_points()
    for name, plugin in extra_plugins:
        manager.register_checked(plugin, name)  # as an entry point's
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
    blocked_plugins: list[str] = field(default_factory=list)
    failed_plugins: dict[str, PluginLoadFailure] = field(default_factory=dict)

    @classmethod
    def from_plugin_manager(cls, manager: pluggy.PluginManager) -> PluginRegistry:
        registry = cls()
        names = manager.list_name_plugin()  # in registration order: defaults first
        registry.plugin_names = sorted(name for name, plugin in names if plugin is not None)
        registry.blocked_plugins = sorted(name for name, plugin in names if plugin is None)
        if isinstance(manager, PluginManager):
            registry.failed_plugins = dict(manager.load_failures)
        order = {name: rank for rank, (name, _) in enumerate(names)}
        hook = manager.hook
        _call_registering(hook.iqstate_register_engines, registry._engine_registrar, order)
        _call_registering(hook.iqstate_register_query_handlers, registry._handler_registrar, order)
        _call_registering(hook.iqstate_register_serdes, registry._serde_registrar, order)
        _call_registering(hook.iqstate_register_commands, registry._command_registrar, order)
        _call_registering(hook.iqstate_register_query_codecs, registry._codec_registrar, order)
        registry._warn_unmatched_kinds()
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
                raise PluginError(conflict_message(f"a query codec named {name!r}", owner, plugin))
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
            if name in BUILTIN_COMMANDS:
                raise PluginError(
                    f"plugin {plugin!r} registers the command {name!r}, which is a built-in "
                    f"`iqstate {name}` command; the plugin must name its command otherwise"
                )
            if name in self.commands:
                owner = self.commands[name].plugin
                raise PluginError(conflict_message(f"the command {name!r}", owner, plugin))
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
                what = f"an engine named {engine.name!r}"
                raise PluginError(conflict_message(what, owner, plugin))
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
                raise PluginError(conflict_message(f"a serde named {name!r}", owner, plugin))
            self.serdes[name] = serde
            self.serde_owners[name] = plugin

        return register

    def engine(self, name: str, *, store: str | None = None) -> Engine:
        """The engine called `name`; the error lists the installed engines."""
        engine = self.engines.get(name)
        if engine is None:
            who = f"store {store!r} names engine {name!r}" if store else f"engine {name!r}"
            installed = ", ".join(sorted(self.engines)) or "none"
            raise UnknownEngineError(
                f"{who}, which no installed plugin provides; installed engines: {installed}. "
                + self._missing_engine_hint(name)
            )
        return engine

    def _missing_engine_hint(self, name: str) -> str:
        """Why engine `name` is missing when that is known (its plugin is blocked or failed
        to load), else a close name or the plugin to install."""
        failure = self.failed_plugins.get(name) or next(
            (f for f in self.failed_plugins.values() if f.distribution == f"iqstate-{name}"),
            None,
        )
        if failure is not None:
            return f"The {failure.describe()}; fix or reinstall {failure.distribution!r}."
        if name in self.blocked_plugins:
            return (
                f"The plugin providing it, {name!r}, is blocked by {BLOCK_ENV}; "
                f"remove {name!r} from {BLOCK_ENV} to use it."
            )
        close = difflib.get_close_matches(name, self.engines, n=1)
        if close:
            return f"Did you mean {close[0]!r}?"
        hint = f"Install the plugin that provides it (for example `pip install iqstate-{name}`)."
        if self.failed_plugins:
            failed = "; ".join(f.describe() for f in self.failed_plugins.values())
            hint += f" Plugins that failed to load (one may provide it): {failed}."
        return hint

    def _known_kinds(self) -> set[str]:
        """The store kinds known without importing anything: the installed engines' and
        the layers' the built-in plugins register handlers for. An engine without a window,
        versioned or session store of its own has no such kind (its versioned and session
        stores are `layered.versioned` and `layered.session`)."""
        known = {
            f"{name}.{suffix}"
            for name, engine in self.engines.items()
            for suffix, factory in (
                ("key_value", engine.key_value_store),
                ("window", engine.window_store),
                ("versioned", engine.versioned_store),
                ("session", engine.session_store),
            )
            if factory is not None
        }
        known.update(
            kind
            for kind, _, owner in self.query_handlers.registrations()
            if isinstance(kind, str) and owner in DEFAULT_PLUGINS
        )
        return known

    def _warn_unmatched_kinds(self) -> None:
        """Warn about handlers registered for a kind no installed engine or layer has, though
        its engine or layer is installed (`dictengine.keyvalue` for `dictengine.key_value`):
        they would never answer. Kinds of engines not installed here are left alone."""
        known = self._known_kinds()
        prefixes = {kind.partition(".")[0] for kind in known}
        for kind, query_type, owner in self.query_handlers.registrations():
            if isinstance(kind, str) and kind not in known and kind.partition(".")[0] in prefixes:
                close = difflib.get_close_matches(kind, known, n=1)
                logger.warning(
                    "iqstate: plugin %r registered a handler for %s on store kind %r, which no "
                    "installed engine or layer has, so it never answers%s",
                    owner,
                    query_type.__name__,
                    kind,
                    f"; did you mean {close[0]!r}?" if close else "",
                )

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
    hook: pluggy.HookCaller,
    registrar: Callable[[str], Callable[..., None]],
    order: Mapping[str, int],
) -> None:
    """Call a registration hook through pluggy (so hook wrappers and tracing apply, as in
    pytest), with one `register` that tells which plugin's implementation is calling it:
    conflicts and `iqstate plugins` name the plugin that registered each thing.

    pluggy calls the last registered plugin first, so the calls are collected and applied
    in the plugins' registration `order` (defaults first): a name belongs to the plugin
    loaded first, and a conflict blames the newcomer, not the built-in."""
    owners: dict[Any, list[tuple[object, str]]] = {}
    for impl in hook.get_hookimpls():
        owners.setdefault(impl.function.__code__, []).append((impl.plugin, impl.plugin_name))
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def register(*args: Any, **kwargs: Any) -> None:
        calls.append((_calling_plugin(owners), args, kwargs))

    hook(register=register)
    registrars: dict[str, Callable[..., None]] = {}
    for plugin, args, kwargs in sorted(calls, key=lambda call: order.get(call[0], len(order))):
        if plugin not in registrars:
            registrars[plugin] = registrar(plugin)
        registrars[plugin](*args, **kwargs)


def _calling_plugin(owners: dict[Any, list[tuple[object, str]]]) -> str:
    """The plugin whose hook implementation is on the call stack (registration only):
    found by the implementation's code, and among plugins sharing it (instances of one
    class) by the instance the method runs on."""
    frame = inspect.currentframe()
    while frame is not None:
        candidates = owners.get(frame.f_code)
        if candidates is not None:
            instance = frame.f_locals.get("self")
            return next(
                (name for plugin, name in candidates if plugin is instance), candidates[0][1]
            )
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
