"""Query results: one `QueryResult` per store partition, gathered in a `StateQueryResult`."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from iqstate.errors import IllegalQueryResultAccess
from iqstate.position import Position, PositionBound
from iqstate.slotted import slot_constructor

R = TypeVar("R")
R2 = TypeVar("R2")


class FailureReason(enum.Enum):
    """Why a store partition could not answer a query."""

    UNKNOWN_QUERY_TYPE = "UNKNOWN_QUERY_TYPE"
    """No layer of the store knows this query type."""
    NOT_ACTIVE = "NOT_ACTIVE"
    """The request required a running active replica and this one is not."""
    NOT_UP_TO_BOUND = "NOT_UP_TO_BOUND"
    """The partition's position does not yet dominate the request's position bound."""
    NOT_PRESENT = "NOT_PRESENT"
    """The partition exists but is not hosted on this instance."""
    DOES_NOT_EXIST = "DOES_NOT_EXIST"
    """The partition number is outside the store's partitions."""
    STORE_EXCEPTION = "STORE_EXCEPTION"
    """The store raised while answering; the message names the exception."""


def describe_store(store: object) -> str:
    """How messages name a store: its kind and its name, e.g. `memory.key_value store 'counts'`."""
    kind = getattr(store, "kind", type(store).__name__)
    name = getattr(store, "name", None)
    return f"{kind} store {name!r}" if name is not None else f"{kind} store"


class QueryResult(Generic[R]):
    """The answer of one store partition: a result, or a failure reason and message.

    `position` is the partition's position when it answered; stores set it on every
    result, failures included. Execution info is empty unless the request enabled it.
    """

    __slots__ = ("_execution_info", "_failure", "_message", "_result", "position")

    _result: R | None
    _failure: FailureReason | None
    _message: str | None
    _execution_info: list[str] | None
    position: Position | None

    def __init__(self, result: R, position: Position | None = None) -> None:
        """A success; `for_result` and `for_failure` are the named ways to build results."""
        self._result = result
        self._failure = None
        self._message = None
        self._execution_info = None
        self.position = position

    @classmethod
    def for_result(cls, result: R, position: Position | None = None) -> QueryResult[R]:
        """A success; stores answering a query give the `position` they answered at."""
        return cls(result, position)

    @classmethod
    def for_failure(cls, reason: FailureReason, message: str) -> QueryResult[Any]:
        if not isinstance(reason, FailureReason):
            raise TypeError(f"for_failure needs a FailureReason, got {reason!r}")
        instance: QueryResult[Any] = QueryResult(None)
        instance._failure = reason
        instance._message = message
        return instance

    @classmethod
    def for_unknown_query_type(
        cls, query: object, store: object, answered: Iterable[type] = (), engine: object = None
    ) -> QueryResult[Any]:
        """Kafka's message, and the query types the store does answer where it knows them;
        `engine`: the store the layers of `store` are over, named by its kind too (the kind
        a plugin registers an engine's own handlers for)."""
        kinds = sorted(kind.__name__ for kind in answered)
        it_answers = f" It answers {', '.join(kinds)}." if kinds else ""
        over = "" if engine is None else f" over {getattr(engine, 'kind', type(engine).__name__)}"
        return cls.for_failure(
            FailureReason.UNKNOWN_QUERY_TYPE,
            f"This store ({describe_store(store)}{over}) doesn't know how to execute the given "
            f"query ({query!r}).{it_answers} Contact the store maintainer if you need "
            "support for a new query type, or install a plugin that registers a handler "
            "for it.",
        )

    @classmethod
    def not_up_to_bound(
        cls, current: Position | None, bound: PositionBound, partition: int | None
    ) -> QueryResult[Any]:
        if partition is None or current is None:
            message = f"The store is not initialized yet, so it is not yet up to the bound {bound}"
        else:
            message = (
                f"For store partition {partition}, the current position {current} "
                f"is not yet up to the bound {bound}"
            )
        result = cls.for_failure(FailureReason.NOT_UP_TO_BOUND, message)
        result.position = current
        return result

    @property
    def is_success(self) -> bool:
        return self._failure is None

    @property
    def is_failure(self) -> bool:
        return self._failure is not None

    @property
    def result(self) -> R:
        """The answer; raises `IllegalQueryResultAccess` naming the failure if the query failed."""
        if self._failure is not None:
            raise IllegalQueryResultAccess(
                f"Cannot get result for failed query. Failure is {self._failure.name}: "
                f"{self._message}"
            )
        return self._result  # type: ignore[return-value]

    @property
    def failure_reason(self) -> FailureReason:
        if self._failure is None:
            raise IllegalQueryResultAccess(
                "Cannot get failure reason because this query did not fail."
            )
        return self._failure

    @property
    def failure_message(self) -> str:
        if self._failure is None:
            raise IllegalQueryResultAccess(
                "Cannot get failure message because this query did not fail."
            )
        return self._message or ""

    @property
    def execution_info(self) -> list[str]:
        """Per-layer notes, innermost first; empty unless execution info was requested."""
        info = self._execution_info
        return info if info is not None else []

    def add_execution_info(self, text: str) -> None:
        info = self._execution_info
        if info is None:
            self._execution_info = [text]
        else:
            info.append(text)

    def swap_result(self, new_result: R2) -> QueryResult[R2]:
        """A success with `new_result`, carrying this result's execution info and position."""
        if self._failure is not None:
            raise IllegalQueryResultAccess(
                "Callers must avoid calling swap_result on a failed result "
                f"({self._failure.name}: {self._message})."
            )
        swapped: QueryResult[R2] = QueryResult.for_result(new_result, self.position)
        swapped._execution_info = self._execution_info
        return swapped

    def __repr__(self) -> str:
        if self._failure is None:
            body = f"result={self._result!r}"
        else:
            body = f"failure={self._failure.name}, message={self._message!r}"
        return f"QueryResult({body}, position={self.position!r})"


