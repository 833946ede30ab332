"""What `to_store` checks of its arguments, in embedded and in distributed mode alike.

Both sinks take the same arguments and read rows the same way (`RowColumns`); only the
output modes differ: distributed mode has no `complete`, which deletes the keys a batch
lacks and so needs the store's contents on the writer. Every check here runs when the sink
is made, before any batch: a store's type decides which column of times it needs.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iqstate.errors import IqstateError, UnknownStateStoreError
from iqstate_spark.offsets import local_checkpoint
from iqstate_spark.rows import RowColumns

OutputMode = Literal["append", "update", "complete"]


@dataclass(frozen=True)
class SinkArguments:
    """A sink's checked arguments: the columns it reads, its mode, where positions come from."""

    columns: RowColumns
    output_mode: OutputMode
    checkpoint: Path | None
    source_names: Sequence[str] | None


_TIME_ARGUMENT: dict[str, str | None] = {
    "key_value": None,
    "global_key_value": None,
    "window": "window",
    "timestamped_key_value": "timestamp",
    "versioned_key_value": "timestamp",
    "session": "session",
}
"""The argument naming the column of times each store type writes (`None`: no times)."""

_DEFAULT_COLUMN = {"window": "window", "session": "session_window"}
"""The time column a store type reads when none is named: the name `F.window` and
`F.session_window` give theirs."""

_COMPLETE = ("key_value", "global_key_value", "timestamped_key_value", "session")
"""The store types whose store can be made equal to a batch (`complete` mode)."""

_DESCRIBED = {  # as errors name them
    "key_value": "key-value",
    "global_key_value": "global key-value",
    "window": "window",
    "timestamped_key_value": "timestamped key-value",
    "versioned_key_value": "versioned key-value",
    "session": "session",
}


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
    timestamp: str | None = None,
    session: str | None = None,
    output_mode: str,
    modes: Sequence[OutputMode],
    modes_where: str = "",
    modes_why: str = "",
    checkpoint: str | Path | None,
    source_names: Sequence[str] | None,
    window_size_ms: int | None = None,
) -> SinkArguments:
    """Check `to_store`'s arguments against the store's declaration (`store_type` None: not
    declared by `declared_by`, which declares `declared`; `modes`: the output modes allowed,
    `modes_where` and `modes_why`: what the error says of them); `UnknownStateStoreError`,
    `IqstateError` or `ValueError` naming the store and what is wrong. A store's type
    decides which column of times it reads: `window` (window stores; defaults to
    `window`), `timestamp` (timestamped and versioned stores; required) or `session`
    (session stores; defaults to `session_window`), and refuses the others."""
    if store_type is None:
        raise UnknownStateStoreError(
            f"to_store: {declared_by} declares no store {store!r}{declared_where}; declared: "
            f"{', '.join(sorted(declared)) or 'none'}"
        )
    if store_type not in _TIME_ARGUMENT:
        raise IqstateError(
            f"to_store: store {store!r} is a {store_type} store, which to_store cannot write"
        )
    if output_mode not in modes:
        allowed = " or ".join([", ".join(modes[:-1]), modes[-1]] if len(modes) > 1 else modes)
        raise ValueError(
            f"to_store: output_mode must be {allowed}{modes_where}, got {output_mode!r}{modes_why}"
        )
    described = _DESCRIBED[store_type]
    times = {"window": window, "timestamp": timestamp, "session": session}
    wanted = _TIME_ARGUMENT[store_type]
    for argument, column in times.items():
        if column is not None and argument != wanted:
            raise ValueError(
                f"to_store: store {store!r} is a {described} store; {argument}= does not apply"
            )
    if wanted is not None and times[wanted] is None:
        if store_type not in _DEFAULT_COLUMN:
            raise ValueError(
                f"to_store: store {store!r} is a {described} store: pass {wanted}=<the "
                "event-time column> (a timestamp, or an integer of epoch milliseconds)"
            )
        times[wanted] = _DEFAULT_COLUMN[store_type]
    if output_mode == "complete" and store_type not in _COMPLETE:
        raise ValueError(
            f"to_store: complete mode is supported for key-value, timestamped key-value, "
            f"global key-value and session stores; store {store!r} is a {described} store"
        )
    return SinkArguments(
        RowColumns.of(
            store,
            key,
            value,
            times["window"],
            tombstone,
            times["timestamp"],
            times["session"],
            window_size_ms if store_type == "window" else None,
        ),
        output_mode,  # type: ignore[arg-type]  # checked against `modes` above
        None if checkpoint is None else local_checkpoint(checkpoint, "to_store: checkpoint="),
        _checked_source_names(source_names),
    )


def _checked_source_names(names: Sequence[str] | None) -> Sequence[str] | None:
    """`source_names`, a list of strings (a string alone would name the sources by its
    characters)."""
    if names is None:
        return None
    if isinstance(names, str) or not all(isinstance(name, str) for name in names):
        raise ValueError(
            f"to_store: source_names must be a list of strings, one per source of the query "
            f"(['orders'], not 'orders'), got {names!r}"
        )
    return list(names)
