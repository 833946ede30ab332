"""This instance's answers to a query, as the JSON entries of `POST /v1/query`'s partitions.

Each entry says who answered (`host`, the replica's `role` and `lag`) and holds either the
encoded result or the failure. A result that fails while it is encoded (a value its serde
cannot read) fails its own partition with `STORE_EXCEPTION`; the other partitions keep
their answers. An answer over `max_rows` rows raises `TooManyRows`.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType
from typing import Any

from iqstate import FailureReason, Query, QueryResult
from iqstate.store_exceptions import log_store_exception
from iqstate_http.codecs import Codecs, position_to_json
from iqstate_http.replica_choice import Replica


class TooManyRows(Exception):
    """An unmerged answer would hold more rows than the service's `max_rows`."""

    def __init__(self, max_rows: int) -> None:
        super().__init__(
            f"the answer would hold more than {max_rows} rows: page through it with "
            '"merge": true and "limit"'
        )
        self.max_rows = max_rows


class _Capped:
    """A result's iterator that raises `TooManyRows` at its `budget`-th row plus one."""

    def __init__(self, rows: Any, budget: int, max_rows: int) -> None:
        self._rows, self._budget, self._max_rows = rows, budget, max_rows

    def __enter__(self) -> _Capped:
        self._rows.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Any:
        return self._rows.__exit__(exc_type, exc, tb)

    def __iter__(self) -> Iterator[Any]:
        budget = self._budget
        for row in self._rows:
            if budget == 0:
                raise TooManyRows(self._max_rows)
            budget -= 1
            yield row

    def close(self) -> None:
        self._rows.close()


def _is_rows(value: Any) -> bool:
    return hasattr(value, "__enter__") and hasattr(value, "close") and hasattr(value, "__iter__")


def failure_entry(
    reason: str, message: str, host: str, replica: Replica | None = None, position: Any = None
) -> dict[str, Any]:
    """A failed partition's entry (`reason` as `FailureReason` names it)."""
    return {
        "ok": False,
        "failure": reason,
        "message": message,
        "position": position,
        "host": host,
        "role": None if replica is None else replica.state,
        "lag": None if replica is None else replica.lag,
    }


class LocalAnswers:
    """Encodes this instance's per-partition results as entries, within a row budget."""

    def __init__(self, codecs: Codecs, store: str, host: str, max_rows: int) -> None:
        self.codecs, self.store, self.host, self.max_rows = codecs, store, host, max_rows
        self.rows = 0
        """Rows encoded so far, over every partition."""
        self.failed_while_read = 0
        """Partitions answered successfully whose answers then failed while encoded."""

    def entries(
        self,
        query: Query[Any],
        results: dict[int, QueryResult[Any]],
        replicas: dict[int, Replica | None],
    ) -> dict[str, dict[str, Any]]:
        """Every partition's entry; `TooManyRows` when the rows go over the budget."""
        entries: dict[str, dict[str, Any]] = {}
        pending = sorted(results.items())
        try:
            while pending:
                partition, result = pending.pop(0)
                entries[str(partition)] = self._entry(query, partition, result, replicas)
        finally:
            for _, result in pending:  # not encoded: release what they hold
                if result.is_success and _is_rows(result.result):
                    result.result.close()
        return entries

    def _entry(
        self,
        query: Query[Any],
        partition: int,
        result: QueryResult[Any],
        replicas: dict[int, Replica | None],
    ) -> dict[str, Any]:
        replica = replicas.get(partition)
        position = position_to_json(result.position)
        if result.is_failure:
            entry = failure_entry(
                result.failure_reason.name, result.failure_message, self.host, replica, position
            )
        else:
            value = result.result
            if _is_rows(value):
                result = result.swap_result(
                    _Capped(value, self.max_rows - self.rows, self.max_rows)
                )
            try:
                encoded = self.codecs.encode(query, result)
            except TooManyRows:
                raise
            except Exception as exc:  # a record its serde cannot read: this partition only
                if _is_rows(value):
                    value.close()
                self.failed_while_read += 1
                log_store_exception(
                    f"store {self.store!r} partition {partition} reading its "
                    f"{type(query).__name__} answer",
                    exc,
                )
                entry = failure_entry(
                    FailureReason.STORE_EXCEPTION.name,
                    f"partition {partition} failed while its answer was read: "
                    f"{type(exc).__name__}: {exc}",
                    self.host,
                    replica,
                    position,
                )
            else:
                if isinstance(encoded, list):
                    self.rows += len(encoded)
                entry = {
                    "ok": True,
                    "value": encoded,
                    "position": position,
                    "host": self.host,
                    "role": None if replica is None else replica.state,
                    "lag": None if replica is None else replica.lag,
                }
        if result.execution_info:
            entry["execution_info"] = result.execution_info
        return entry
