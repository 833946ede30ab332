"""What a failed connection says, for a message a person reads: its kind and its reason."""

from __future__ import annotations

_LONGEST = 300


def error_text(error: BaseException) -> str:
    """`ConnectError: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: ...`: the
    exception's type and, when it has one, its message (the first line, at most 300
    characters): the type alone does not tell a refused connection from a certificate its
    peer did not trust."""
    lines = str(error).strip().splitlines()
    reason = lines[0][:_LONGEST] if lines else ""
    name = type(error).__name__
    return f"{name}: {reason}" if reason else name
