"""The ids of the changelog topic a replica's data came from (KIP-516), kept beside its files.

A topic deleted and created again under its name starts its offsets over. A replica that
committed offset N of the old topic would resume at N in the new one, mixing two histories,
and its committed offset cannot tell when the new topic already holds more than N records.
So a replica keeps the id of the topic it reads, and the ids of the topics it was rebuilt
away from (Kafka never gives an id twice, so an answer naming one of those comes from a
broker whose metadata lags). The follower judges the cluster's answers against them
(`iqstate_kafka.topic_ids`).

The file holds the kept id on its first line (empty: none yet) and a replaced id on each
line after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from iqstate.files import replace_atomically

TOPIC_IDS_FILE = "changelog-topic-id"


@dataclass(frozen=True)
class TopicIds:
    """`kept`: the id of the topic the replica reads (None: not known yet, as for a new or
    rebuilt replica); `replaced`: ids of topics it was rebuilt away from."""

    kept: str | None = None
    replaced: frozenset[str] = frozenset()

    def moved_to(self, topic_id: str) -> TopicIds:
        """The ids after a rebuild from the topic `topic_id`, the kept one replaced."""
        old = frozenset() if self.kept is None or self.kept == topic_id else {self.kept}
        return TopicIds(topic_id, (self.replaced | old) - {topic_id})


def read_topic_ids(directory: Path | None) -> TopicIds:
    """The ids kept in `directory` (none kept: `TopicIds()`). Unreadable bytes read as an id
    no topic has, so a damaged file means a rebuild, never a replica trusted blindly."""
    if directory is None:
        return TopicIds()
    try:
        text = (directory / TOPIC_IDS_FILE).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return TopicIds()
    kept, *replaced = text.splitlines() or [""]
    return TopicIds(kept.strip() or None, frozenset(line.strip() for line in replaced) - {""})


def keep_topic_ids(directory: Path, ids: TopicIds) -> None:
    """Keep `ids` in `directory`, whole after a crash or power loss (`OSError` if not)."""
    lines = [ids.kept or "", *sorted(ids.replaced)]
    replace_atomically(directory / TOPIC_IDS_FILE, "\n".join(lines) + "\n")
