"""What `to_store` checks of its arguments, in embedded and in distributed mode alike.

Both sinks take the same arguments and read rows the same way (`RowColumns`); only the
output modes differ: distributed mode has no `complete`, which deletes the keys a batch
lacks and so needs the store's contents on the writer.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iqstate.errors import IqstateError
from iqstate_spark.rows import RowColumns

OutputMode = Literal["append", "update", "complete"]


@dataclass(frozen=True)
class SinkArguments:
    """A sink's checked arguments: the columns it reads, its mode, where positions come from."""

    columns: RowColumns
    output_mode: OutputMode
    checkpoint: Path | None
    source_names: Sequence[str] | None


def check_sink_arguments(
    *,
    store: str,
    store_type: str | None,
    declared: Collection[str],
    declared_by: str,
    declared_where: str = "",
    key: str,
    value: str | Sequence[str] | None,
    window: str | None,
    tombstone: str | None,
    output_mode: str,
    modes: Sequence[OutputMode],
    modes_where: str = "",
    modes_why: str = "",
    checkpoint: str | Path | None,
    source_names: Sequence[str] | None,
) -> SinkArguments:
    """Check `to_store`'s arguments against the store's declaration (`store_type` None: not
    declared by `declared_by`, which declares `declared`; `modes`: the output modes allowed,
    `modes_where` and `modes_why`: what the error says of them); `IqstateError` or
    `ValueError` naming what is wrong. A window store's window column defaults to `window`."""
    if store_type is None:
        raise IqstateError(
            f"to_store: {declared_by} declares no store {store!r}{declared_where}; declared: "
            f"{', '.join(sorted(declared)) or 'none'}"
        )
    if output_mode not in modes:
        allowed = " or ".join([", ".join(modes[:-1]), modes[-1]] if len(modes) > 1 else modes)
        raise ValueError(
            f"to_store: output_mode must be {allowed}{modes_where}, got {output_mode!r}{modes_why}"
        )
    if store_type == "window":
        window = window or "window"
        if output_mode == "complete":
            raise ValueError("to_store: complete mode is supported for key-value stores only")
    elif window is not None:
        raise ValueError(f"to_store: store {store!r} is a key-value store; window= does not apply")
    return SinkArguments(
        RowColumns.of(store, key, value, window, tombstone),
        output_mode,  # type: ignore[arg-type]  # checked against `modes` above
        Path(checkpoint) if checkpoint is not None else None,
        source_names,
    )
