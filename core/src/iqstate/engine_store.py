"""The base class of an engine's stores and the helpers engines share.

`EngineStore` gives an engine's store classes the shared plumbing: the handler table
built at `init`, query answering with bound checks and `STORE_EXCEPTION`, the position,
and the open/closed state, so an engine only writes its data operations.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from iqstate.context import StateStoreContext
from iqstate.dispatch import HandlerTable, answer, note_execution
from iqstate.errors import ClosedStoreError
from iqstate.position import Position, PositionBound, TopicPartition
from iqstate.queries import KeyQuery, Query
from iqstate.results import QueryResult
from iqstate.store import QueryConfig, StateStore
from iqstate.store_handlers import answer_key_query

R = TypeVar("R")

_UNBOUNDED = PositionBound.unbounded()


def apply_offset_changes(
    current: dict[TopicPartition, int], changes: Mapping[TopicPartition, int | None]
) -> None:
    """KIP-1035 commit semantics: an empty mapping clears all; a `None` offset removes one."""
    if not changes:
        current.clear()
    for tp, offset in changes.items():
        if offset is None:
            current.pop(tp, None)
        else:
            current[tp] = offset


def check_window_sizes(name: str, window_size_ms: int, retention_ms: int) -> None:
    """Window stores need `0 < window_size_ms <= retention_ms`."""
    if window_size_ms <= 0 or retention_ms < window_size_ms:
        raise ValueError(
            f"window store {name!r}: need 0 < window_size_ms <= retention_ms, got "
            f"window_size_ms={window_size_ms}, retention_ms={retention_ms}"
        )


class EngineStore(StateStore):
    """Base class of engine stores: everything but the data operations."""

    answers_key_query_by_get: ClassVar[bool] = True
    """Declares that, with the built-in `KeyQuery` handler in its table, this store answers
    a `KeyQuery` exactly as `get(key)` at `current_position`, so a store chain may read it
    that way in one call. A subclass overriding `query` or `position` is taken not to,
    unless it declares otherwise."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        overrides = "query" in cls.__dict__ or "position" in cls.__dict__
        if overrides and "answers_key_query_by_get" not in cls.__dict__:
            cls.answers_key_query_by_get = False

    def __init__(self, name: str) -> None:
        self._name = name
        self._context: StateStoreContext | None = None
        self._handlers: HandlerTable = {}
        self.current_position = Position.empty()
        """The store's position as a plain attribute: `position` returns it, and a store
        chain's fused key lookup reads it directly (the hottest path)."""
        self._open = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def is_open(self) -> bool:
        return self._open

    @property
    def context(self) -> StateStoreContext:
        if self._context is None:
            raise ClosedStoreError(f"{self.kind} store {self._name!r} has not been initialised")
        return self._context

    @property
    def partition(self) -> int | None:
        return self._context.partition if self._context is not None else None

    def init(self, context: StateStoreContext) -> None:
        if self._open:
            raise ClosedStoreError(f"{self.kind} store {self._name!r} is already open")
        self._context = context
        self._handlers = context.handlers.table_for_store(type(self), self.kind)
        self.current_position = Position.empty()
        self._open = True

    def close(self) -> None:
        self._open = False

    def handles(self, query_type: type[Query[Any]]) -> bool:
        """Whether this store has a handler for `query_type`."""
        return query_type in self._handlers

    def query_types(self) -> frozenset[type]:
        return frozenset(self._handlers)

    @property
    def key_query_is_get(self) -> bool:
        """True iff a `KeyQuery` here is answered exactly as `get(key)` at
        `current_position` (see `answers_key_query_by_get`)."""
        return self.answers_key_query_by_get and self._handlers.get(KeyQuery) is answer_key_query

    def check_offsets(self, changes: Mapping[TopicPartition, int | None]) -> None:
        """Refuse a malformed `commit` mapping before anything is written."""
        for partition, offset in changes.items():
            if not isinstance(partition, TopicPartition):
                raise TypeError(
                    f"{self.kind} store {self.name!r}: commit offsets must be keyed by "
                    f"TopicPartition, got {type(partition).__name__}"
                )
            if offset is not None and (isinstance(offset, bool) or not isinstance(offset, int)):
                raise TypeError(
                    f"{self.kind} store {self.name!r}: offset for {partition} must be an int "
                    f"or None, got {type(offset).__name__}"
                )

    def _check_open(self) -> None:
        if not self._open:
            raise self._closed_error()

    def _closed_error(self) -> ClosedStoreError:
        """The error of a read or write of this store while it is not open."""
        return ClosedStoreError(
            f"{self.kind} store {self._name!r} is not open (closed, or not initialised)"
        )

    @property
    def position(self) -> Position:
        return self.current_position

    def update_position(self, position: Position) -> None:
        self._check_open()
        self.current_position = self.current_position.merge(position)

    def query(
        self,
        query: Query[R],
        position_bound: PositionBound = _UNBOUNDED,
        config: QueryConfig = QueryConfig.DEFAULT,
    ) -> QueryResult[R]:
        handler = self._handlers.get(type(query))
        if not config.collect_execution_info:
            if handler is None:
                return self._unknown(query)
            return answer(self, handler, query, position_bound, config)
        start = time.perf_counter_ns()
        result: QueryResult[Any]
        if handler is None:
            result = self._unknown(query)
        else:
            result = answer(self, handler, query, position_bound, config)
        note_execution(result, self, query, "handled" if handler else "has no handler for", start)
        return result

    def _unknown(self, query: Query[Any]) -> QueryResult[Any]:
        result: QueryResult[Any] = QueryResult.for_unknown_query_type(query, self, self._handlers)
        result.position = self.current_position
        return result
