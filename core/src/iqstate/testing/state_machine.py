"""A hypothesis state machine that checks a key-value engine against a dict model.

It drives put / delete / put_all / update_position / commit / close+reopen and (for
persistent stores) crash+reopen, and after every step checks what a user relies on:
values, key order of ranges, the position, and committed offsets, including what
survives a reopen or a crash (exactly the last commit, never a mix).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from iqstate.context import ProcessingGuarantee
from iqstate.dispatch import QueryHandlerRegistry
from iqstate.position import Position, TopicPartition
from iqstate.queries import KeyQuery, RangeQuery
from iqstate.store import KeyValueStore
from iqstate.testing.factory import StoreFactory, make_context

STORE_NAME = "machine"

keys = st.binary(min_size=0, max_size=3).filter(bool) | st.sampled_from(
    [b"a", b"ab", b"b", b"\x00", b"\xff", b"\xff\xff"]
)
values = st.binary(min_size=0, max_size=8)
topics = st.sampled_from(["in", "other"])
partitions = st.integers(min_value=0, max_value=2)
offsets = st.integers(min_value=0, max_value=1_000)
changelog_partitions = st.builds(TopicPartition, st.just("machine-changelog"), partitions)
offset_maps = st.dictionaries(
    changelog_partitions, st.none() | st.integers(min_value=0, max_value=10_000), max_size=3
)

Crash = Callable[[KeyValueStore[bytes, bytes]], None]


class StoreStateMachine(RuleBasedStateMachine):
    """Subclass with `factory`, `persistent`, `manages_offsets` and `crash` set (see `bind`)."""

    factory: ClassVar[StoreFactory]
    persistent: ClassVar[bool] = False
    manages_offsets: ClassVar[bool] = False
    can_crash: ClassVar[bool] = False
    root: ClassVar[Path | None] = None
    query_handlers: ClassVar[QueryHandlerRegistry | None] = None
    store_config: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    def bind(
        cls,
        factory: StoreFactory,
        *,
        persistent: bool,
        manages_offsets: bool,
        crash: Crash | None = None,
        root: Path | None = None,
        query_handlers: QueryHandlerRegistry | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> type[StoreStateMachine]:
        """A concrete machine class for one engine."""
        attributes: dict[str, Any] = {
            "factory": factory,
            "persistent": persistent,
            "manages_offsets": manages_offsets,
            "can_crash": crash is not None,
            "root": root,
            "query_handlers": query_handlers,
            "store_config": dict(config or {}),
        }
        if crash is not None:
            attributes["simulate_crash"] = lambda self, store: crash(store)
        return type(f"{cls.__name__}ForEngine", (cls,), attributes)

    def simulate_crash(self, store: KeyValueStore[bytes, bytes]) -> None:
        """Abandon the store as a killed process would (set by `bind`)."""
        raise NotImplementedError("bind(..., crash=...) provides the crash")

    def __init__(self) -> None:
        super().__init__()
        self._directory = Path(tempfile.mkdtemp(prefix="iqstate-machine-", dir=self.root))
        self.model: dict[bytes, bytes] = {}
        self.committed: dict[bytes, bytes] = {}
        self.position = Position.empty()
        self.committed_position = Position.empty()
        self.offsets: dict[TopicPartition, int] = {}
        self.store = self._open()

    def _open(
        self, after_crash: bool = False, sync_commits: bool = False
    ) -> KeyValueStore[bytes, bytes]:
        # A store with atomic commits reopens after a crash under exactly-once as it is. One
        # without them refuses to (it must be rebuilt from its changelog), so it is reopened
        # under at-least-once: here we check what the crash left.
        store = self.factory.key_value(STORE_NAME)
        guarantee: ProcessingGuarantee = (
            "at_least_once" if after_crash and not store.atomic_commits else "exactly_once"
        )
        store.init(
            make_context(
                self._directory,
                STORE_NAME,
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

    # -- writes ---------------------------------------------------------------------

    @rule(key=keys, value=values)
    def put(self, key: bytes, value: bytes) -> None:
        self.store.put(key, value)
        self.model[key] = value

    @rule(key=keys)
    def delete(self, key: bytes) -> None:
        old = self.store.delete(key)
        assert old == self.model.pop(key, None), "delete must return the value the key had"

    @rule(entries=st.lists(st.tuples(keys, st.none() | values), max_size=8))
    def put_all(self, entries: list[tuple[bytes, bytes | None]]) -> None:
        self.store.put_all(entries)
        for key, value in entries:
            if value is None:
                self.model.pop(key, None)
            else:
                self.model[key] = value

    @rule(topic=topics, partition=partitions, offset=offsets)
    def update_position(self, topic: str, partition: int, offset: int) -> None:
        update = Position.empty().with_component(topic, partition, offset)
        self.store.update_position(update)
        self.position = self.position.merge(update)

    @rule(offset_map=offset_maps)
    def commit(self, offset_map: dict[TopicPartition, int | None]) -> None:
        self.store.commit(offset_map)
        self.committed = dict(self.model)
        self.committed_position = self.position
        if not offset_map:
            self.offsets.clear()
        for partition, offset in offset_map.items():
            if offset is None:
                self.offsets.pop(partition, None)
            else:
                self.offsets[partition] = offset

    # -- lifecycle ------------------------------------------------------------------

    def _after_reopen(self) -> None:
        if self.persistent:
            self.model = dict(self.committed)
            # Stores that do not manage offsets get their position back from the runtime.
            self.position = self.committed_position if self.manages_offsets else Position.empty()
        else:
            self.model, self.committed = {}, {}
            self.position = self.committed_position = Position.empty()
            self.offsets.clear()
        if not self.manages_offsets:
            self.committed_position = self.position

    @rule(sync_commits=st.booleans())
    def close_and_reopen(self, sync_commits: bool) -> None:
        self.store.close()
        assert not self.store.is_open
        self.store = self._open(sync_commits=sync_commits)
        self._after_reopen()

    @precondition(lambda self: self.persistent and self.can_crash)
    @rule(sync_commits=st.booleans())
    def crash_and_reopen(self, sync_commits: bool) -> None:
        self.simulate_crash(self.store)
        self.store = self._open(after_crash=True, sync_commits=sync_commits)
        self._after_reopen()

    # -- reads ----------------------------------------------------------------------

    @rule(key=keys)
    def get(self, key: bytes) -> None:
        assert self.store.get(key) == self.model.get(key)
        result = self.store.query(KeyQuery.with_key(key))
        assert result.is_success, result
        assert result.result == self.model.get(key)
        assert result.position == self.position

    @rule(lower=st.none() | keys, upper=st.none() | keys, descending=st.booleans())
    def range(self, lower: bytes | None, upper: bytes | None, descending: bool) -> None:
        expected = sorted(
            (k, v)
            for k, v in self.model.items()
            if (lower is None or k >= lower) and (upper is None or k <= upper)
        )
        if descending:
            expected.reverse()
        method = self.store.reverse_range if descending else self.store.range
        with method(lower, upper) as iterator:
            assert list(iterator) == expected
        query: RangeQuery[bytes, bytes] = RangeQuery.with_range(lower, upper)
        if descending:
            query = query.with_descending_keys()
        result = self.store.query(query)
        assert result.is_success, result
        with result.result as iterator:
            assert list(iterator) == expected

    @rule(prefix=keys)
    def prefix_scan(self, prefix: bytes) -> None:
        expected = sorted((k, v) for k, v in self.model.items() if k.startswith(prefix))
        with self.store.prefix_scan(prefix) as iterator:
            assert list(iterator) == expected

    @invariant()
    def position_matches(self) -> None:
        assert self.store.position == self.position

    @invariant()
    def committed_offsets_match(self) -> None:
        for partition in range(3):
            tp = TopicPartition("machine-changelog", partition)
            expected = self.offsets.get(tp) if self.manages_offsets else None
            assert self.store.committed_offset(tp) == expected, tp

    @invariant()
    def entry_count_is_plausible(self) -> None:
        assert self.store.approximate_num_entries() >= 0
