"""Query dispatch: which store kind answers which query type, as tables built once.

Plugins register a handler per query type for a store kind (`"rocksdb.key_value"`, a layer
such as `"metered.key_value"`) or for a store interface (`KeyValueStore`, `WindowStore`, or
any store class). A layer copies the table of its kind at `init`; an engine's table is
resolved along its class hierarchy (interface handlers first, the most specific class
winning) and then its kind's handlers, so the built-in queries need no registration per
engine: an engine registers only what it answers differently. Answering a query costs one
dictionary look-up per layer. A layer passes a query it has no handler for to the store
beneath; an engine without a handler answers `UNKNOWN_QUERY_TYPE`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeAlias

from iqstate.errors import PluginError
from iqstate.position import PositionBound
from iqstate.queries import Query
from iqstate.results import FailureReason, QueryResult, describe_store
from iqstate.store import (
    KeyValueStore,
    QueryConfig,
    SessionStore,
    StateStore,
    VersionedKeyValueStore,
    WindowStore,
)
from iqstate.store_exceptions import log_store_exception

QueryHandler: TypeAlias = Callable[[Any, Any, PositionBound, QueryConfig], QueryResult[Any]]
"""`handler(store, query, position_bound, config) -> QueryResult`."""

HandlerTable: TypeAlias = dict[type, QueryHandler]

_UNBOUNDED = PositionBound.unbounded()  # a singleton: every empty bound is this object

_INTERFACE_NAMES = frozenset(
    interface.__name__
    for interface in (StateStore, KeyValueStore, WindowStore, VersionedKeyValueStore, SessionStore)
)
"""The store interfaces' names: a kind string naming one would match no store at all."""


class QueryHandlerRegistry:
    """Handlers by store kind and query type, remembering which plugin registered each."""

    def __init__(self) -> None:
        self._tables: dict[str | type, HandlerTable] = {}
        self._owners: dict[tuple[str | type, type], str] = {}

    def register(
        self,
        query_type: type[Query[Any]],
        kind: str | type,
        handler: QueryHandler,
        *,
        plugin: str = "<direct>",
    ) -> None:
        """Make stores of `kind` (a kind string, or a store class or interface every
        engine store deriving from it inherits) answer `query_type` with `handler`."""
        if not isinstance(kind, str) and not (
            isinstance(kind, type) and issubclass(kind, StateStore)
        ):
            raise PluginError(
                f"plugin {plugin!r} registered a handler for {kind!r}, which is neither a "
                "store kind nor a StateStore class; the arguments are "
                "register(query_type, store_kind_or_class, handler)"
            )
        if not (isinstance(query_type, type) and issubclass(query_type, Query)):
            raise PluginError(
                f"plugin {plugin!r} registered a handler for {query_type!r}, which is not a "
                "Query subclass; the arguments are "
                "register(query_type, store_kind_or_class, handler)"
            )
        if not callable(handler):
            raise PluginError(f"plugin {plugin!r} registered a non-callable handler {handler!r}")
        if isinstance(kind, str) and kind in _INTERFACE_NAMES:
            raise PluginError(
                f"plugin {plugin!r} registered a handler of {query_type.__name__} for the "
                f"kind {kind!r}, which no store has: to answer it on every {kind}, give the "
                f"class iqstate.store.{kind} itself, not its name"
            )
        owner = self._owners.get((kind, query_type))
        if owner is not None:
            what = f"a handler for {query_type.__name__} on store kind {_target_name(kind)!r}"
            raise PluginError(conflict_message(what, owner, plugin))
        self._owners[(kind, query_type)] = plugin
        self._tables.setdefault(kind, {})[query_type] = handler

    def copy(self) -> QueryHandlerRegistry:
        """An independent registry with the same handlers, to add to without side effects."""
        duplicate = QueryHandlerRegistry()
        duplicate._tables = {kind: dict(table) for kind, table in self._tables.items()}
        duplicate._owners = dict(self._owners)
        return duplicate

    def table_for(self, kind: str) -> HandlerTable:
        """A private copy of the handlers for `kind` (empty when none are registered)."""
        return dict(self._tables.get(kind, {}))

    def table_for_store(self, store_class: type, kind: str) -> HandlerTable:
        """An engine store's handlers: those registered for its classes and interfaces,
        the most specific class winning, then those registered for its `kind`."""
        table: HandlerTable = {}
        for cls in reversed(store_class.__mro__):
            table.update(self._tables.get(cls, {}))
        table.update(self._tables.get(kind, {}))
        return table

    def query_types_of_kinds(self, prefix: str) -> frozenset[type[Query[Any]]]:
        """The query types with a handler on some store kind starting with `prefix`."""
        return frozenset(
            query_type
            for target, table in self._tables.items()
            if isinstance(target, str) and target.startswith(prefix)
            for query_type in table
        )

    def kinds(self) -> list[str]:
        return sorted(target for target in self._tables if isinstance(target, str))

    def query_types(self) -> list[type[Query[Any]]]:
        types = {query_type for table in self._tables.values() for query_type in table}
        return sorted(types, key=lambda t: (t.__module__, t.__qualname__))

    def answered_by(self, query_type: type[Query[Any]]) -> list[str]:
        """The store kinds and interfaces with a handler for `query_type`."""
        return sorted(
            _target_name(target) for target, table in self._tables.items() if query_type in table
        )

    def registrations(self) -> list[tuple[str | type, type[Query[Any]], str]]:
        """Every registration: `(kind or store class, query type, plugin)`."""
        return [(target, query, owner) for (target, query), owner in self._owners.items()]

    def owner(self, kind: str | type, query_type: type[Query[Any]]) -> str | None:
        for target, query in self._owners:
            if query is query_type and _target_name(target) == _target_name(kind):
                return self._owners[(target, query)]
        return None


