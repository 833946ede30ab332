"""A store partition's feed of committed batches: a bounded log that subscribers read.

The committer (or the changelog follower) appends each committed batch's entries, as they
were encoded for the store, under the partition's lock: one append, and the subscribers
that wait handed to the thread that wakes them (`waking.py`). Nothing is decoded or
filtered there; each subscriber reads the log at its own index and decodes on its own
thread. Until the first subscription the feed is dormant and a commit costs one attribute
test.

The log keeps the newest batches within `ChangeBufferSettings`: the replay buffer that a
subscription resuming by cursor reads from. A subscriber whose next batch left the log, or
that is more than its `max_pending` batches behind, has fallen behind (it holds no memory
meanwhile: the log is shared and bounded).

Marks identify a batch in a partition's stream. In a `lineage` of its own (one per hosted
partition in embedded mode) a mark counts the feed's batches; on a replica following a
changelog the lineage is `"log"` and the mark is the changelog offset after the batch,
which every replica of the partition shares.
"""

from __future__ import annotations

import itertools
import secrets
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from iqstate.position import Position
from iqstate.subscriptions.waking import Waker, hand_off, wake

CHANGELOG_LINEAGE = "log"
"""The lineage of feeds whose marks are changelog offsets (shared by every replica), when
the changelog topic's id is not known; `changelog_lineage` names the one of a known id."""
_ORDER = itertools.count()
"""A process-wide publication order: a subscription across partitions yields in it."""


@dataclass(frozen=True)
class ChangeBufferSettings:
    """Bounds of each partition's replay buffer (see docs/python-api.md for the choice).

    `batches`: the newest batches kept; `bytes`: their encoded size (keys and values,
    estimated from a sample in large batches). The newest batch is always kept."""

    batches: int = 1024
    bytes: int = 8 << 20

    def __post_init__(self) -> None:
        for name in ("batches", "bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ChangeBufferSettings.{name} must be an int >= 1, got {value!r}")


def new_lineage() -> str:
    """A lineage for a feed whose marks only it issues."""
    return secrets.token_hex(8)


def changelog_lineage(topic_id: str | None) -> str:
    """The lineage of replicas reading the changelog topic of id `topic_id`: a topic
    deleted and created again starts its offsets over, so a cursor's marks in the old one
    say nothing about the new one (None: the id is not known)."""
    return CHANGELOG_LINEAGE if topic_id is None else f"{CHANGELOG_LINEAGE}:{topic_id}"


def _marks_are_offsets(lineage: str) -> bool:
    return lineage == CHANGELOG_LINEAGE or lineage.startswith(CHANGELOG_LINEAGE + ":")


SHARED_AT_MOST = 8
"""Distinct (filter, cursor) results kept per batch: subscribers out of step with every
kept one work it out alone rather than grow the batch's memory."""
DECODED_KEPT = 4
"""Batches per feed that keep their decoded entries (and what subscribers made of them):
the most recently decoded. Decoded entries are Python objects the garbage collector
walks: kept for a whole replay buffer, they made each full collection, in whichever
thread it ran (often the committer's), last tens of milliseconds."""


class PublishedBatch:
    """One committed batch in a feed: its entries as the store encoded them."""

    __slots__ = (
        "decoded", "entries", "index", "mark", "order", "position", "previous", "shared", "size",
    )  # fmt: skip

    def __init__(
        self,
        index: int,
        previous: int,
        mark: int,
        position: Position,
        entries: list[Any],
        size: int,
    ) -> None:
        self.index = index
        self.order = next(_ORDER)
        self.previous = previous
        """The mark of the batch before it in this feed: a reader that got there, or to a
        mark between the two (batches that changed no key publish nothing), may take this
        one next; one that got to an earlier mark has a gap."""
        self.mark = mark
        self.position = position
        self.entries = entries
        self.size = size
        self.decoded: list[Any] | None = None
        """The decoded entries, filled by the first subscriber that decodes them (and
        dropped again, see `ChangeFeed.keep_decoded`)."""
        self.shared: dict[str, tuple[Any, Any]] = {}
        """What subscribers at one cursor (its text) make of this batch: the cursor after
        it and the batch they yield (None: no change matched), made by the first and
        reused by the others, so 1,000 subscribers of a store in step pay for it about
        once and yield one object (`SHARED_AT_MOST`)."""


FELL_OUT = object()
"""`ChangeFeed.read`'s answer when the index asked for left the buffer."""


