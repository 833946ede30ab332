"""`WrappedStore`: the base of every layer, delegating to the store beneath.

A layer answers the query types in its handler table (built once, at `init`, from the
handlers registered for its `kind`) and passes every other query down unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from iqstate.context import StateStoreContext
from iqstate.dispatch import HandlerTable, note_execution
from iqstate.position import Position, PositionBound, TopicPartition
from iqstate.queries import Query
from iqstate.results import QueryResult
from iqstate.store import QueryConfig, StateStore

S = TypeVar("S", bound=StateStore)
R = TypeVar("R")

_UNBOUNDED = PositionBound.unbounded()


class WrappedStore(StateStore, Generic[S]):
    """A layer over `wrapped`: lifecycle, position and commits pass through by default."""

    def __init__(self, wrapped: S) -> None:
        self.wrapped: S = wrapped
        self._handlers: HandlerTable = {}
        self._context: StateStoreContext | None = None

    @property
    def name(self) -> str:
        return self.wrapped.name

    @property
    def persistent(self) -> bool:
        return self.wrapped.persistent

    @property
    def is_open(self) -> bool:
        return self.wrapped.is_open

    @property
    def partition(self) -> int | None:
        return self._context.partition if self._context is not None else None

    def init(self, context: StateStoreContext) -> None:
        self.wrapped.init(context)
        self._context = context
        self._handlers = context.handlers.table_for(self.kind)

    def close(self) -> None:
        self.wrapped.close()

    @property
    def position(self) -> Position:
        return self.wrapped.position

    def update_position(self, position: Position) -> None:
        self.wrapped.update_position(position)

    def commit(self, changelog_offsets: Mapping[TopicPartition, int | None]) -> None:
        self.wrapped.commit(changelog_offsets)

    def committed_offset(self, partition: TopicPartition) -> int | None:
        return self.wrapped.committed_offset(partition)

    def prepare_commit(self) -> None:
        self.wrapped.prepare_commit()

    def handles(self, query_type: type[Query[Any]]) -> bool:
        """Whether this layer answers `query_type` itself (else it passes it down)."""
        return query_type in self._handlers

    def query_types(self) -> frozenset[type]:
        return frozenset(self._handlers)

    def passes_down(self, query_type: type[Query[Any]]) -> bool:
        """Whether this layer hands `query_type` to the store beneath, unanswered."""
        return query_type not in self._handlers

    @property
    def manages_offsets(self) -> bool:
        return self.wrapped.manages_offsets

    @property
    def atomic_commits(self) -> bool:
        return self.wrapped.atomic_commits

    def query(
        self,
        query: Query[R],
        position_bound: PositionBound = _UNBOUNDED,
        config: QueryConfig = QueryConfig.DEFAULT,
    ) -> QueryResult[R]:
        handler = self._handlers.get(type(query))
        if not config.collect_execution_info:
            if handler is None:
                return self.wrapped.query(query, position_bound, config)
            return handler(self, query, position_bound, config)
        start = time.perf_counter_ns()
        result: QueryResult[Any]
        if handler is None:
            result = self.wrapped.query(query, position_bound, config)
        else:
            result = handler(self, query, position_bound, config)
        note_execution(result, self, query, "handled" if handler else "passed down", start)
        return result

    def innermost(self) -> StateStore:
        """The engine store at the bottom of the chain."""
        store: StateStore = self.wrapped
        while isinstance(store, WrappedStore):
            store = store.wrapped
        return store

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.wrapped!r})"
