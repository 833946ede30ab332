"""The OpenAPI document describes the service exactly: schemathesis, with every check,
finds no request the service answers differently from what the document says (a change
stream's first event included: tests/http/schemathesis.toml bounds how much of each stream
it reads)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from iqstate_http import start_background
from iqstate_http.client_numbers import whole_number
from iqstate_http.openapi import number_pattern
from openapi_spec_validator import validate

from iqstate import Application

ST = [sys.executable, "-c", "from schemathesis.cli import schemathesis; schemathesis()"]
HOOKED = {
    **os.environ,
    "SCHEMATHESIS_HOOKS": "schemathesis_hooks",
    "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
}
"""Schemathesis with tests/http/schemathesis_hooks.py: generated requests carry no cursor."""
CONFIG = Path(__file__).parent / "schemathesis.toml"


def test_document_lists_every_route_and_the_stores(client: httpx.Client) -> None:
    document = client.get("/openapi.json").json()
    validate(document)
    paths = document["paths"]
    assert {
        "/",
        "/v1/query",
        "/v1/stores",
        "/v1/metadata",
        "/v1/metadata/key",
        "/v1/metadata/stores/{store}",
        "/v1/lags",
        "/v1/partitions",
        "/v1/health",
        "/v1/ready",
        "/v1/stores/counts/keys/{key}",
        "/v1/metadata/stores/per-minute/keys/{key}",
    } <= set(paths)
    assert "/v1/stores/per-minute/keys/{key}" not in paths  # window stores: 400 there
    assert "post" in paths["/v1/metadata/key"]
    stores = paths["/v1/metadata/stores/{store}"]["get"]["parameters"][0]["schema"]["enum"]
    assert stores == ["by-id", "counts", "docs", "per-minute", "raw"]
    by_id_key, lag = paths["/v1/stores/by-id/keys/{key}"]["get"]["parameters"]
    assert by_id_key["schema"]["type"] == "integer"
    assert lag["name"] == "acceptable_lag" and lag["in"] == "query"
    bodies = document["components"]["schemas"]["QueryRequest"]["oneOf"]
    fields = {field for body in bodies for field in body["properties"]}
    assert {"scope", "acceptable_lag", "merge", "limit", "cursor", "max_rows"} <= fields
    assert "422" in paths["/v1/query"]["post"]["responses"]
    assert document["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
    }
    assert "security" not in paths["/v1/query"]["post"]  # no token: nothing is required


def test_document_describes_each_stores_change_stream(client: httpx.Client) -> None:
    document = client.get("/openapi.json").json()
    paths = document["paths"]
    for store in ("by-id", "counts", "docs", "per-minute", "raw"):
        assert f"/v1/stores/{store}/changes" in paths
    operation = paths["/v1/stores/by-id/changes"]["get"]
    parameters = {p["name"]: p for p in operation["parameters"]}
    assert set(parameters) == {
        "key", "lower", "upper", "prefix", "partitions", "acceptable_lag", "max_pending",
        "cursor", "Last-Event-ID",
    }  # fmt: skip
    assert parameters["key"]["schema"]["type"] == "integer"  # by-id's keys are int64
    assert parameters["Last-Event-ID"]["in"] == "header"
    assert {"400", "404", "503"} <= set(operation["responses"])
    batch, end = operation["responses"]["200"]["content"]["text/event-stream"]["schema"]["oneOf"]
    data = batch["properties"]["data"]["contentSchema"]
    assert data["required"] == ["partition", "position", "snapshot", "changes"]
    assert end["properties"]["event"] == {"const": "end"}
    reasons = document["components"]["schemas"]["ChangeStreamEnd"]["properties"]["reason"]
    assert reasons["enum"] == ["lagged", "unavailable", "ended"]
    windows = paths["/v1/stores/per-minute/changes"]["get"]["responses"]["200"]["content"]
    (window_batch, _) = windows["text/event-stream"]["schema"]["oneOf"]
    change = window_batch["properties"]["data"]["contentSchema"]["properties"]["changes"]["items"]
    assert change["required"] == ["key", "value", "start", "end"]


def test_document_requires_the_token_the_service_requires(app: Application) -> None:
    server = start_background(app, token="s3cret")
    try:
        document = httpx.get(server.url + "/openapi.json").json()
    finally:
        server.stop()
    validate(document)
    for path, operations in document["paths"].items():
        for operation in operations.values():
            public = path in ("/", "/openapi.json", "/v1/health", "/v1/ready")
            assert ("security" in operation) is not public, path
            if not public:
                assert operation["security"] == [{"bearer": []}]
                assert "WWW-Authenticate" in operation["responses"]["401"]["headers"]


@pytest.mark.parametrize("token", [None, "s3cret"])
def test_schemathesis_finds_nothing(app: Application, tmp_path: Path, token: str | None) -> None:
    server = start_background(app, token=token)
    auth = ["-H", f"Authorization: Bearer {token}"] if token else []
    try:
        run = subprocess.run(
            [*ST, "--config-file", str(CONFIG), "run", server.url + "/openapi.json",
             "--checks", "all", "--max-examples", "20",
             "--seed", "1", "--workers", "1", "--generation-database", "none", "--no-color",
             "--request-timeout", "10", "--report-dir", str(tmp_path), *auth],
            capture_output=True, text=True, timeout=300, cwd=tmp_path, env=HOOKED,
        )  # fmt: skip
    finally:
        server.stop()
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
    assert " passed" in run.stdout


@pytest.mark.parametrize("maximum", [0, 7, 10, 100, 1009, 2147483647])
def test_the_partition_pattern_takes_exactly_what_the_service_takes(maximum: int) -> None:
    pattern = re.compile(number_pattern(maximum))
    digits = len(str(maximum))
    samples = {str(n) for n in range(min(maximum + 50, 3000))}
    samples |= {str(maximum + d) for d in range(-20, 21) if maximum + d >= 0}
    samples |= {"0" + str(maximum), "00" + str(maximum + 1), "9" * (digits + 1), "", "1x"}
    for text in samples:
        taken = whole_number(text, maximum) is not None
        assert (pattern.match(text) is not None) == taken, text
