"""The key route's direct answer (`KeyRouteFirst`) must be indistinguishable from the routed
one: same status, body and content type for hits, misses, odd keys and every error."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from iqstate_http import QueryService

from iqstate import Application

PATHS = [
    "/v1/stores/counts/keys/spark",  # a hit
    "/v1/stores/counts/keys/nope",  # a miss: value null
    "/v1/stores/counts/keys/",  # the empty key
    "/v1/stores/counts/keys/a/keys/b",  # slashes, and the route's own words, in the key
    "/v1/stores/counts/keys/%C3%BCber%20all",  # percent-encoded UTF-8 and a space
    "/v1/stores/by-id/keys/42",
    "/v1/stores/by-id/keys/forty-two",  # a key the int64 serde cannot read: 400
    "/v1/stores/raw/keys/AP8=",  # base64 bytes
    "/v1/stores/raw/keys/!!",  # not base64: 400
    "/v1/stores/docs/keys/%7B%22id%22%3A%5B1%2C2%5D%7D",  # a JSON key
    "/v1/stores/per-minute/keys/spark",  # a window store: 400
    "/v1/stores/missing/keys/spark",  # no such store: 404
    "/v1/stores//keys/spark",  # no store name
    "/v1/stores/counts/keys",  # not the key route: Starlette redirects to keys/
    "/v1/stores/counts%2Fkeys/keys/spark",  # store 'counts/keys' (none), not 'counts'
]


def answers(asgi: Any, method: str = "GET") -> list[tuple[int, str, bytes]]:
    async def ask() -> list[tuple[int, str, bytes]]:
        transport = httpx.ASGITransport(app=asgi)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            found = []
            for path in PATHS:
                response = await http.request(method, path)
                found.append(
                    (response.status_code, response.headers.get("content-type"), response.content)
                )
            return found

    return asyncio.run(ask())


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_the_direct_answer_is_the_routed_answer(app: Application, method: str) -> None:
    service = QueryService(app)
    direct, routed = answers(service.asgi(), method), answers(service.routed_asgi(), method)
    assert direct == routed
    assert direct[0] == (200, "application/json", b"" if method == "HEAD" else direct[0][2])
    if method == "GET":
        assert b'"value":3' in direct[0][2] and b'"value":null' in direct[1][2]
        assert [status for status, _, _ in direct][6:] == [
            400,
            200,
            400,
            200,
            400,
            404,
            404,
            307,
            404,
        ]


def test_a_token_is_checked_on_the_key_route_too(app: Application) -> None:
    service = QueryService(app, token="s3cret")

    async def ask(headers: dict[str, str], path: str = "/v1/stores/counts/keys/spark") -> int:
        transport = httpx.ASGITransport(app=service.asgi())
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            response = await http.get(path, headers=headers)
            return response.status_code

    assert asyncio.run(ask({})) == 401
    assert asyncio.run(ask({"Authorization": "Bearer s3cret"})) == 200
    # a store named through an encoded '/' is none (404, listing the stores): token first
    misnamed = "/v1/stores/counts%2Fkeys/keys/spark"
    assert asyncio.run(ask({}, misnamed)) == 401
    assert asyncio.run(ask({"Authorization": "Bearer s3cret"}, misnamed)) == 404


def test_a_bug_on_the_key_route_is_the_500_every_route_gives_and_runs_once(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The direct answer declines only what it knows (other paths, a token to check); a bug
    is not retried through the routed app, which would hide it and do the work twice."""
    service = QueryService(app)
    calls = []

    def broken(request: Any) -> Any:
        calls.append(request)
        raise RuntimeError("a bug in the query path")

    monkeypatch.setattr(app, "query", broken)

    async def ask() -> httpx.Response:
        transport = httpx.ASGITransport(app=service.asgi(), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return await http.get("/v1/stores/counts/keys/spark")

    response = asyncio.run(ask())
    assert response.status_code == 500
    assert response.json() == {
        "error": {"code": "internal_error", "message": "RuntimeError: a bug in the query path"}
    }
    assert response.headers["connection"] == "close"
    assert len(calls) == 1
