"""The id of the changelog topic a replica's data came from (KIP-516), kept beside its files.

A topic deleted and created again under its name starts its offsets over. A replica that
committed offset N of the old topic would resume at N in the new one, mixing two histories,
and its committed offset cannot tell when the new topic already holds more than N records.
Its follower records the topic's id when it starts reading a replica and compares it with
the cluster's before resuming (`iqstate_kafka.follower`).
"""

from __future__ import annotations

from pathlib import Path

from iqstate.files import replace_atomically

TOPIC_ID_FILE = "changelog-topic-id"


def read_topic_id(directory: Path | None) -> str | None:
    """The id kept in `directory`; None when none was kept (a new replica, a rebuilt one, or
    one from before ids were kept). Unreadable bytes read as an id no topic has."""
    if directory is None:
        return None
    try:
        text = (directory / TOPIC_ID_FILE).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    return text.strip() or None


def keep_topic_id(directory: Path, topic_id: str) -> None:
    """Keep `topic_id` in `directory`, whole after a crash or power loss."""
    replace_atomically(directory / TOPIC_ID_FILE, topic_id + "\n")
