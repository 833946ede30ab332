"""Judging the cluster's answers about a changelog topic's id (KIP-516) for one replica.

A topic deleted and created again under its name gets a new id, and Kafka never gives an
id twice. The replica keeps the id of the topic it reads and those it was rebuilt away
from (`iqstate.runtime.changelog_topic.TopicIds`). Every offsets answer names the topic's
id as one broker knows it, and a broker's metadata may lag behind a recreation, so one
answer never decides alone:

- no id (a broker without topic ids, or a failed `Metadata` request) and an id the replica
  replaced (a lagging broker) change nothing, but break a row of answers; except that a
  replica that kept an id reads only once an answer named it since it was last opened
  (after a restart, a first answer without an id would resume it in a topic that may have
  been recreated meanwhile);
- the first id seen for a replica that kept none is adopted;
- the kept id lets the replica read, unless an answer named another id since: then it
  reads again only once two answers in a row name the kept id;
- another id stops the replica from reading; a second answer in a row naming it means the
  topic was recreated: the replica is rebuilt from it.
"""

from __future__ import annotations

import enum

from iqstate.runtime.changelog_topic import TopicIds

AGREEING_ANSWERS = 2
"""Answers in a row naming the same id that settle a doubt."""


class Verdict(enum.Enum):
    READ = "read"
    """The topic is the one the replica was read from (or its id is unknown)."""
    ADOPT = "adopt"
    """The replica kept no id: keep this one, and read."""
    WAIT = "wait"
    """An answer disagreed: read nothing until answers agree."""
    REBUILD = "rebuild"
    """The topic was recreated: rebuild the replica from it, and keep its id."""


class TopicIdCheck:
    """One replica's doubt about its changelog topic, across the cluster's answers."""

    def __init__(self) -> None:
        self._named: str | None = None
        """The id the answers named since one disagreed with the kept id (None: no doubt)."""
        self._in_a_row = 0
        self._confirmed = False
        """An answer named the kept id (or one was adopted or rebuilt from) since this check
        began."""

    @property
    def doubting(self) -> bool:
        return self._named is not None

    def judge(self, ids: TopicIds, answered: str | None) -> Verdict:
        """What to do with the replica, given the id an answer names (`None`: none)."""
        if answered is None or answered in ids.replaced:
            self._in_a_row = 0  # a row is answers naming one id, nothing in between
            unconfirmed = ids.kept is not None and not self._confirmed
            return Verdict.WAIT if self.doubting or unconfirmed else Verdict.READ
        self._confirmed = True  # whatever follows settles on an id that answers named
        if ids.kept is None:
            self._named = None
            return Verdict.ADOPT
        if answered == ids.kept and not self.doubting:
            return Verdict.READ
        if answered == self._named:
            self._in_a_row += 1
        else:
            self._named, self._in_a_row = answered, 1
        if self._in_a_row < AGREEING_ANSWERS:
            return Verdict.WAIT
        self._named = None
        return Verdict.READ if answered == ids.kept else Verdict.REBUILD
