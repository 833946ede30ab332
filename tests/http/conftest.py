"""Fixtures of the HTTP tests: an application with each kind of store and key, on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from iqstate_http import start_background

from iqstate import Application


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Application]:
    application = Application("web", tmp_path)
    application.key_value_store("counts", 3, value_serde="int64")
    application.key_value_store("by-id", 2, key_serde="int64")
    application.window_store("per-minute", 2, 60_000, 3_600_000, value_serde="int64")
    application.key_value_store("raw", 2, key_serde="bytes")
    application.key_value_store("docs", 2, key_serde="json")
    with application:
        with application.begin_batch(position={"words": {0: 7}}, batch_id=1) as batch:
            batch.put_all("counts", [("spark", 3), ("kafka", 5), ("flink", 1)])
            batch.put("by-id", 42, {"name": "answer"})
            batch.put("per-minute", "spark", 2, window_start=60_000)
            batch.put("raw", b"\x00\xff", "binary")
            batch.put("docs", {"id": [1, 2]}, "a document")
        yield application


@pytest.fixture
def client(app: Application) -> Iterator[httpx.Client]:
    server = start_background(app)
    try:
        assert server.url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=server.url, timeout=10) as http:
            yield http
    finally:
        server.stop()
