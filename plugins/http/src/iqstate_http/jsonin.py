"""JSON from clients: standard JSON only, nested at most `MAX_DEPTH` levels, no object
naming a member twice.

Python's `json` accepts `NaN` and `Infinity`, turns `1e400` into an infinite float,
recurses once per level of nesting and keeps the last of a member given twice; none of that
may reach a store or turn into a 500, so every request body and every JSON key in a URL is
read here. A member given twice (`{"store": "a", "store": "b"}`) is refused rather than
guessed at: readers disagree on which one counts (I-JSON, RFC 7493, forbids it), so a
proxy or a client library could have read another request than the one answered.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 64
"""Arrays and objects nested deeper than this are refused (far beyond any real key or query)."""


class JsonInputError(ValueError):
    """Client JSON that is not standard JSON, or nested too deeply; the message says which."""


_EXACT = 2**53  # floats up to here hold every integer exactly


def integer(value: Any) -> int | None:
    """`value` as an integer, as JSON Schema sees one: an int, or a number with no fraction
    (`2.0`, `1e3`) small enough that the float is exact; `None` for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) <= _EXACT:
        return int(value)
    return None


def _no_constants(name: str) -> Any:
    raise JsonInputError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise JsonInputError(f"the number {text[:40]} is out of range")
    return number


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members = dict(pairs)
    if len(members) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise JsonInputError(f"the member {name[:40]!r} is given twice in one object")
            seen.add(name)
    return members


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` nests arrays/objects more than `limit` levels (iteratively: no recursion)."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                pending.append((child, depth + 1))
    return False


def loads(text: str | bytes) -> Any:
    """`text` as JSON, or `JsonInputError` saying why it is refused."""
    try:
        value = json.loads(
            text,
            parse_constant=_no_constants,
            parse_float=_finite,
            object_pairs_hook=_unique_members,
        )
    except RecursionError:
        raise JsonInputError(f"JSON nested more than {MAX_DEPTH} levels deep") from None
    except JsonInputError:
        raise
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, int digit limit
        raise JsonInputError(str(exc)) from exc
    if not isinstance(value, dict | list):
        return value
    # Cheap bound first: fewer opening brackets than the limit cannot nest deeper than it.
    opening = (
        text.count("[") + text.count("{")
        if isinstance(text, str)
        else (text.count(b"[") + text.count(b"{"))
    )
    if opening > MAX_DEPTH and _deeper_than(value, MAX_DEPTH):
        raise JsonInputError(f"JSON nested more than {MAX_DEPTH} levels deep")
    return value
