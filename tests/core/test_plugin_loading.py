"""Installed plugins that fail to load: skipped with a warning, listed by `iqstate plugins`,
and named when a store asks for an engine they would have provided.

Each test installs fake distributions (a `.dist-info` with an `iqstate` entry point, and
their modules) into a folder it puts on `sys.path`, as an installed plugin is found.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from iqstate import Application, UnknownEngineError
from iqstate.errors import PluginError
from iqstate.hookspecs import hookimpl
from iqstate.plugins import BLOCK_ENV, PluginRegistry, make_plugin_manager

GOOD_PLUGIN = """
from iqstate.engine import Engine
from iqstate.hookspecs import hookimpl


@hookimpl
def iqstate_register_engines(register):
    register(Engine(name="good", key_value_store="iqstate.engines.memory:MemoryKeyValueStore"))
"""

RAISING_PLUGIN = "raise RuntimeError('the plugin module is broken')\n"

MISSPELT_HOOK_PLUGIN = """
from iqstate.engine import Engine
from iqstate.hookspecs import hookimpl


@hookimpl
def iqstate_register_engines(register):
    register(Engine(name="hooky", key_value_store="iqstate.engines.memory:MemoryKeyValueStore"))


@hookimpl
def iqstate_register_query_handler(register):
    pass
"""

BAD_SIGNATURE_PLUGIN = """
from iqstate.engine import Engine
from iqstate.hookspecs import hookimpl


@hookimpl
def iqstate_register_engines(register):
    register(Engine(name="sig", key_value_store="iqstate.engines.memory:MemoryKeyValueStore"))


@hookimpl
def iqstate_register_query_handlers(reg):
    pass
"""

BROKEN_COMMAND_PLUGIN = """
from iqstate.hookspecs import hookimpl


@hookimpl
def iqstate_register_commands(register):
    register("my-tool", "what it does", "iqstate_nowhere.tool:add_arguments",
             "iqstate_nowhere.tool:run")
"""

FAILING_COMMANDS_PLUGIN = """
from iqstate.errors import StateDirectoryLockedError
from iqstate.hookspecs import hookimpl


def add_arguments(parser):
    pass


def refuse(args):
    raise StateDirectoryLockedError("state directory /srv/state is used by process 4242")


def crash(args):
    raise RuntimeError("a bug in the tool")


@hookimpl
def iqstate_register_commands(register):
    register("refusing-tool", "refuses", add_arguments, refuse)
    register("crashing-tool", "crashes", add_arguments, crash)
"""

SILENT_HOOKS_PLUGIN = """
from iqstate.engine import Engine
from iqstate.hookspecs import hookimpl


def iqstate_register_engines(register):
    register(Engine(name="unmarked", key_value_store="iqstate.engines.memory:MemoryKeyValueStore"))


@hookimpl
def iqstate_register_serdes():
    pass
