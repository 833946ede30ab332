"""JSON from clients: standard JSON only, nested at most `MAX_DEPTH` levels.

Python's `json` accepts `NaN` and `Infinity`, turns `1e400` into an infinite float, and
recurses once per level of nesting; none of that may reach a store or turn into a 500, so
every request body and every JSON key in a URL is read here.
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
        value = json.loads(text, parse_constant=_no_constants, parse_float=_finite)
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
