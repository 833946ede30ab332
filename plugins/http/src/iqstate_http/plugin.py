"""iqstate-http as a plugin: it adds the `iqstate serve` command."""

from __future__ import annotations

import argparse
import importlib
import os
from typing import Any

from iqstate.hookspecs import hookimpl


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="the Application to serve, as 'module:attribute'")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=7070)
    parser.add_argument(
        "--token-env", default=None, help="environment variable holding the bearer token"
    )


def load_application(target: str) -> Any:
    """`"package.module:app"` -> the object; the error names what could not be found."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise SystemExit(f"iqstate serve: expected 'module:attribute', got {target!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"iqstate serve: cannot import {module_name!r}: {exc}") from exc
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise SystemExit(f"iqstate serve: module {module_name!r} has no {attribute!r}") from None


def _serve(args: argparse.Namespace) -> int:
    from iqstate_http.server import serve

    app = load_application(args.target)
    token = os.environ.get(args.token_env) if args.token_env else None
    if app.state.name == "CREATED":
        app.start()
    try:
        serve(app, host=args.host, port=args.port, token=token)
    finally:
        app.close()
    return 0


@hookimpl
def iqstate_register_commands(register: Any) -> None:
    register("serve", "serve an Application's stores over HTTP", _add_arguments, _serve)
