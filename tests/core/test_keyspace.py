"""`time_index_upper`: the bound the window, session and versioned stores scan their
by-time indexes with; every index key with a time at or before the limit is under it,
whatever bytes follow the time, and none after."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from iqstate.keyspace import time_index_upper
from iqstate.serdes import Serdes

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
_time = Serdes.int64()  # the stores' own encoding of index times


@given(
    prefix=st.binary(min_size=1, max_size=2).filter(lambda p: p != b"\xff" * len(p)),
    limit=INT64,
    time=INT64,
    rest=st.binary(min_size=1, max_size=6),
)
@example(prefix=b"\x01", limit=(1 << 63) - 1, time=(1 << 63) - 1, rest=b"\xff\x01")
@example(prefix=b"\x01", limit=5, time=5, rest=b"\xff\xff\x00")
def test_an_index_key_is_under_the_bound_exactly_when_its_time_is_within_the_limit(
    prefix: bytes, limit: int, time: int, rest: bytes
) -> None:
    upper = time_index_upper(prefix, limit)
    key = prefix + _time.serialize(time) + rest
    assert (key <= upper) == (time <= limit)
    other_space = bytes([prefix[0] + 1]) if prefix[0] < 0xFF else None
    if other_space is not None:
        assert upper <= other_space, "nothing of the next key space"
