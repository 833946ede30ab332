from collections.abc import Iterable

def select_found(
    rows: list[tuple[bytes, bytes]],
    as_of: int | None,
    boundary: int,
    wanted: int | None,
    found: tuple[list[bytes], list[bytes], list[int], list[int | None]],
    /,
) -> None: ...
def select_sealed(
    records: Iterable[tuple[bytes | memoryview, bytes | memoryview]],
    upper: bytes | None,
    limit: int,
    as_of: int | None,
    boundary: int,
    wanted: int | None,
    found: tuple[list[bytes], list[bytes], list[int], list[int | None]],
    /,
) -> tuple[int, bytes | None] | None: ...
def found_at(
    timeline: bytes, as_of: int | None, boundary: int, /
) -> tuple[bytes, int, int | None] | None: ...
def bind_record_type(cls: type, /) -> None: ...
def record(value: object, timestamp: int, valid_to: int | None, /) -> object: ...
def rows(
    keys: list[object], values: list[object], timestamps: list[int], valid_tos: list[int | None], /
) -> list[tuple[object, object]]: ...
