from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

def constructor(
    cls: type[T], names: tuple[str, ...], fixed: dict[str, Any], /
) -> Callable[..., T]: ...