def conflict_message(what: str, owner: str, plugin: str) -> str:
    """The error for `plugin` registering `what`, which `owner` (loaded first: a built-in
    before any installed plugin) already registered; the advice is about the newcomer."""
    return (
        f"plugins {owner!r} and {plugin!r} both register {what}: {owner!r} registered it "
        f"first, so {plugin!r} must rename or drop its own; or uninstall {plugin!r}, or "
        f"stop loading it with IQSTATE_BLOCK_PLUGINS={plugin}"
    )


def _target_name(target: str | type) -> str:
    """A kind as written, an interface by its class name."""
    return target if isinstance(target, str) else target.__name__


def answer(
    store: StateStore,
    handler: QueryHandler,
    query: Query[Any],
    bound: PositionBound,
    config: QueryConfig,
) -> QueryResult[Any]:
    """Run a handler the way a store that answers must: bound first, exceptions caught.

    The bound is checked against the store's position; an exception inside the handler
    becomes `STORE_EXCEPTION` naming its type and message; the result always carries the
    position the store had when it answered (unless the handler set a more precise one).
    """
    position = store.position
    if bound is not _UNBOUNDED and not position.dominates(bound.position):
        return QueryResult.not_up_to_bound(position, bound, getattr(store, "partition", None))
    try:
        result = handler(store, query, bound, config)
    except Exception as exc:  # a store failure is a per-partition result, not an exception
        log_store_exception(
            f"{describe_store(store)} partition {getattr(store, 'partition', None)} "
            f"answering {type(query).__name__}",
            exc,
        )
        result = QueryResult.for_failure(
            FailureReason.STORE_EXCEPTION,
            f"{describe_store(store)} (partition {getattr(store, 'partition', None)}) "
            f"failed to handle query "
            f"{query!r}: {type(exc).__name__}: {exc}",
        )
    if not isinstance(result, QueryResult):
        result = _not_a_result(store, query, result)
    if result.position is None:
        result.position = position
    return result


def _not_a_result(store: StateStore, query: Query[Any], returned: object) -> QueryResult[Any]:
    """The failure for a handler that returned something other than a `QueryResult` (a
    plain value, usually: `QueryResult.for_result(value)` was meant)."""
    return QueryResult.for_failure(
        FailureReason.STORE_EXCEPTION,
        f"the handler for {type(query).__name__} on {describe_store(store)} returned "
        f"{type(returned).__name__}, not a QueryResult (wrap a value in "
        "QueryResult.for_result(value))",
    )


def note_execution(
    result: QueryResult[Any], store: StateStore, query: Query[Any], verb: str, start_ns: int
) -> None:
    """Append this store's execution-info entry: which layer, what it did, how long."""
    result.add_execution_info(
        f"{describe_store(store)} {verb} {type(query).__name__} "
        f"in {time.perf_counter_ns() - start_ns}ns"
    )
