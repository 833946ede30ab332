"""KeyValueIterator: iteration, peeking, closing and mapping."""

import pytest

from iqstate import KeyValueIterator


def test_iterates_and_closes_at_the_end() -> None:
    closed: list[bool] = []
    iterator = KeyValueIterator([(1, "a"), (2, "b")], lambda: closed.append(True))
    assert iterator.has_next() and iterator.peek_next_key() == 1
    assert list(iterator) == [(1, "a"), (2, "b")]
    assert iterator.closed and closed == [True]
    iterator.close()
    assert closed == [True], "close runs its callback once"
    with pytest.raises(ValueError, match="read once, and closes itself when read to its end"):
        list(iterator)  # a second reading says why it cannot be


def test_context_manager_closes_early() -> None:
    closed: list[bool] = []
    with KeyValueIterator(iter([(1, "a"), (2, "b")]), lambda: closed.append(True)) as iterator:
        assert next(iterator) == (1, "a")
    assert closed == [True]
    with pytest.raises(ValueError, match="closed"):
        next(iterator)
    assert not iterator.has_next()


def test_peek_at_the_end_and_empty() -> None:
    empty: KeyValueIterator[int, str] = KeyValueIterator.empty()
    assert not empty.has_next()
    with pytest.raises(StopIteration):
        empty.peek_next_key()


def test_map_is_lazy_and_closes_the_source() -> None:
    closed: list[bool] = []
    source = KeyValueIterator([(1, "a"), (2, "b")], lambda: closed.append(True))
    mapped = source.map(lambda pair: (pair[0] * 10, pair[1].upper()))
    assert next(mapped) == (10, "A")
    mapped.close()
    assert source.closed and closed == [True]


def test_loops_over_pairs_in_memory_keep_the_contract() -> None:
    closed: list[bool] = []
    iterator = KeyValueIterator.of_rows([(1, "a"), (2, "b"), (3, "c")], lambda: closed.append(True))
    assert next(iterator) == (1, "a")
    for pair in iterator:
        assert pair == (2, "b"), "a loop continues where next() stopped"
        break
    assert next(iterator) == (3, "c"), "next() continues where the loop stopped"
    assert list(iterator) == [] and iterator.closed and closed == [True]


def test_a_loop_reading_on_after_close_raises() -> None:
    iterator = KeyValueIterator.of_rows([(1, "a"), (2, "b"), (3, "c")])
    seen = []
    with pytest.raises(ValueError, match="closed"):
        for pair in iterator:
            seen.append(pair)
            iterator.close()
    assert seen == [(1, "a")]


def test_every_read_after_close_raises_not_just_the_first() -> None:
    iterator = KeyValueIterator.of_rows([(1, "a"), (2, "b"), (3, "c")])
    loop = iter(iterator)
    assert next(loop) == (1, "a")
    iterator.close()
    for _ in range(2):
        with pytest.raises(ValueError, match="closed"):
            next(loop)
    with pytest.raises(ValueError, match="closed"):
        list(loop)
    with pytest.raises(ValueError, match="closed"):
        next(iterator)


def test_a_peeked_pair_is_read_by_loops() -> None:
    iterator = KeyValueIterator.of_rows([(1, "a"), (2, "b")])
    assert iterator.peek_next_key() == 1
    assert list(iterator) == [(1, "a"), (2, "b")] and iterator.closed


def test_map_rows_converts_in_bulk_or_fails_at_the_pair() -> None:
    closed: list[bool] = []
    source = KeyValueIterator.of_rows([(1, "a"), (2, "b")], lambda: closed.append(True))
    upper = source.map_rows(lambda pairs: [(k, v.upper()) for k, v in pairs], lambda p: p)
    assert list(upper) == [(1, "A"), (2, "B")] and closed == [True]

    def refuse(pair: tuple[int, str]) -> tuple[int, str]:
        if pair[0] == 2:
            raise KeyError(pair[0])
        return pair

    def refuse_all(pairs: list[tuple[int, str]]) -> list[tuple[int, str]]:
        return [refuse(pair) for pair in pairs]

    lazy = KeyValueIterator.of_rows([(1, "a"), (2, "b")]).map_rows(refuse_all, refuse)
    assert next(lazy) == (1, "a"), "pairs before the failing one are still read"
    with pytest.raises(KeyError):
        next(lazy)


def test_map_rows_converts_only_when_first_read() -> None:
    calls: list[int] = []

    def convert(pairs: list[tuple[int, str]]) -> list[tuple[int, str]]:
        calls.append(len(pairs))
        return pairs

    mapped = KeyValueIterator.of_rows([(1, "a")]).map_rows(convert, lambda pair: pair)
    assert calls == [], (
        "a query returning the iterator (under its partition's lock) decodes nothing"
    )
    assert mapped.has_next() and calls == [1]
    unread = KeyValueIterator.of_rows([(1, "a")]).map_rows(convert, lambda pair: pair)
    unread.close()
    assert calls == [1], "an iterator closed unread is never decoded"
