"""`StateQueryRequest`: an immutable description of one IQv2 query against one store."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar

from iqstate.errors import IqstateError
from iqstate.position import PositionBound
from iqstate.queries import Query
from iqstate.slotted import slot_constructor

R = TypeVar("R")

_UNBOUNDED = PositionBound.unbounded()


class StateQueryRequest(Generic[R]):
    """Which store to ask, which query, which partitions, and under which consistency terms.

    Every option returns a new request; a request is never modified. Its fields are
    read-only attributes (assigning one raises `AttributeError`), read directly by the
    runtime on every query.
    """

    __slots__ = (
        "is_execution_info_enabled",
        "is_require_active",
        "partition_set",
        "position_bound",
        "query",
        "store_name",
    )

    store_name: str
    query: Query[R]
    partition_set: frozenset[int] | None
    """The listed partitions, or `None` for all (`partitions` raises for all)."""
    position_bound: PositionBound
    is_require_active: bool
    is_execution_info_enabled: bool

    def __init__(
        self,
        store: str,
        query: Query[R],
        partitions: frozenset[int] | None,
        bound: PositionBound,
        require_active: bool,
        execution_info: bool,
    ) -> None:
        """Every field at once, unchecked; build requests with `in_store(name).with_query(q)`
        (the options build their copies with `_new_request`, skipping this frame)."""
        set_store, set_query, set_partitions, set_bound, set_active, set_info = _SETTERS
        set_store(self, store)
        set_query(self, query)
        set_partitions(self, partitions)
        set_bound(self, bound)
        set_active(self, require_active)
        set_info(self, execution_info)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(
            f"StateQueryRequest is immutable: use its with_... options for a changed copy "
            f"instead of setting {name!r}"
        )

    @staticmethod
    def in_store(name: str) -> InStore:
        """Start a request against the store `name`."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"StateQueryRequest.in_store needs a store name, got {name!r}")
        return _new_in_store(name)

    def _replace(
        self,
        *,
        bound: PositionBound | None = None,
        require_active: bool | None = None,
        execution_info: bool | None = None,
    ) -> StateQueryRequest[R]:
        return _new_request(
            self.store_name,
            self.query,
            self.partition_set,
            self.position_bound if bound is None else bound,
            self.is_require_active if require_active is None else require_active,
            self.is_execution_info_enabled if execution_info is None else execution_info,
        )

    def with_partitions(self, partitions: Iterable[int]) -> StateQueryRequest[R]:
        """Ask only these partitions (a copy of the iterable is kept)."""
        try:
            chosen = frozenset(partitions)
        except TypeError:
            raise TypeError(
                "StateQueryRequest.with_partitions takes an iterable of partition numbers "
                f"(for example {{0}}), got {partitions!r}"
            ) from None
        for partition in chosen:
            # `type(...) is int` first: the common case skips the isinstance calls.
            not_int = type(partition) is not int and (
                isinstance(partition, bool) or not isinstance(partition, int)
            )
            if not_int or partition < 0:
                raise ValueError(
                    f"StateQueryRequest.with_partitions: partitions must be ints >= 0, "
                    f"got {partition!r}"
                )
        return _new_request(
            self.store_name,
            self.query,
            chosen,
            self.position_bound,
            self.is_require_active,
            self.is_execution_info_enabled,
        )

    def with_all_partitions(self) -> StateQueryRequest[R]:
        return _new_request(
            self.store_name,
            self.query,
            None,
            self.position_bound,
            self.is_require_active,
            self.is_execution_info_enabled,
        )

    def with_position_bound(self, bound: PositionBound) -> StateQueryRequest[R]:
        if not isinstance(bound, PositionBound):
            raise TypeError(
                f"with_position_bound needs a PositionBound, got {type(bound).__name__}"
            )
        return self._replace(bound=bound)

    def require_active(self) -> StateQueryRequest[R]:
        """Answer only from running active replicas; the position bound still applies."""
        return self._replace(require_active=True)

    def enable_execution_info(self) -> StateQueryRequest[R]:
        return self._replace(execution_info=True)

    @property
    def is_all_partitions(self) -> bool:
        return self.partition_set is None

    @property
    def partitions(self) -> frozenset[int]:
        """The requested partitions; raises `ValueError` on an all-partitions request."""
        if self.partition_set is None:
            raise ValueError("Cannot list partitions of an 'all partitions' request")
        return self.partition_set

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StateQueryRequest):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[object, ...]:
        return (
            self.store_name,
            self.query,
            self.partition_set,
            self.position_bound,
            self.is_require_active,
            self.is_execution_info_enabled,
        )

    def __repr__(self) -> str:
        partitions = "all" if self.partition_set is None else sorted(self.partition_set)
        return (
            f"StateQueryRequest(store={self.store_name!r}, query={self.query!r}, "
            f"partitions={partitions}, bound={self.position_bound!r}, "
            f"require_active={self.is_require_active}, "
            f"execution_info={self.is_execution_info_enabled})"
        )


_FIELDS = (
    "store_name",
    "query",
    "partition_set",
    "position_bound",
    "is_require_active",
    "is_execution_info_enabled",
)
_SETTERS = tuple(StateQueryRequest.__dict__[name].__set__ for name in _FIELDS)
_new_request: Callable[..., StateQueryRequest[Any]] = slot_constructor(StateQueryRequest, _FIELDS)
"""A request from its six fields in `__init__`'s order; how the options build their copies
(one is built per query, most often twice)."""
_new_plain_request: Callable[[str, Query[Any]], StateQueryRequest[Any]] = slot_constructor(
    StateQueryRequest,
    _FIELDS[:2],
    {
        "partition_set": None,
        "position_bound": _UNBOUNDED,
        "is_require_active": False,
        "is_execution_info_enabled": False,
    },
)
"""A request with `with_query`'s defaults: all partitions, unbounded, any replica."""


class IncompleteRequestError(IqstateError, AttributeError):
    """A request was used before `with_query` gave it a query.

    An `AttributeError` too, so `hasattr` and `getattr(..., default)` keep working on it.
    """


class InStore:
    """The first half of a request: the store is chosen, the query is not yet."""

    __slots__ = ("store_name",)

    def __init__(self, store_name: str) -> None:
        self.store_name = store_name

    if not TYPE_CHECKING:  # type checkers keep reporting such uses of InStore as errors

        def __getattr__(self, name: str) -> NoReturn:
            """Anything a request has, asked of a request without a query: say what to do.

            Runs only for attributes `InStore` lacks, so wherever a request is first used
            (`Application.query`, a routing client, a getter such as `.query`, an option
            such as `.with_partitions`), the error names the missing `with_query` call.
            """
            if name.startswith("__"):
                raise AttributeError(name)
            asked = "" if name.startswith("_") else f", so no .{name}"
            raise IncompleteRequestError(
                f"StateQueryRequest.in_store({self.store_name!r}) has no query yet{asked}: "
                f"call .with_query(<query>) on it first, e.g. StateQueryRequest.in_store("
                f"{self.store_name!r}).with_query(KeyQuery.with_key(key))"
            )

    def with_query(self, query: Query[R]) -> StateQueryRequest[R]:
        if not isinstance(query, Query):
            raise TypeError(f"with_query needs a Query, got {type(query).__name__}")
        return _new_plain_request(self.store_name, query)


_new_in_store: Callable[[str], InStore] = slot_constructor(InStore, ("store_name",))
"""`in_store`'s `InStore`, once it has checked the name."""
