"""Whole numbers written by clients in URLs and headers, read at a bounded cost.

Python's `int()` raises `ValueError` on a string of more than 4,300 digits, and turning a
`Decimal` such as `1e99999999` into an int builds a hundred-million-digit number (minutes
of a core): a number from a client is checked for its size before it is converted.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
"""Kafka numbers partitions with 32-bit integers."""
_INT64_DIGITS = len(str(INT64_MAX))


def whole_number(text: str, maximum: int = INT64_MAX) -> int | None:
    """`text` as a decimal whole number from 0 to `maximum` (leading zeros allowed);
    `None` for anything else."""
    if not (text.isascii() and text.isdigit()):
        return None
    significant = text.lstrip("0") or "0"
    if len(significant) > len(str(maximum)):
        return None
    number = int(significant)
    return number if number <= maximum else None


def decimal_integer(text: str) -> int:
    """A well-formed decimal number with no fraction (`-12`, `3.0`, `1e3`) as an int;
    `ValueError` saying why when it has a fraction or is beyond a signed 64-bit integer."""
    try:
        exact = Decimal(text)
        whole = exact == exact.to_integral_value()
    except InvalidOperation:  # an exponent beyond what `decimal` holds (19 digits and more)
        raise ValueError("its exponent is out of range") from None
    if not whole:
        raise ValueError("not an integer")
    if not exact.is_zero() and exact.adjusted() >= _INT64_DIGITS:
        raise ValueError("outside the signed 64-bit range")
    number = int(exact)
    if not -(2**63) <= number <= INT64_MAX:
        raise ValueError("outside the signed 64-bit range")
    return number