"""

Install = Callable[[str, str, str | None], None]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on `sys.path` to install fake distributions into; their modules are
    forgotten afterwards."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    before = set(sys.modules)
    yield folder
    for name in set(sys.modules) - before:
        if name.startswith("iqstate_fake_"):
            del sys.modules[name]


@pytest.fixture
def install(site: Path) -> Install:
    """`install(entry_point_name, entry_point_target, module_source)`: a distribution
    `iqstate-<name>` whose module `iqstate_fake_<name>` holds `module_source` (no module
    for `None`)."""

    def install_plugin(name: str, target: str, source: str | None) -> None:
        info = site / f"iqstate_{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: iqstate-{name}\nVersion: 1.0\n"
        )
        (info / "entry_points.txt").write_text(f"[iqstate]\n{name} = {target}\n")
        if source is not None:
            (site / f"iqstate_fake_{name}.py").write_text(source)

    return install_plugin


def registry() -> PluginRegistry:
    return PluginRegistry.from_plugin_manager(make_plugin_manager())


def run_cli(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "iqstate.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(site)},
    )


def test_a_plugin_that_fails_to_import_is_skipped_and_the_others_keep_working(
    install: Install, caplog: pytest.LogCaptureFixture
) -> None:
    install("typo", "iqstate_fake_tpyo", None)
    install("raising", "iqstate_fake_raising", RAISING_PLUGIN)
    install("good", "iqstate_fake_good", GOOD_PLUGIN)
    with caplog.at_level(logging.WARNING, logger="iqstate.plugins"):
        loaded = registry()
    assert "good" in loaded.engines and "memory" in loaded.engines
    assert {"typo", "raising"} <= set(loaded.failed_plugins)
    assert not {"typo", "raising"} & set(loaded.plugin_names)
    warnings = {record.getMessage() for record in caplog.records}
    (typo,) = (message for message in warnings if "'typo'" in message)
    assert "'iqstate-typo'" in typo and "No module named 'iqstate_fake_tpyo'" in typo
    assert f"{BLOCK_ENV}=typo" in typo
    (raising,) = (message for message in warnings if "'raising'" in message)
    assert "RuntimeError: the plugin module is broken" in raising


def test_an_entry_point_name_that_loads_from_one_distribution_is_not_reported_failed(
    site: Path,
) -> None:
    """Two distributions with the same entry point name, one broken: whichever is found
    first, the one that loads is the plugin, and it is not listed as unavailable."""
    for distribution, target in (
        ("broken", "iqstate_fake_nowhere"),
        ("working", "iqstate_fake_dup"),
    ):
        info = site / f"iqstate_dup_{distribution}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: iqstate-dup-{distribution}\nVersion: 1.0\n"
        )
        (info / "entry_points.txt").write_text(f"[iqstate]\ndup = {target}\n")
    (site / "iqstate_fake_dup.py").write_text(GOOD_PLUGIN)
    loaded = registry()
    assert "dup" in loaded.plugin_names and "good" in loaded.engines
    assert "dup" not in loaded.failed_plugins


def test_hooks_that_would_do_nothing_silently_are_warned_about(
    install: Install, caplog: pytest.LogCaptureFixture
) -> None:
    install("silent", "iqstate_fake_silent", SILENT_HOOKS_PLUGIN)
    with caplog.at_level(logging.WARNING, logger="iqstate.plugins"):
        loaded = registry()
    assert "silent" in loaded.plugin_names and "unmarked" not in loaded.engines
    warnings = [record.getMessage() for record in caplog.records]
    assert any(
        "plugin 'silent' defines iqstate_register_engines without @hookimpl" in m for m in warnings
    ), warnings
    assert any(
        "plugin 'silent' implements iqstate_register_serdes without its register parameter" in m
        for m in warnings
    ), warnings


def test_an_extra_plugins_hooks_that_would_do_nothing_are_warned_about_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Unmarked:
        def iqstate_register_engines(self, register: object) -> None:  # no @hookimpl
            raise AssertionError("never called")

    with caplog.at_level(logging.WARNING, logger="iqstate.plugins"):
        make_plugin_manager(load_entry_points=False, extra_plugins=[("mine", Unmarked())])
    assert any(
        "plugin 'mine' defines iqstate_register_engines without @hookimpl" in r.getMessage()
        for r in caplog.records
    )


def test_a_store_of_a_failed_plugins_engine_says_the_plugin_failed_and_why(
    install: Install, tmp_path: Path
) -> None:
    install("typo", "iqstate_fake_tpyo", None)
    app = Application("failed", tmp_path / "state", plugins=registry())
    with pytest.raises(UnknownEngineError) as error:
        app.key_value_store("counts", 1, engine="typo")
    message = str(error.value)
    assert "plugin 'typo' (distribution 'iqstate-typo') failed to load" in message
    assert "No module named 'iqstate_fake_tpyo'" in message
    assert "pip install" not in message


def test_plugins_that_failed_are_mentioned_when_an_engine_is_missing(install: Install) -> None:
    install("raising", "iqstate_fake_raising", RAISING_PLUGIN)
    with pytest.raises(UnknownEngineError) as error:
        registry().engine("cassandra", store="counts")
    assert "plugin 'raising' (distribution 'iqstate-raising') failed to load" in str(error.value)


def test_a_plugin_with_a_misspelt_hook_is_skipped_with_the_right_name(
    install: Install, caplog: pytest.LogCaptureFixture
) -> None:
    install("hooky", "iqstate_fake_hooky", MISSPELT_HOOK_PLUGIN)
    with caplog.at_level(logging.WARNING, logger="iqstate.plugins"):
        loaded = registry()
    assert "hooky" not in loaded.engines, "a skipped plugin registers nothing"
    assert "did you mean 'iqstate_register_query_handlers'" in loaded.failed_plugins["hooky"].error
    assert "'hooky'" in caplog.text


def test_a_misspelt_hook_of_a_plugin_given_in_code_is_refused_by_name() -> None:
    class Misspelt:
        @hookimpl
        def iqstate_register_engine(self, register: Any) -> None:
            raise AssertionError("never called")

    with pytest.raises(PluginError) as refused:
        make_plugin_manager(load_entry_points=False, extra_plugins=[("mine", Misspelt())])
    assert str(refused.value).startswith(
        "plugin 'mine' implements 'iqstate_register_engine', which is not an iqstate hook; "
        "did you mean 'iqstate_register_engines'?"
    )


def test_a_plugin_refused_for_its_name_leaves_the_one_of_that_name_registered() -> None:
    manager = make_plugin_manager(load_entry_points=False)
    builtin = manager.get_plugin("memory")
    with pytest.raises(ValueError, match="memory"):
        manager.register_checked(object(), "memory")
    assert manager.get_plugin("memory") is builtin


def test_a_plugin_whose_hook_pluggy_refuses_is_skipped_whole(install: Install) -> None:
    install("sig", "iqstate_fake_sig", BAD_SIGNATURE_PLUGIN)
    loaded = registry()
    assert "sig" not in loaded.engines, "its valid hooks are not left registered"
    assert "'reg'" in loaded.failed_plugins["sig"].error
    assert "memory" in loaded.engines


def test_iqstate_plugins_lists_a_broken_plugin_as_unavailable(install: Install, site: Path) -> None:
    install("typo", "iqstate_fake_tpyo", None)
    completed = run_cli(site, "plugins")
    assert completed.returncode == 0, completed.stderr
    assert "typo  (unavailable: distribution iqstate-typo failed to load: ModuleNotFoundError" in (
        completed.stdout
    )
    assert "memory  (in-memory, from plugin memory)" in completed.stdout
    assert "plugin 'typo' (distribution 'iqstate-typo') failed to load" in completed.stderr
    assert "Traceback" not in completed.stderr
    report = json.loads(run_cli(site, "plugins", "--json").stdout)
    (failed,) = (p for p in report["unavailable_plugins"] if p["name"] == "typo")
    assert failed["distribution"] == "iqstate-typo"
    assert "No module named 'iqstate_fake_tpyo'" in failed["error"]


def test_a_command_that_fails_to_load_leaves_the_other_commands_working(
    install: Install, site: Path
) -> None:
    install("tool", "iqstate_fake_tool", BROKEN_COMMAND_PLUGIN)
    listed = run_cli(site, "plugins")
    assert listed.returncode == 0, listed.stderr
    assert "the command 'my-tool' of plugin 'tool' is unavailable" in listed.stderr
    assert "Traceback" not in listed.stderr
    broken = run_cli(site, "my-tool")
    assert broken.returncode == 2
    assert "No module named 'iqstate_nowhere'" in broken.stderr
    assert "Traceback" not in broken.stderr


def test_a_plugin_commands_failures_say_what_failed_and_whose_it_is(
    install: Install, site: Path
) -> None:
    install("tools", "iqstate_fake_tools", FAILING_COMMANDS_PLUGIN)
    refused = run_cli(site, "refusing-tool")
    assert refused.returncode == 1
    assert refused.stderr == (
        "iqstate refusing-tool: error: state directory /srv/state is used by process 4242\n"
    )
    crashed = run_cli(site, "crashing-tool")
    assert crashed.returncode == 1
    assert "the command of plugin 'tools' failed unexpectedly" in crashed.stderr
    assert "Traceback" in crashed.stderr and "RuntimeError: a bug in the tool" in crashed.stderr


def test_a_blocked_engine_says_it_is_blocked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BLOCK_ENV, "memory")
    loaded = registry()
    assert loaded.blocked_plugins == ["memory"]
    with pytest.raises(UnknownEngineError) as error:
        loaded.engine("memory", store="counts")
    message = str(error.value)
    assert f"'memory', is blocked by {BLOCK_ENV}" in message
    assert "pip install" not in message
