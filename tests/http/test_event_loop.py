"""Store work of `POST /v1/query` runs off the event loop: a long range scan never stalls
the key lookups served beside it."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from iqstate_http import start_background

from iqstate import Application
from iqstate.serdes import Serde

BOUND = 10.0  # seconds any wait may take before the test fails


class GatedString(Serde[str]):
    """Strings; reading the value "gate" waits until the test opens it, as a slow scan would."""

    name = "gated-string"

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.opened = threading.Event()

    def serialize(self, value: str) -> bytes:
        return value.encode()

    def deserialize(self, data: bytes) -> str:
        if data == b"gate":
            self.reached.set()
            self.opened.wait(BOUND)
        return data.decode()


def test_key_lookups_are_answered_while_a_range_scan_is_under_way(tmp_path: Path) -> None:
    gated = GatedString()
    app = Application("scans", tmp_path)
    app.key_value_store("s", 1, value_serde=gated)
    with app:
        with app.begin_batch(batch_id=1) as batch:
            batch.put_all("s", [("a", "gate"), ("b", "quick")])
        server = start_background(app)
        try:
            with ThreadPoolExecutor(1) as scanner, httpx.Client(timeout=BOUND) as http:
                scan = scanner.submit(
                    http.post, server.url + "/v1/query",
                    json={"store": "s", "query": {"type": "range"}},
                )  # fmt: skip
                assert gated.reached.wait(BOUND), "the scan never reached the slow value"
                try:
                    lookup = httpx.get(server.url + "/v1/stores/s/keys/b", timeout=BOUND / 2)
                    assert lookup.json()["value"] == "quick"
                    assert httpx.get(server.url + "/v1/health", timeout=BOUND / 2).is_success
                finally:
                    gated.opened.set()
                scanned = scan.result(BOUND).json()["partitions"]["0"]["value"]
                assert scanned == [["a", "gate"], ["b", "quick"]]
        finally:
            server.stop()
