"""A batch's times may be timezone-aware datetimes, as the queries' may: a put at a datetime
is the put at its milliseconds, read back the same by either form of the query."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from iqstate import (
    Application,
    MultiVersionedKeyQuery,
    StateQueryRequest,
    TimestampedKeyQuery,
    ValueAndTimestamp,
    VersionedKeyQuery,
    VersionedRecord,
    Windowed,
    WindowKeyQuery,
    WindowRangeQuery,
)

NOON = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NOON_MS = 1_796_040_000_000
MINUTE = timedelta(minutes=1)
DAY_MS = 86_400_000


def answer(app: Application, store: str, query: Any) -> Any:
    result = app.query(StateQueryRequest.in_store(store).with_query(query))
    found = result.only_partition_result()
    assert found is not None and found.is_success, found
    value = found.result
    if hasattr(value, "__iter__"):
        with value as rows:
            return list(rows)
    return value


@pytest.mark.parametrize("engine", ["memory", "rocksdb"])
def test_writes_and_queries_at_datetimes_are_at_their_milliseconds(
    tmp_path: Path, engine: str
) -> None:
    app = Application("times", tmp_path)
    app.timestamped_key_value_store("t", 1, engine=engine)
    app.versioned_key_value_store("v", 1, DAY_MS, engine=engine)
    app.window_store("w", 1, window_size_ms=60_000, retention_ms=DAY_MS, engine=engine)
    app.session_store("s", 1, DAY_MS, engine=engine)
    with app:
        with app.begin_batch() as batch:
            batch.put("t", "k", "a", timestamp=NOON)
            batch.put("v", "k", "old", timestamp=NOON - MINUTE)
            batch.put("v", "k", "new", timestamp=NOON)
            batch.put("w", "k", 3, window_start=NOON)
            batch.put("s", "k", 4, session=(NOON - MINUTE, NOON))
        assert answer(app, "t", TimestampedKeyQuery.with_key("k")) == ValueAndTimestamp(
            "a", NOON_MS
        )
        old = VersionedRecord("old", NOON_MS - 60_000, NOON_MS)
        assert answer(app, "v", VersionedKeyQuery.with_key("k").as_of(NOON - MINUTE)) == old
        assert answer(app, "v", VersionedKeyQuery.with_key("k").as_of(NOON_MS - 1)) == old
        versions = MultiVersionedKeyQuery.with_key("k").from_time(NOON - MINUTE).to_time(NOON)
        assert [r.value for r in answer(app, "v", versions)] == ["new", "old"]
        windows = WindowKeyQuery.with_key_and_window_start_range("k", NOON, NOON + MINUTE)
        assert answer(app, "w", windows) == [(NOON_MS, 3)]
        sessions = answer(app, "s", WindowRangeQuery.with_key("k"))
        assert sessions == [(Windowed("k", NOON_MS - 60_000, NOON_MS), 4)]
        naive = datetime(2026, 11, 30, 12, 0)
        with pytest.raises(TypeError, match="store 'v': the timestamp of .* without a timezone"):
            with app.begin_batch() as batch:
                batch.put("v", "k", "x", timestamp=naive)
        with pytest.raises(TypeError, match="store 'w': window_start is a datetime without"):
            with app.begin_batch() as batch:
                batch.put("w", "k", 1, window_start=naive)
        with pytest.raises(TypeError, match="store 's': a session's start must be an int"):
            with app.begin_batch() as batch:
                batch.put("s", "k", 1, session=("noon", NOON))
        assert answer(app, "v", VersionedKeyQuery.with_key("k")).value == "new", "nothing lost"
