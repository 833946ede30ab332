"""`KeySpaceStore.index_between`: how the window, session and versioned stores scan their
by-time indexes (`prefix + time + rest`). Every key with a time in the range is found,
whatever bytes follow the time (0xff and more, or none), and nothing of the next key space
(its bare first key included)."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from iqstate.context import StateStoreContext
from iqstate.engines.memory import MemoryKeyValueStore
from iqstate.layered_store import KeySpaceStore
from iqstate.serdes import Serdes

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
LATEST = (1 << 63) - 1
_time = Serdes.int64()  # the stores' own encoding of index times

index_keys = st.builds(
    lambda space, time, rest: bytes([space]) + _time.serialize(time) + rest,
    st.sampled_from([1, 2]),
    st.one_of(INT64, st.just(LATEST)),
    st.binary(max_size=4) | st.sampled_from([b"\xff", b"\xff\x01", b"\xff\xff\x00"]),
)


@given(
    keys=st.sets(index_keys | st.sampled_from([b"\x02", b"\x01"]), max_size=30),
    time_from=INT64 | st.just(LATEST),
    time_to=INT64 | st.just(LATEST),
)
@example(keys={b"\x01" + _time.serialize(LATEST) + b"\xff\x01", b"\x02"}, time_from=0,
         time_to=LATEST)  # fmt: skip
def test_an_index_scan_finds_every_key_of_its_times_and_nothing_else(
    keys: set[bytes], time_from: int, time_to: int
) -> None:
    engine = MemoryKeyValueStore("s")
    store = KeySpaceStore(engine)
    store.init(StateStoreContext("a", "s", 0))
    engine.put_all((key, b"") for key in keys)
    expected = sorted(
        key
        for key in keys
        if key[:1] == b"\x01"
        and len(key) >= 9
        and time_from <= _time.deserialize(key[1:9]) <= time_to
    )
    assert store.index_between(b"\x01", time_from, time_to) == expected
