"""iqstate-http as a plugin: it adds the `iqstate serve` command."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
from typing import Any

from iqstate.hookspecs import hookimpl
from iqstate_http.limits import DEFAULT_MAX_BODY, ConnectionLimits

_LIMITS = {field.name: field for field in dataclasses.fields(ConnectionLimits)}


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="the Application to serve, as 'module:attribute'")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=7070)
    parser.add_argument(
        "--token-env",
        default=None,
        help="environment variable holding the bearer token (it must be set and non-empty)",
    )
    parser.add_argument("--max-body", type=int, default=DEFAULT_MAX_BODY, help="bytes")
    for name in _LIMITS:
        number = float if name.endswith("timeout") else int
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=number,
            default=None,
            help=("seconds" if number is float else "count")
            + " (default: ConnectionLimits' default)",
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


def token_from_env(variable: str | None) -> str | None:
    """The token named by `--token-env`; a variable that is unset or empty stops the command,
    as serving without the token asked for would let anyone in."""
    if variable is None:
        return None
    token = os.environ.get(variable, "")
    if not token.strip():
        state = "is not set" if variable not in os.environ else "is empty"
        raise SystemExit(
            f"iqstate serve: --token-env {variable}: the variable {state}; set it to the "
            "bearer token, or leave --token-env out to serve without one"
        )
    return token


def _serve(args: argparse.Namespace) -> int:
    from iqstate_http.server import serve

    token = token_from_env(args.token_env)
    chosen = {name: getattr(args, name) for name in _LIMITS if getattr(args, name) is not None}
    try:
        limits = ConnectionLimits(**chosen)
    except ValueError as exc:
        raise SystemExit(f"iqstate serve: {exc}") from exc
    app = load_application(args.target)
    if app.state.name == "CREATED":
        app.start()
    try:
        serve(app, host=args.host, port=args.port, token=token, max_body=args.max_body,
              limits=limits)  # fmt: skip
    finally:
        app.close()
    return 0


@hookimpl
def iqstate_register_commands(register: Any) -> None:
    register("serve", "serve an Application's stores over HTTP", _add_arguments, _serve)