class ChangeFeed:
    """The committed batches of one store partition, for subscriptions (see the module)."""

    def __init__(self, lineage: str) -> None:
        self.lineage = lineage
        self.live = False
        """True once a subscription started here: from then on commits are published."""
        self.last_mark = 0
        """The mark of the newest published batch (or where the feed went live)."""
        self.ended: str | None = None
        """Why the feed ended (the partition is no longer hosted here); None while it runs."""
        self.settings = ChangeBufferSettings()
        self._items: deque[PublishedBatch] = deque()
        self._base = 0
        self._bytes = 0
        self._held: list[Any] = []
        self._lock = threading.Lock()
        self._waiting: set[Waker] = set()
        self._decoded: deque[PublishedBatch] = deque()
        self._decoded_lock = threading.Lock()

    # -- the writer's side (under the partition's lock) -------------------------------------

    def go_live(
        self, mark: int, settings: ChangeBufferSettings, lineage: str | None = None
    ) -> None:
        """Start publishing, the partition being at `mark` now (in `lineage`, when given:
        a changelog's lineage is known once its topic's id is)."""
        if not self.live:
            if lineage is not None:
                self.lineage = lineage
            self.settings = settings
            self.last_mark = mark
            self.live = True

    def publish(self, entries: list[Any], position: Position, mark: int | None = None) -> None:
        """Append one committed batch (`mark` None: the next of this feed's own marks)."""
        if self._held:
            entries = self._held + entries
            self._held = []
        if not entries:
            return  # no key changed: nothing to announce, and the marks go on from here
        previous = self.last_mark
        mark = previous + 1 if mark is None else mark
        size = estimated_size(entries)
        settings = self.settings
        with self._lock:
            items = self._items
            items.append(
                PublishedBatch(self._base + len(items), previous, mark, position, entries, size)
            )
            self._bytes += size
            while len(items) > settings.batches or (
                self._bytes > settings.bytes and len(items) > 1
            ):
                self._bytes -= items.popleft().size
                self._base += 1
            self.last_mark = mark
            waiting, self._waiting = self._waiting, set()
        if waiting:
            hand_off(waiting)

    def hold(self, entries: list[Any]) -> None:
        """Keep entries committed without their batch's end (a changelog unit cut short):
        they are published with the rest of their batch."""
        self._held += entries

    def end(self, reason: str) -> None:
        """End the feed (the first reason stays): subscribers read what is left, then stop."""
        with self._lock:
            if self.ended is None:
                self.ended = reason
            waiting, self._waiting = self._waiting, set()
        wake(waiting)

    # -- the readers' side -------------------------------------------------------------------

    @property
    def head(self) -> int:
        """The index the next published batch will have."""
        with self._lock:
            return self._base + len(self._items)

    def read(self, index: int) -> tuple[PublishedBatch | object | None, int]:
        """The batch at `index` (None when it is not published yet, `FELL_OUT` when it left
        the buffer) and how many published batches a reader there has not read.

        Without the lock, as readers call it for every batch: a reader holding the lock
        when the interpreter switched threads made the committer wait for it, a switch
        interval each time (1,000 readers took the commit rate to 1%). Each batch knows its
        index, so a read that raced a publication is told apart and done again locked."""
        offset = index - self._base
        items = self._items
        if offset < 0:
            return FELL_OUT, len(items) - offset
        try:
            item = items[offset]
            if item.index == index:
                return item, len(items) - offset
        except IndexError:
            # Past the end: not published yet, unless a publication moved the buffer
            # since its base was read (evicting several batches shortens it).
            try:
                newest = items[-1].index
            except IndexError:
                return None, 0  # nothing published yet
            if newest < index:
                return None, 0
        with self._lock:  # the buffer moved between reading its base and the item
            offset = index - self._base
            unread = len(items) - offset
            if offset < 0:
                return FELL_OUT, unread
            return (items[offset] if offset < len(items) else None), unread

    def index_after(self, mark: int) -> int | None:
        """Where a reader that got to `mark` goes on reading, or None when the buffer cannot
        replay from there (call under the partition's lock: nothing is published meanwhile).

        A replica following a changelog that is behind a mark another replica of the
        partition reached (marks there are changelog offsets, the same on every replica)
        goes on from its head: the reader passes over what it has seen already rather than
        start again from a snapshot older than what it holds. A mark between a batch's
        `previous` and its own (batches that changed no key, which publish nothing here but
        may have been a mark elsewhere: where another replica's feed went live) goes on
        from that batch."""
        if mark == self.last_mark or (_marks_are_offsets(self.lineage) and mark > self.last_mark):
            return self.head
        with self._lock:
            for item in self._items:
                if item.mark > mark:  # none of the batches from its previous on changed a key
                    return item.index if item.previous <= mark else None
        return None

    def wait(self, index: int, waker: Waker) -> bool:
        """Register `waker` for the next publication; False (not registered) when the
        batch at `index` is there already or the feed ended."""
        with self._lock:
            if self._base + len(self._items) > index or self.ended is not None:
                return False
            self._waiting.add(waker)
            return True

    def forget(self, waker: Waker) -> None:
        with self._lock:
            self._waiting.discard(waker)

    def keep_decoded(self, item: PublishedBatch, decoded: list[Any]) -> None:
        """Give `item` its decoded entries, and drop those (and the shared results) of
        the batch decoded `DECODED_KEPT` decodings ago: a subscriber that comes to it
        later decodes it again. Readers call it, never the committer (under a lock of
        their own: a reader preempted holding it holds back no commit)."""
        item.decoded = decoded
        with self._decoded_lock:
            kept = self._decoded
            kept.append(item)
            dropped = kept.popleft() if len(kept) > DECODED_KEPT else None
        if dropped is not None:
            dropped.decoded = None
            dropped.shared = {}


_SAMPLE = 32


def estimated_size(entries: list[Any]) -> int:
    """The encoded size of a batch's entries (keys and values): exact up to a few dozen
    entries, extrapolated from an even sample beyond, so a large batch costs the same."""
    count = len(entries)
    step = 1 if count <= _SAMPLE else count // _SAMPLE
    sample = entries[::step]
    total = 0
    for entry in sample:
        total += len(entry[0]) + len(entry[-1] or b"") + 16
    return total if step == 1 else total * count // len(sample)