class StateQueryResult(Generic[R]):
    """The answers of every store partition a request reached, by partition number."""

    __slots__ = ("_global_result", "_partition_results")

    def __init__(self, partition_results: dict[int, QueryResult[R]] | None = None) -> None:
        """Empty, or holding `partition_results` (the dict is kept, not copied)."""
        self._partition_results: dict[int, QueryResult[R]] = (
            {} if partition_results is None else partition_results
        )
        self._global_result: QueryResult[R] | None = None

    def add_result(self, partition: int, result: QueryResult[R]) -> None:
        self._partition_results[partition] = result

    def set_global_result(self, result: QueryResult[R]) -> None:
        self._global_result = result

    @property
    def partition_results(self) -> dict[int, QueryResult[R]]:
        return self._partition_results

    @property
    def global_result(self) -> QueryResult[R] | None:
        return self._global_result

    def only_partition_result(self) -> QueryResult[R] | None:
        """The single successful result with a non-`None` value (key lookups); `None` if none.

        Raises `ValueError` when several partitions returned a value.
        """
        found: QueryResult[R] | None = None
        for result in self._partition_results.values():
            if result._failure is None and result._result is not None:
                if found is not None:
                    raise ValueError(
                        "The query did not return exactly one partition result: partitions "
                        f"{self._partitions_with_values()} each returned one; read "
                        "`partition_results` for a query answered by several partitions"
                    )
                found = result
        return found

    def _partitions_with_values(self) -> list[int]:
        return sorted(
            partition
            for partition, result in self._partition_results.items()
            if result._failure is None and result._result is not None
        )

    @property
    def position(self) -> Position:
        """The merge of every partition's position (or the global result's position)."""
        if self._global_result is not None:
            return self._global_result.position or Position.empty()
        merged = Position.empty()
        for result in self._partition_results.values():
            merged = merged.merge(result.position)
        return merged

    def __repr__(self) -> str:
        return f"StateQueryResult(partition_results={self._partition_results!r})"


# The hot path's constructors (iqstate.slotted): a key lookup builds one of each, and
# `__init__` would add a Python frame to both.
success_of: Callable[[Any, Position | None], QueryResult[Any]] = slot_constructor(
    QueryResult,
    ("_result", "position"),
    {"_failure": None, "_message": None, "_execution_info": None},
)
"""`success_of(result, position)`: what `QueryResult.for_result(result, position)` gives."""
partition_results_of: Callable[[dict[int, QueryResult[Any]]], StateQueryResult[Any]] = (
    slot_constructor(StateQueryResult, ("_partition_results",), {"_global_result": None})
)
"""`partition_results_of(results)`: what `StateQueryResult(results)` gives (the dict is
kept, not copied)."""
