"""A request used before `with_query` says what to do, wherever it is first used."""

from __future__ import annotations

from pathlib import Path

import pytest

from iqstate import Application, KeyQuery, StateQueryRequest
from iqstate.request import IncompleteRequestError

WHAT_TO_DO = r"in_store\('words'\) has no query yet.*call \.with_query\(<query>\) on it first"


def test_application_query_names_the_missing_with_query(tmp_path: Path) -> None:
    app = Application("requests", tmp_path)
    app.key_value_store("words", 2)
    with app:
        with pytest.raises(IncompleteRequestError, match=WHAT_TO_DO):
            app.query(StateQueryRequest.in_store("words"))  # type: ignore[arg-type]
        answered = app.query(StateQueryRequest.in_store("words").with_query(KeyQuery.with_key("a")))
        assert answered.only_partition_result() is None


@pytest.mark.parametrize(
    "use",
    [
        lambda request: request.query,
        lambda request: request.position_bound,
        lambda request: request.is_all_partitions,
        lambda request: request.with_partitions({0}),
        lambda request: request.require_active(),
    ],
    ids=["query", "position_bound", "is_all_partitions", "with_partitions", "require_active"],
)
def test_getters_and_options_name_the_missing_with_query(use: object) -> None:
    incomplete = StateQueryRequest.in_store("words")
    with pytest.raises(IncompleteRequestError, match=WHAT_TO_DO):
        use(incomplete)  # type: ignore[operator]


def test_with_partitions_names_what_it_takes() -> None:
    request = StateQueryRequest.in_store("s").with_query(KeyQuery.with_key("k"))
    with pytest.raises(
        TypeError, match=r"an iterable of partition numbers \(for example \{0\}\), got 0"
    ):
        request.with_partitions(0)  # type: ignore[arg-type]
    assert request.with_partitions([1, 1]).partitions == frozenset({1})


def test_it_is_still_an_attribute_error_for_hasattr_and_getattr() -> None:
    incomplete = StateQueryRequest.in_store("words")
    assert not hasattr(incomplete, "query")
    assert getattr(incomplete, "partitions", "none yet") == "none yet"
    assert incomplete.store_name == "words"
