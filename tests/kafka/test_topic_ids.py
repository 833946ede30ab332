"""Judging the cluster's answers about a changelog topic's id: a recreated topic is rebuilt
from once two answers agree, and no lagging broker makes a replica resume in another topic
or rebuild again and again."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from iqstate_kafka.topic_ids import TopicIdCheck, Verdict

from iqstate.runtime.changelog_topic import TopicIds

OLD, NEW = "old-topic-id", "new-topic-id"


def verdicts(ids: TopicIds, answers: list[str | None]) -> list[Verdict]:
    """What one replica is told at each answer, its ids kept as a follower keeps them."""
    check, told = TopicIdCheck(), []
    for answered in answers:
        verdict = check.judge(ids, answered)
        if verdict in (Verdict.ADOPT, Verdict.REBUILD):
            assert answered is not None
            ids = ids.moved_to(answered)
        told.append(verdict)
    return told


def test_the_first_id_is_adopted_and_then_read() -> None:
    assert verdicts(TopicIds(), [NEW, NEW]) == [Verdict.ADOPT, Verdict.READ]


def test_no_id_changes_nothing_once_an_answer_named_the_kept_one() -> None:
    # After a restart the topic may have been recreated meanwhile: a kept id must be named
    # once before the replica reads on; a replica that kept none reads (brokers before 2.8).
    assert verdicts(TopicIds(OLD), [None, OLD, None]) == [Verdict.WAIT] + [Verdict.READ] * 2
    assert verdicts(TopicIds(OLD, frozenset({NEW})), [NEW, OLD]) == [Verdict.WAIT, Verdict.READ]
    assert verdicts(TopicIds(), [None]) == [Verdict.READ]


def test_a_recreated_topic_is_rebuilt_from_once_two_answers_agree() -> None:
    told = verdicts(TopicIds(OLD), [NEW, NEW, NEW])
    assert told == [Verdict.WAIT, Verdict.REBUILD, Verdict.READ]


def test_one_lagging_answer_stops_reading_until_two_answers_agree_again() -> None:
    told = verdicts(TopicIds(OLD), [NEW, OLD, OLD, OLD])
    assert told == [Verdict.WAIT, Verdict.WAIT, Verdict.READ, Verdict.READ]


def test_after_a_rebuild_the_replaced_id_is_a_lagging_answer() -> None:
    told = verdicts(TopicIds(OLD), [NEW, NEW, OLD, OLD, NEW])
    assert told == [Verdict.WAIT, Verdict.REBUILD, Verdict.READ, Verdict.READ, Verdict.READ]


def test_a_doubt_is_not_settled_by_answers_without_an_id_which_break_a_row() -> None:
    told = verdicts(TopicIds(OLD), [OLD, NEW, None, NEW, NEW])
    assert told == [Verdict.READ] + [Verdict.WAIT] * 3 + [Verdict.REBUILD]
    told = verdicts(TopicIds(OLD, frozenset({"older"})), [OLD, NEW, "older", NEW, NEW])
    assert told == [Verdict.READ] + [Verdict.WAIT] * 3 + [Verdict.REBUILD]


@given(st.lists(st.sampled_from([OLD, NEW, None]), max_size=30))
def test_no_mix_of_answers_reads_while_named_another_topic_or_rebuilds_twice(
    answers: list[str | None],
) -> None:
    """A replica of the old topic, recreated once (NEW), brokers answering either id or
    none: it never reads while an answer names an id other than the kept one (a replaced
    id aside), and it is rebuilt at most once (OLD, once replaced, never takes it back)."""
    ids, check, rebuilds = TopicIds(OLD), TopicIdCheck(), 0
    for answered in answers:
        verdict = check.judge(ids, answered)
        if verdict is Verdict.REBUILD:
            rebuilds += 1
            assert answered is not None
            ids = ids.moved_to(answered)
        if verdict is Verdict.READ and answered is not None and answered not in ids.replaced:
            assert answered == ids.kept
    assert rebuilds <= 1


def test_topic_ids_move_to_a_new_topic_keeping_what_they_replaced() -> None:
    moved = TopicIds(OLD).moved_to(NEW)
    assert moved == TopicIds(NEW, frozenset({OLD}))
    assert moved.moved_to(NEW) == moved
    assert TopicIds().moved_to(NEW) == TopicIds(NEW)
