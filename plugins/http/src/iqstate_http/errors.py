"""Errors as responses: every one a JSON body `{"error": {"code", "message"}}`.

Client errors are 4xx with the headers HTTP asks for (`WWW-Authenticate` on 401, `Allow`
on 405); a failure the service did not expect is a 500 that closes the connection, so a
pooled client never sends its next request down a connection the server is dropping; a
client that disconnects mid-request costs one log line, not a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from iqstate import (
    InvalidStateStoreError,
    StreamsNotStartedError,
    StreamsStoppedError,
    UnknownStateStoreError,
)
from iqstate_http.codecs import BadRequest

log = logging.getLogger("iqstate_http")


class ApiError(Exception):
    """An error answer: HTTP status, a short code, a message for people, extra headers,
    and `details`: more fields of the error object (a merged page's failed partitions)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: Mapping[str, str] | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = dict(headers or {})
        self.details = dict(details or {})


def error_response(
    status: int,
    code: str,
    message: str,
    headers: Mapping[str, str] | None = None,
    details: Mapping[str, Any] | None = None,
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message, **(details or {})}},
        status_code=status,
        headers=headers,
    )


def api_error(exc: Exception) -> ApiError | None:
    """The API error for an exception from parsing or querying; `None` for any other."""
    if isinstance(exc, BadRequest):
        return ApiError(400, "bad_request", str(exc))
    if isinstance(exc, UnknownStateStoreError):
        return ApiError(404, "unknown_store", str(exc))
    if isinstance(exc, StreamsNotStartedError | StreamsStoppedError):
        return ApiError(503, "not_running", str(exc))
    if isinstance(exc, InvalidStateStoreError):
        return ApiError(503, "store_unavailable", str(exc))
    return None


def api_error_response(error: ApiError) -> JSONResponse:
    """The JSON error answer for `error`, as every route gives it."""
    return error_response(error.status, error.code, error.message, error.headers, error.details)


def unexpected_error_response(exc: Exception) -> JSONResponse:
    """A 500 without a stack trace; the server logs the traceback and closes the connection."""
    return error_response(
        500, "internal_error", f"{type(exc).__name__}: {exc}", {"Connection": "close"}
    )


async def on_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return api_error_response(exc)


async def on_http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (404 no route, 405 with its `Allow` header) as JSON."""
    assert isinstance(exc, HTTPException)
    return error_response(exc.status_code, "http_error", str(exc.detail), exc.headers)


async def on_disconnect(request: Request, exc: Exception) -> Response:
    """The connection ended before the whole request arrived: one line, nothing to answer."""
    client = f"{request.client.host}:{request.client.port}" if request.client else "a client"
    log.warning(
        "the connection of %s ended before its whole %s %s arrived (it went away, or the "
        "body timeout cut it off)", client, request.method, request.url.path,
    )  # fmt: skip
    return Response(status_code=400)  # never delivered: the connection is gone


async def on_unexpected(request: Request, exc: Exception) -> Response:
    return unexpected_error_response(exc)


HANDLERS = {
    ApiError: on_api_error,
    HTTPException: on_http_error,
    ClientDisconnect: on_disconnect,
    Exception: on_unexpected,
}
