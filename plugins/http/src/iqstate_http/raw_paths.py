"""Store names read from the path as sent (ASGI `raw_path`), not only the decoded one.

Routing matches the percent-decoded path, where an encoded `/` in the store's segment is a
`/` like any other: `/v1/stores/counts%2Fkeys/keys/a` decodes to
`/v1/stores/counts/keys/keys/a`, which routes as key `keys/a` of store `counts`, and
`/v1/stores/counts%2Fchanges` as the change stream of `counts`. The path as sent names
store `counts/keys` (or `counts/changes`), which no store is (a store name cannot hold
`/`): the answer must be 404, not another store's.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote

from starlette.types import ASGIApp, Receive, Scope, Send

from iqstate_http.errors import ApiError, api_error_response

_STORE_SEGMENT = {"/v1/stores/": 3, "/v1/metadata/stores/": 4}
"""The routes that name a store, and the index of its segment in the path split at `/`."""


def misnamed_store(scope: Scope) -> str | None:
    """The segment, decoded, of a request's path as sent that holds an encoded `/` at or
    before the store's segment (routing, on the decoded path, would read another store
    there); None otherwise, and when the server gives no `raw_path`."""
    raw = scope.get("raw_path")
    if not raw or b"%" not in raw:
        return None  # nothing encoded: the decoded segments are the ones sent
    path: str = scope["path"]
    for prefix, index in _STORE_SEGMENT.items():
        if path.startswith(prefix):
            sent = raw.split(b"?", 1)[0].split(b"/")
            for segment in sent[1 : index + 1]:
                named = unquote(segment.decode("latin-1"))
                if "/" in named:
                    return named
            return None
    return None


class EncodedSlashStores:
    """ASGI middleware answering a request that names a store through an encoded `/` with
    the error `refusal(scope, store)` gives (a 404, or the 401 of a missing token), before
    routing reads the decoded path as another store's (or redirects there)."""

    def __init__(self, app: ASGIApp, refusal: Callable[[Scope, str], ApiError]) -> None:
        self.app, self.refusal = app, refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        named = misnamed_store(scope) if scope["type"] == "http" else None
        if named is None:
            await self.app(scope, receive, send)
            return
        try:
            error = self.refusal(scope, named)
        except ApiError as refused:
            error = refused
        await api_error_response(error)(scope, receive, send)
