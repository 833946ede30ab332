"""The engine against iqstate's conformance suite, and its own query through an application."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from iqstate import (
    Application,
    StateQueryRequest,
    VersionedKeyQuery,
    VersionedRecord,
    Windowed,
    WindowRangeQuery,
)
from iqstate.store import StateStore
from iqstate.testing import StoreConformance, StoreFactory
from iqstate_{{ cookiecutter.underscored }} import ENGINE, EntryCountQuery, {{ cookiecutter.class_prefix }}Store


class Test{{ cookiecutter.class_prefix }}Conformance(StoreConformance):
    persistent = True
    manages_offsets = True
    window = True
    state_machine_examples = 30

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return StoreFactory.for_engine(ENGINE)

    @pytest.fixture
    def store_config(self) -> dict[str, object]:
        # The options every store of the suite opens with (`context.config`); give the
        # ones your users set once the engine has some (see OPTIONS in plugin.py).
        return {}

    def simulate_crash(self, store: StateStore) -> None:
        assert isinstance(store, {{ cookiecutter.class_prefix }}Store)
        store.abandon()


def test_entry_count_query_through_an_application(tmp_path: Path) -> None:
    app = Application("example", tmp_path)
    app.key_value_store("words", 2, engine="{{ cookiecutter.hyphenated }}", value_serde="int64")
    with app:
        with app.begin_batch() as batch:
            batch.put_all("words", [("a", 1), ("b", 2), ("c", 3)])
        result = app.query(StateQueryRequest.in_store("words").with_query(EntryCountQuery()))
        assert sum(r.result for r in result.partition_results.values()) == 3


def test_an_unknown_engine_option_is_refused_at_declaration(tmp_path: Path) -> None:
    app = Application("options", tmp_path)
    with pytest.raises(ValueError, match="has no option 'sync'"):
        app.key_value_store("words", 2, engine="{{ cookiecutter.hyphenated }}", config={"sync": True})


def test_versioned_and_session_stores_come_with_the_engine(tmp_path: Path) -> None:
    # The conformance suite above checks them store by store; here through an application.
    app = Application("types", tmp_path)
    engine = "{{ cookiecutter.hyphenated }}"
    app.versioned_key_value_store("rates", 2, 60_000, engine=engine, value_serde="float64")
    app.session_store("visits", 2, 60_000, engine=engine, value_serde="int64")
    with app:
        with app.begin_batch() as batch:
            batch.put("rates", "EUR", 1.08, timestamp=1_000)
            batch.put("rates", "EUR", 1.10, timestamp=3_000)
            batch.put("visits", "ada", 3, session=(0, 10))
        rate = app.query(
            StateQueryRequest.in_store("rates").with_query(VersionedKeyQuery.with_key("EUR").as_of(2_000))
        ).only_partition_result()
        assert rate is not None and rate.result == VersionedRecord(1.08, 1_000, 3_000)
        visits = app.query(
            StateQueryRequest.in_store("visits").with_query(WindowRangeQuery.with_key("ada"))
        ).only_partition_result()
        assert visits is not None and list(visits.result) == [(Windowed("ada", 0, 10), 3)]


def test_loading_the_plugin_does_not_import_the_store() -> None:
    # Every iqstate application loads every installed plugin: the store (and whatever
    # library it needs) is imported only when a store of this engine is built.
    check = (
        "import sys, iqstate_{{ cookiecutter.underscored }}.plugin; "
        "print('iqstate_{{ cookiecutter.underscored }}.store' in sys.modules)"
    )
    loaded = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"
