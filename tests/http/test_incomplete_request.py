"""The routing clients name the missing `with_query` of a request, like `Application.query`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from iqstate_http import AsyncRemoteQueryClient, RemoteQueryClient, start_background

from iqstate import Application, StateQueryRequest
from iqstate.request import IncompleteRequestError

WHAT_TO_DO = r"in_store\('words'\) has no query yet.*call \.with_query\(<query>\) on it first"


def test_remote_clients_name_the_missing_with_query(tmp_path: Path) -> None:
    app = Application("requests", tmp_path)
    app.key_value_store("words", 2)
    with app:
        server = start_background(app)
        try:
            incomplete = StateQueryRequest.in_store("words")
            with RemoteQueryClient(server.url) as client:
                with pytest.raises(IncompleteRequestError, match=WHAT_TO_DO):
                    client.query(incomplete)  # type: ignore[arg-type]

            async def ask_async() -> None:
                async with AsyncRemoteQueryClient(server.url) as client:
                    await client.query(incomplete)  # type: ignore[arg-type]

            with pytest.raises(IncompleteRequestError, match=WHAT_TO_DO):
                asyncio.run(ask_async())
        finally:
            server.stop()
