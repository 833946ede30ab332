"""Schemathesis hooks of the OpenAPI test (loaded through `SCHEMATHESIS_HOOKS`).

A page's cursor is opaque: only the service makes one, so a string schemathesis invents
is refused (400), rightly. Generated merged requests start from the first page instead.
"""

from typing import Any

import schemathesis


@schemathesis.hook
def map_body(context: Any, body: Any) -> Any:
    if isinstance(body, dict) and body.get("cursor") is not None:
        return {**body, "cursor": None}
    return body
