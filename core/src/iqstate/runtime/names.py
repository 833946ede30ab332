"""Validation of the names and options users declare, with errors that say what is wrong."""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[A-Za-z0-9._-]+")


def check_name(kind: str, name: object) -> str:
    """A store or application name: Kafka's topic character set, 1 to 249 characters."""
    if not isinstance(name, str):
        raise TypeError(f"{kind} name must be a str, got {type(name).__name__}")
    if not name:
        raise ValueError(f"{kind} name must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(
            f"{kind} name {name[:40]!r}... is {len(name)} characters; at most "
            f"{MAX_NAME_LENGTH} are allowed"
        )
    if name in (".", ".."):
        raise ValueError(f"{kind} name {name!r} is not allowed")
    if not _LEGAL.fullmatch(name):
        bad = sorted({char for char in name if not _LEGAL.fullmatch(char)})
        raise ValueError(
            f"{kind} name {name!r} contains {''.join(bad)!r}; use only ASCII letters, digits, "
            "'.', '_' and '-' (Kafka's topic characters)"
        )
    return name


def check_positive_int(what: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value}")
    return value
