"""Declaring stores, validating options, the lifecycle and the state directory lock."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from iqstate import (
    Application,
    AppState,
    HostInfo,
    InMemoryChangelog,
    KeyQuery,
    PluginError,
    Serdes,
    StateDirectoryLockedError,
    StateQueryRequest,
    StateStorageError,
    StreamsStoppedError,
    UnknownEngineError,
)

MakeApp = Callable[..., Application]


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "empty"),
        ("word counts", "' '"),
        ("counts/2", "'/'"),
        ("ünïcode", "use only ASCII"),
        ("x" * 250, "at most 249"),
        ("..", "not allowed"),
    ],
)
def test_store_names_use_kafka_topic_characters(make_app: MakeApp, name: str, problem: str) -> None:
    app = make_app()
    with pytest.raises(ValueError, match=problem):
        app.key_value_store(name, 1)


def test_legal_store_names(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("a" * 249, 1)
    app.key_value_store("Word_counts-v2.1", 1)
    assert set(app.stores) == {"a" * 249, "Word_counts-v2.1"}


def test_option_errors_name_what_is_wrong(make_app: MakeApp) -> None:
    app = make_app()
    with pytest.raises(ValueError, match="partitions must be >= 1"):
        app.key_value_store("s", 0)
    with pytest.raises(TypeError, match="partitions must be an int"):
        app.key_value_store("s", "4")  # type: ignore[arg-type]
    with pytest.raises(UnknownEngineError, match="installed engines: .*memory"):
        app.key_value_store("s", 1, engine="cassandra")
    with pytest.raises(PluginError, match="no serde named 'msgpack'"):
        app.key_value_store("s", 1, value_serde="msgpack")
    with pytest.raises(ValueError, match="retention_ms"):
        app.window_store("w", 1, window_size_ms=60_000, retention_ms=1_000)
    with pytest.raises(ValueError, match="window_size_ms must be >= 1"):
        app.window_store("w", 1, window_size_ms=0, retention_ms=1_000)
    with pytest.raises(ValueError, match="caching"):
        app.key_value_store("s", 1, caching=0)
    with pytest.raises(TypeError, match="caching must be a bool or a size >= 1, got 'yes'"):
        app.key_value_store("s", 1, caching="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="store 's': logging must be True or False, got 'yes'"):
        app.key_value_store("s", 1, logging="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="partitioner"):
        app.key_value_store("s", 1, partitioner="murmur")  # type: ignore[arg-type]
    app.key_value_store("s", 1)
    with pytest.raises(ValueError, match="declared twice"):
        app.key_value_store("s", 2)
    with pytest.raises(ValueError, match="application_server"):
        make_app(application_server="localhost")
    with pytest.raises(TypeError, match="application_server must be a 'host:port' string"):
        make_app(application_server=HostInfo("localhost", 7070))
    with pytest.raises(ValueError, match="processing_guarantee"):
        make_app(processing_guarantee="maybe")
    with pytest.raises(ValueError, match="application name"):
        make_app("my app")


def test_serdes_by_name_or_object(make_app: MakeApp) -> None:
    app = make_app()
    spec = app.key_value_store("n", 1, key_serde="int64", value_serde=Serdes.float64())
    assert spec.key_serde is Serdes.int64() and spec.value_serde is Serdes.float64()
    default = app.key_value_store("d", 1)
    assert default.key_serde is Serdes.string() and default.value_serde is Serdes.json()


def test_lifecycle(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 2)
    assert app.state is AppState.CREATED
    app.start()
    assert app.state is AppState.RUNNING
    with pytest.raises(RuntimeError, match="CREATED"):
        app.start()
    with pytest.raises(RuntimeError, match="before start"):
        app.key_value_store("late", 1)
    app.close()
    assert app.state is AppState.NOT_RUNNING
    app.close()
    assert app.state is AppState.NOT_RUNNING


def test_context_manager_starts_and_closes(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 1)
    with app as running:
        assert running is app and app.state is AppState.RUNNING
    assert app.state is AppState.NOT_RUNNING


def test_close_without_start(make_app: MakeApp) -> None:
    app = make_app()
    app.close()
    assert app.state is AppState.NOT_RUNNING


def test_logging_needs_a_changelog(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 1, logging=True)
    with pytest.raises(ValueError, match="no changelog"):
        app.start()
    assert app.state is AppState.CREATED
    ok = make_app("other", changelog=InMemoryChangelog())
    ok.key_value_store("s", 1, logging=True)
    ok.start()


def test_a_closed_application_says_to_start_a_new_one(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 1)
    app.start()
    app.close()
    with pytest.raises(StreamsStoppedError, match=r"NOT_RUNNING.*start a new Application") as e:
        app.query(StateQueryRequest.in_store("s").with_query(KeyQuery.with_key("k")))
    assert "close() it" not in str(e.value)  # it is closed already
    with pytest.raises(RuntimeError, match="an Application starts once; start a new one"):
        app.start()


def test_a_state_directory_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    app = Application("app", tmp_path / "a-file" / "state")
    app.key_value_store("s", 1)
    with pytest.raises(StateStorageError, match=r"state directory .*a-file/state/app.*Not a dir"):
        app.start()
    assert app.state is AppState.CREATED


def test_second_application_on_the_same_directory_fails_at_once(make_app: MakeApp) -> None:
    first = make_app()
    first.start()
    second = make_app()
    with pytest.raises(
        StateDirectoryLockedError,
        match=f"process {os.getpid()}; another Application in this process",
    ):
        second.start()
    assert second.state is AppState.CREATED
    first.close()
    second.start()
    assert second.state is AppState.RUNNING


def test_lock_names_another_process(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys, time
        from iqstate import Application
        app = Application("app", {str(tmp_path)!r})
        app.start()
        print("ready", flush=True)
        sys.stdin.readline()
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        started = time.monotonic()
        with pytest.raises(StateDirectoryLockedError, match=f"locked by process {child.pid}"):
            Application("app", tmp_path).start()
        assert time.monotonic() - started < 1.0, "the second start fails at once"
    finally:
        child.communicate("\n", timeout=10)
    app = Application("app", tmp_path)
    app.start()
    app.close()


def test_queries_through_the_application(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 3)
    with app:
        with app.begin_batch() as batch:
            batch.put("s", "k", {"v": 1})
        result = app.query(StateQueryRequest.in_store("s").with_query(KeyQuery.with_key("k")))
        only = result.only_partition_result()
        assert only is not None and only.result == {"v": 1}


def test_a_closed_application_cannot_be_entered_again(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 1)
    app.start()
    with app:  # a started application is entered as it is
        assert app.state is AppState.RUNNING
    assert app.state is AppState.NOT_RUNNING
    with pytest.raises(StreamsStoppedError, match="closed \\(NOT_RUNNING\\).*new Application"):
        with app:
            pass


def test_serving_false_is_for_a_writer_of_a_cluster(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="serving=False is for an application that writes"):
        Application("w", tmp_path, serving=False)
    with pytest.raises(TypeError, match="serving must be True or False"):
        Application("w", tmp_path, serving="no")  # type: ignore[arg-type]
