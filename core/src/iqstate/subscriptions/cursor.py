"""Subscription cursors: opaque, checked strings saying how far a subscription got.

A cursor records, per partition, the feed lineage and the mark of the last batch the
subscription accounted for (delivered, or passed over because no key in it matched), plus
the application, store and filter it belongs to. It is text safe for an HTTP header or a
Server-Sent Events id: `iqc1.` + base64url(JSON) + `.` + CRC-32 of the JSON, so a cursor
that was cut, mangled or made up is refused with an error naming the problem, never read
as a position.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from iqstate.subscriptions.errors import InvalidCursorError

_PREFIX = "iqc1."
_LINEAGE = re.compile(r"[0-9A-Za-z_:+/=-]{1,48}")
"""A feed's own (hex), or a changelog's: `log`, or `log:` and its topic id (base64)."""
MAX_CURSOR_CHARS = 1 << 20
"""Longer text is refused before it is decoded (a cursor of 10,000 partitions is ~0.4 MB)."""


@dataclass(frozen=True)
class Progress:
    """Where a partition's stream got: `mark` in the feed `lineage` (see `ChangeFeed`)."""

    lineage: str
    mark: int


@dataclass(frozen=True)
class Cursor:
    """A decoded cursor; `text` is its opaque form."""

    application_id: str
    store: str
    filter_id: str
    progress: Mapping[int, Progress] = field(default_factory=dict)

    @cached_property
    def text(self) -> str:
        """The opaque form (made once per cursor: subscribers in step share cursors)."""
        body = json.dumps(
            [
                self.application_id,
                self.store,
                self.filter_id,
                [[p, got.lineage, got.mark] for p, got in sorted(self.progress.items())],
            ],
            separators=(",", ":"),
        ).encode()
        encoded = base64.urlsafe_b64encode(body).decode().rstrip("=")
        return f"{_PREFIX}{encoded}.{zlib.crc32(body):08x}"

    def advanced(self, partition: int, progress: Progress) -> Cursor:
        """This cursor with `partition` at `progress`."""
        return Cursor(
            self.application_id,
            self.store,
            self.filter_id,
            {**self.progress, partition: progress},
        )

    @classmethod
    def parse(cls, text: object) -> Cursor:
        """The cursor `text` encodes; `InvalidCursorError` naming what is wrong otherwise."""
        if not isinstance(text, str):
            raise InvalidCursorError(f"a cursor is a string, got {type(text).__name__}")
        if len(text) > MAX_CURSOR_CHARS:
            raise InvalidCursorError(f"cursor of {len(text)} characters is too long")
        if not text.startswith(_PREFIX) or text.count(".") != 2:
            raise InvalidCursorError(
                f"not a subscription cursor: {_shown(text)} (a cursor is the `cursor` of a "
                "ChangeBatch, passed back unchanged)"
            )
        _, encoded, checksum = text.split(".")
        try:
            body = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        except (binascii.Error, ValueError) as error:
            raise InvalidCursorError(f"cursor {_shown(text)} is not base64url: {error}") from None
        if f"{zlib.crc32(body):08x}" != checksum:
            raise InvalidCursorError(
                f"cursor {_shown(text)} fails its checksum: it was cut or changed"
            )
        try:
            fields = json.loads(body)
        except ValueError:
            raise InvalidCursorError(f"cursor {_shown(text)} does not decode") from None
        return cls._from_fields(fields, text)

    @classmethod
    def _from_fields(cls, fields: Any, text: str) -> Cursor:
        if not (
            isinstance(fields, list)
            and len(fields) == 4
            and all(isinstance(value, str) for value in fields[:3])
            and isinstance(fields[3], list)
        ):
            raise InvalidCursorError(f"cursor {_shown(text)} has an unknown layout")
        progress: dict[int, Progress] = {}
        for entry in fields[3]:
            if not (
                isinstance(entry, list)
                and len(entry) == 3
                and _natural(entry[0])
                and isinstance(entry[1], str)
                and _LINEAGE.fullmatch(entry[1])
                and _natural(entry[2])
                and entry[0] not in progress
            ):
                raise InvalidCursorError(
                    f"cursor {_shown(text)} has an invalid partition entry {entry!r}"
                )
            progress[entry[0]] = Progress(entry[1], entry[2])
        return cls(fields[0], fields[1], fields[2], progress)


def resumed_cursor(
    text: str | None, application_id: str, store: str, filter_id: str, partitions: int
) -> Cursor:
    """The cursor a subscription of `store` (with `partitions` partitions) and the filter
    `filter_id` resumes from (a fresh one for `text` None); `InvalidCursorError` naming the
    mismatch when `text` belongs to another application, store or filter."""
    fresh = Cursor(application_id, store, filter_id)
    if text is None:
        return fresh
    cursor = Cursor.parse(text)
    for what, got, want in (
        ("application", cursor.application_id, application_id),
        ("store", cursor.store, store),
        ("filter", cursor.filter_id, filter_id),
    ):
        if got != want:
            raise InvalidCursorError(
                f"the cursor belongs to another {what} ({got!r}), not to this "
                f"subscription's ({want!r}): resume with the cursor of a subscription "
                "of the same store and keys"
            )
    for partition in cursor.progress:
        if partition >= partitions:
            raise InvalidCursorError(
                f"the cursor names partition {partition} of store {store!r}, which "
                f"has partitions 0..{partitions - 1}"
            )
    return cursor


def _natural(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _shown(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")
