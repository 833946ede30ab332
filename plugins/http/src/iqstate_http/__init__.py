"""iqstate's HTTP query service."""

from iqstate_http.client import (
    AsyncRemoteQueryClient,
    AsyncRemoteSession,
    RemoteQueryClient,
    RemoteSession,
)
from iqstate_http.limits import ConnectionLimits
from iqstate_http.server import BackgroundServer, serve, start_background
from iqstate_http.service import QueryService

__all__ = [
    "AsyncRemoteQueryClient",
    "AsyncRemoteSession",
    "BackgroundServer",
    "ConnectionLimits",
    "QueryService",
    "RemoteQueryClient",
    "RemoteSession",
    "serve",
    "start_background",
]
