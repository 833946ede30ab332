"""The key route's query parameters: `acceptable_lag=N` (offsets a standby may be behind)
and, on a versioned store, `as_of=T` (the version valid at T, ms since the epoch).

Any other parameter is refused: a misspelt one would otherwise read the running active's
current value silently, as the change stream's route refuses it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs

from starlette.types import Scope

from iqstate_http.client_numbers import INT64_MAX, whole_number
from iqstate_http.codecs import INT64_MIN, BadRequest, whole_number_parameter

_KNOWN = ("acceptable_lag", "as_of")


@dataclass(frozen=True, slots=True)
class KeyParams:
    """What a key request asks besides its store and key."""

    lag: int | None = None
    """Offsets a standby or restoring replica may be behind; None: running actives only."""
    as_of: int | None = None
    """The instant whose version a versioned store answers; None: the current version."""

    def query_string(self) -> bytes:
        """The parameters as a URL's query (with its `?`), for a forwarded request."""
        given = [
            b"%s=%d" % (name.encode(), value)
            for name, value in (("acceptable_lag", self.lag), ("as_of", self.as_of))
            if value is not None
        ]
        return b"?" + b"&".join(given) if given else b""


NONE_ASKED = KeyParams()


def key_params(scope: Scope) -> KeyParams:
    """The key request's parameters; `BadRequest` naming the one malformed, repeated or
    unknown."""
    raw = scope.get("query_string", b"")
    if not raw:
        return NONE_ASKED
    params = parse_qs(raw.decode("latin-1"), keep_blank_values=True)
    unknown = sorted(set(params) - set(_KNOWN))
    if unknown:
        raise BadRequest(f"unknown query parameter {unknown[0]!r}; known: {list(_KNOWN)}")
    for name, values in params.items():
        if len(values) > 1:
            raise BadRequest(f"{name!r} is given more than once")
    lag = params.get("acceptable_lag")
    as_of = params.get("as_of")
    return KeyParams(
        None
        if lag is None
        else whole_number_parameter(
            lag[0],
            "acceptable_lag",
            hint="offsets a standby may be behind; leave it out to read running actives only",
        ),
        None if as_of is None else _instant(as_of[0]),
    )


def _instant(text: str) -> int:
    """`as_of`'s text as ms since the epoch, negative ones included."""
    negative = text.startswith("-")
    number = whole_number(text[1:] if negative else text, -INT64_MIN if negative else INT64_MAX)
    if number is None:
        raise BadRequest(
            f"'as_of' must be a whole number of ms since the epoch from {INT64_MIN} to "
            f"{INT64_MAX}, got {text[:40]!r} (leave it out for the current version)"
        )
    return -number if negative else number
