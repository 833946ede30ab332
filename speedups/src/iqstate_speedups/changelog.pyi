from typing import Any

def hold_known(
    messages: list[Any],
    start: int,
    partitions: dict[tuple[str, int], Any],
    known_ids: dict[bytes, int | None],
    header: str,
    marker: bytes,
    max_held: int,
    /,
) -> int: ...
