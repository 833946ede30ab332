"""The bearer token: required when configured, never silently absent, and errors that say
what HTTP expects (`WWW-Authenticate` on 401, `Allow` on 405)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from iqstate_http import QueryService, RemoteQueryClient, start_background
from iqstate_http.status import StatusError, fetch

from iqstate import Application, KeyQuery, StateQueryRequest

DATA_ROUTES = ["/v1/stores/counts/keys/spark", "/v1/metadata", "/v1/lags", "/v1/partitions",
               "/v1/stores", "/v1/metadata/stores/counts"]  # fmt: skip


def test_a_token_guards_every_data_route(app: Application) -> None:
    server = start_background(app, token="s3cret")
    try:
        for route in DATA_ROUTES:
            url = server.url + route
            missing = httpx.get(url)
            assert missing.status_code == 401
            assert missing.headers["www-authenticate"].startswith("Bearer ")
            for header in ("Bearer wrong", "Bearer"):
                wrong = httpx.get(url, headers={"Authorization": header})
                assert wrong.status_code == 401, header
                assert "invalid_token" in wrong.headers["www-authenticate"]
            for header in ("Basic s3cret", "s3cret"):  # another scheme: no Bearer token
                other = httpx.get(url, headers={"Authorization": header})
                assert other.status_code == 401, header
                assert other.headers["www-authenticate"].startswith("Bearer ")
                assert "must use the Bearer scheme" in other.json()["error"]["message"]
            assert httpx.get(url, headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert httpx.get(server.url + "/v1/health").status_code == 200
    finally:
        server.stop()


def test_iqstate_status_names_the_token_option(app: Application) -> None:
    server = start_background(app, token="s3cret")
    try:
        with pytest.raises(StatusError, match="asks for a bearer token: name its variable"):
            fetch(server.url, None)
        with pytest.raises(StatusError, match="refused the token in --token-env's variable"):
            fetch(server.url, "wrong")
        assert fetch(server.url, "s3cret")[0]["status"] == "ok"
    finally:
        server.stop()


@pytest.mark.parametrize("token", [None, "wrong"])
def test_a_client_without_the_token_is_told_so_not_sent_to_the_network(
    app: Application, token: str | None
) -> None:
    server = start_background(app, token="s3cret")
    try:
        with pytest.raises(ValueError) as refused:  # as any refused request: no retry helps
            RemoteQueryClient(server.url, token=token).query(
                StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key("spark"))
            )
        assert not isinstance(refused.value, ConnectionError)  # a refusal, not an outage
        assert "HTTP 401: the service wants a bearer token" in str(refused.value)
        assert "the client's token= must be the service's" in str(refused.value)
    finally:
        server.stop()


@pytest.mark.parametrize("token", ["", "   "])
def test_an_empty_token_is_refused(app: Application, token: str) -> None:
    with pytest.raises(ValueError, match="token is empty"):
        QueryService(app, token=token)
    with pytest.raises(ValueError, match="token is empty"):
        start_background(app, token=token)


def test_405_names_the_allowed_methods(client: httpx.Client) -> None:
    for method, route, allowed in (
        ("POST", "/v1/stores/counts/keys/spark", {"GET", "HEAD"}),
        ("DELETE", "/v1/metadata", {"GET", "HEAD"}),
        ("GET", "/v1/query", {"POST"}),
        ("PUT", "/v1/metadata/key", {"POST"}),
    ):
        response = client.request(method, route)
        assert response.status_code == 405
        assert {m.strip() for m in response.headers["allow"].split(",")} == allowed
        assert response.json()["error"]["code"] == "http_error"


@pytest.fixture
def served_app(tmp_path: Path) -> dict[str, str]:
    """An environment in which `served_app:app` is an importable Application."""
    (tmp_path / "served_app.py").write_text(
        "from iqstate import Application\n"
        f"app = Application('served', {str(tmp_path / 'state')!r})\n"
        "app.key_value_store('s', 1)\n"
    )
    paths = [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def serve_command(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "iqstate.cli", "serve", "served_app:app", *arguments]


def test_iqstate_serve_requires_the_token_it_was_given(served_app: dict[str, str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**served_app, "SERVE_TOKEN": "t0k"}
    process = subprocess.Popen(
        serve_command("--port", str(port), "--token-env", "SERVE_TOKEN"), env=env
    )
    try:
        url = f"http://127.0.0.1:{port}/v1/stores/s/keys/k"
        deadline = time.monotonic() + 20
        while True:
            try:
                response = httpx.get(url, headers={"Authorization": "Bearer t0k"})
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "iqstate serve did not come up"
                time.sleep(0.1)
        assert response.json()["value"] is None
        assert httpx.get(url).status_code == 401
    finally:
        process.terminate()
        process.wait(timeout=20)
    bad = subprocess.run(
        [sys.executable, "-m", "iqstate.cli", "serve", "no_such_module:app"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert bad.returncode != 0 and "cannot import 'no_such_module'" in bad.stderr


@pytest.mark.parametrize(("value", "says"), [(None, "is not set"), ("", "is empty")])
def test_iqstate_serve_refuses_to_start_without_its_token(
    served_app: dict[str, str], value: str | None, says: str
) -> None:
    env = {k: v for k, v in served_app.items() if k != "SERVE_TOKEN"}
    if value is not None:
        env["SERVE_TOKEN"] = value
    refused = subprocess.run(
        serve_command("--port", "1", "--token-env", "SERVE_TOKEN"),
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "SERVE_TOKEN" in refused.stderr and says in refused.stderr
