"""iqstate's HTTP query service.

Its entry point (`iqstate_http.plugin`) is loaded by every application at start, so the
names below are imported, with the HTTP stack behind them, on first use.
"""

from typing import TYPE_CHECKING

from iqstate.lazy import lazy_exports

if TYPE_CHECKING:
    from iqstate_http.admission import RangeLimits
    from iqstate_http.client import (
        AsyncRemoteQueryClient,
        AsyncRemoteSession,
        AsyncRemoteSubscription,
        RemoteQueryClient,
        RemoteSession,
        RemoteSubscription,
    )
    from iqstate_http.client_plan import NoInstanceReached, PageError, RemoteServiceError
    from iqstate_http.client_subscribe import RefusedSubscription
    from iqstate_http.limits import ConnectionLimits
    from iqstate_http.server import BackgroundServer, serve, start_background
    from iqstate_http.service import QueryService

__all__ = [
    "AsyncRemoteQueryClient",
    "AsyncRemoteSession",
    "AsyncRemoteSubscription",
    "BackgroundServer",
    "ConnectionLimits",
    "NoInstanceReached",
    "PageError",
    "QueryService",
    "RangeLimits",
    "RefusedSubscription",
    "RemoteQueryClient",
    "RemoteServiceError",
    "RemoteSession",
    "RemoteSubscription",
    "serve",
    "start_background",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "iqstate_http.client": [
            "AsyncRemoteQueryClient",
            "AsyncRemoteSession",
            "AsyncRemoteSubscription",
            "RemoteQueryClient",
            "RemoteSession",
            "RemoteSubscription",
        ],
        "iqstate_http.client_subscribe": ["RefusedSubscription"],
        "iqstate_http.admission": ["RangeLimits"],
        "iqstate_http.client_plan": ["NoInstanceReached", "PageError", "RemoteServiceError"],
        "iqstate_http.limits": ["ConnectionLimits"],
        "iqstate_http.server": ["BackgroundServer", "serve", "start_background"],
        "iqstate_http.service": ["QueryService"],
    },
)
