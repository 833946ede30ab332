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
