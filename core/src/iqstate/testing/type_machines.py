"""Hypothesis state machines for the versioned and session stores of an engine, checked
against `iqstate.testing.type_models` through out-of-order puts, tombstones, session
merges, retention, commits, reopening and (for persistent engines) crashes: after a crash a
store holds exactly its last commit, stream time included."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from iqstate.context import ProcessingGuarantee
from iqstate.dispatch import QueryHandlerRegistry
from iqstate.layered_store import KeySpaceStore
from iqstate.position import Position, TopicPartition
from iqstate.queries import (
    LimitedVersionedRangeQuery,
    MultiVersionedKeyQuery,
    Query,
    VersionedKeyQuery,
    VersionedRangeQuery,
    WindowRangeQuery,
)
from iqstate.results import QueryResult
from iqstate.store import SessionStore, StateStore, VersionedKeyValueStore
from iqstate.testing.factory import StoreFactory, make_context
from iqstate.testing.type_models import SessionModel, VersionedModel
from iqstate.times import MIN_MS

RETENTION_MS = 20
"""Short against the times drawn (0-60), so retention drops versions and sessions."""
CHANGELOG = TopicPartition("machine-changelog", 0)

keys = st.sampled_from([b"a", b"ab", b"b", b"\x00", b"\xff"])
values = st.binary(min_size=0, max_size=4)
times = st.integers(min_value=0, max_value=60)
maybe_times = st.none() | times

S = TypeVar("S", bound=StateStore)
M = TypeVar("M", VersionedModel, SessionModel)


class _TypeMachine(RuleBasedStateMachine, Generic[S, M]):
    """Lifecycle shared by the machines: open, commit, reopen, crash."""

    factory: ClassVar[StoreFactory]
    persistent: ClassVar[bool] = False
    crash: ClassVar[Any] = None
    root: ClassVar[Path | None] = None
    query_handlers: ClassVar[QueryHandlerRegistry | None] = None
    store_config: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    def bind(
        cls,
        factory: StoreFactory,
        *,
        persistent: bool,
        crash: Any = None,
        root: Path | None = None,
        query_handlers: QueryHandlerRegistry | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> type[_TypeMachine[S, M]]:
        """A concrete machine for one engine; `crash(store)` abandons an engine store."""
        attributes = {
            "factory": factory,
            "persistent": persistent,
            "crash": staticmethod(crash) if crash is not None else None,
            "root": root,
            "query_handlers": query_handlers,
            "store_config": dict(config or {}),
        }
        return type(f"{cls.__name__}ForEngine", (cls,), attributes)

    def __init__(self) -> None:
        super().__init__()
        self._directory = Path(tempfile.mkdtemp(prefix="iqstate-types-", dir=self.root))
        self.model: M = self.new_model()
        self.committed: M = self.model.copy()
        self.offset: int | None = None
        self.committed_offset: int | None = None
        self.commits = 0
        self.store: S = self._open()

    def new_model(self) -> M:
        raise NotImplementedError

    def new_store(self) -> S:
        raise NotImplementedError

    def _open(self, after_crash: bool = False, sync_commits: bool = False) -> S:
        store = self.new_store()
        guarantee: ProcessingGuarantee = (
            "at_least_once" if after_crash and not store.atomic_commits else "exactly_once"
        )
        store.init(
            make_context(
                self._directory,
                "types",
                processing_guarantee=guarantee,
                query_handlers=self.query_handlers,
                config=self.store_config,
                sync_commits=sync_commits,
            )
        )
        return store

    def teardown(self) -> None:
        if self.store.is_open:
            self.store.close()
        shutil.rmtree(self._directory, ignore_errors=True)

    @rule()
    def commit(self) -> None:
        self.commits += 1
        self.store.update_position(Position.from_map({"src": {0: self.commits}}))
        self.store.commit({CHANGELOG: self.commits})
        self.committed = self.model.copy()
        self.committed_offset = self.commits

    def _reopened(self) -> None:
        if self.persistent:
            self.model = self.committed.copy()
        else:
            self.model = self.committed = self.new_model()
            self.committed_offset = None

    @rule(sync_commits=st.booleans())
    def close_and_reopen(self, sync_commits: bool) -> None:
        self.store.close()
        self.store = self._open(sync_commits=sync_commits)
        self._reopened()

    @precondition(lambda self: self.persistent and self.crash is not None)
    @rule(sync_commits=st.booleans())
    def crash_and_reopen(self, sync_commits: bool) -> None:
        assert isinstance(self.store, KeySpaceStore)
        self.crash(self.store.key_value_store)
        self.store = self._open(after_crash=True, sync_commits=sync_commits)
        self._reopened()

    @invariant()
    def offsets_are_the_last_commits(self) -> None:
        if self.store.manages_offsets:
            assert self.store.committed_offset(CHANGELOG) == self.committed_offset


class VersionedStoreMachine(_TypeMachine[VersionedKeyValueStore[bytes, bytes], VersionedModel]):
    """A versioned store against `VersionedModel`."""

    def new_model(self) -> VersionedModel:
        return VersionedModel(RETENTION_MS)

    def new_store(self) -> VersionedKeyValueStore[bytes, bytes]:
        assert self.factory.versioned is not None
        return self.factory.versioned("types", RETENTION_MS)

    @rule(key=keys, value=st.none() | values, timestamp=times)
    def put(self, key: bytes, value: bytes | None, timestamp: int) -> None:
        self.store.put(key, value, timestamp)
        self.model.put(key, value, timestamp)

    @rule(key=keys, as_of=maybe_times)
    def get(self, key: bytes, as_of: int | None) -> None:
        expected = self.model.get(key, as_of)
        assert self.store.get(key, as_of) == expected
        answer: QueryResult[Any] = self.store.query(VersionedKeyQuery(key, as_of))
        assert answer.is_success and answer.result == expected, answer

    @rule(key=keys, time_from=maybe_times, time_to=maybe_times, ascending=st.booleans())
    def versions(
        self, key: bytes, time_from: int | None, time_to: int | None, ascending: bool
    ) -> None:
        if time_from is not None and time_to is not None and time_from > time_to:
            time_from, time_to = time_to, time_from
        expected = self.model.versions_of(key, time_from, time_to, ascending)
        answer: QueryResult[Any] = self.store.query(
            MultiVersionedKeyQuery(key, time_from, time_to, ascending)
        )
        assert answer.is_success, answer
        with answer.result as found:
            assert list(found) == expected

    @rule(
        lower=st.none() | keys,
        upper=st.none() | keys,
        as_of=maybe_times,
        limit=st.none() | st.integers(1, 3),
    )
    def range_as_of(
        self, lower: bytes | None, upper: bytes | None, as_of: int | None, limit: int | None
    ) -> None:
        query: Query[Any] = (
            VersionedRangeQuery(lower, upper, as_of)
            if limit is None
            else LimitedVersionedRangeQuery(lower, upper, as_of, limit)
        )
        answer: QueryResult[Any] = self.store.query(query)
        assert answer.is_success, answer
        with answer.result as found:
            assert list(found) == self.model.range_as_of(lower, upper, as_of)[:limit]


class SessionStoreMachine(_TypeMachine[SessionStore[bytes, bytes], SessionModel]):
    """A session store against `SessionModel`, merges included: a merge deletes the
    sessions it joins and puts the joined one, as a session-windowed aggregation does."""

    def new_model(self) -> SessionModel:
        return SessionModel(RETENTION_MS)

    def new_store(self) -> SessionStore[bytes, bytes]:
        assert self.factory.session is not None
        return self.factory.session("types", RETENTION_MS)

    @rule(key=keys, value=values, start=times, length=st.integers(0, 10))
    def put(self, key: bytes, value: bytes, start: int, length: int) -> None:
        self.store.put(key, value, start, start + length)
        self.model.put(key, value, start, start + length)

    @rule(key=keys, value=values)
    def merge_sessions(self, key: bytes, value: bytes) -> None:
        joined = [s for s in self.model.sessions if s[0] == key]
        if len(joined) < 2:
            return
        start = min(s[1] for s in joined)
        end = max(s[2] for s in joined)
        for _, s_start, s_end in joined:
            self.store.put(key, None, s_start, s_end)
            self.model.put(key, None, s_start, s_end)
        self.store.put(key, value, start, end)
        self.model.put(key, value, start, end)

    @rule(key=keys, data=st.data())
    def delete(self, key: bytes, data: st.DataObject) -> None:
        mine = sorted(s for s in self.model.sessions if s[0] == key)
        if not mine:
            return
        _, start, end = data.draw(st.sampled_from(mine))
        self.store.put(key, None, start, end)
        self.model.put(key, None, start, end)

    @rule(key=st.none() | keys, time_from=times, time_to=times)
    def fetch(self, key: bytes | None, time_from: int, time_to: int) -> None:
        answer: QueryResult[Any] = self.store.query(WindowRangeQuery(time_from, time_to, key))
        assert answer.is_success, answer
        with answer.result as found:
            assert list(found) == self.model.fetch(key, time_from, time_to)

    @invariant()
    def every_session_is_there(self) -> None:
        with self.store.fetch_sessions(None, MIN_MS, 1 << 40) as found:
            assert list(found) == self.model.fetch(None, MIN_MS, 1 << 40)
