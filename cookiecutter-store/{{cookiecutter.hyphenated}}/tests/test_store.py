"""The engine against iqstate's conformance suite, and its own query through an application."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from iqstate import Application, StateQueryRequest
from iqstate.store import StateStore
from iqstate.testing import StoreConformance, StoreFactory
from iqstate_{{ cookiecutter.underscored }} import ENGINE, EntryCountQuery, {{ cookiecutter.class_prefix }}Store


class Test{{ cookiecutter.class_prefix }}Conformance(StoreConformance):
    persistent = True
    manages_offsets = True
    state_machine_examples = 30

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return StoreFactory.for_engine(ENGINE)

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


def test_loading_the_plugin_does_not_import_the_store() -> None:
    # Every iqstate application loads every installed plugin: the store (and whatever
    # library it needs) is imported only when a store of this engine is built.
    check = (
        "import sys, iqstate_{{ cookiecutter.underscored }}.plugin; "
        "print('iqstate_{{ cookiecutter.underscored }}.store' in sys.modules)"
    )
    loaded = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"
