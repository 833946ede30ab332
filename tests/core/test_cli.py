"""The `iqstate` command line: a mistyped option is reported by its subcommand, naming the
option meant."""

from __future__ import annotations

import pytest

from iqstate.cli import main


@pytest.mark.parametrize(
    ("arguments", "command", "meant"),
    [
        (["plugins", "--jsn"], "plugins", "--jsn: did you mean --json?"),
        (["new-store", "x", "--output_dir", "o"], "new-store", "did you mean --output-dir?"),
    ],
)
def test_a_mistyped_option_names_the_one_meant(
    arguments: list[str], command: str, meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(arguments)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith(f"usage: iqstate {command}"), error  # the subcommand's usage
    assert f"iqstate {command}: error: unrecognized arguments" in error
    assert meant in error


def test_an_argument_nothing_resembles_is_named_alone(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["plugins", "extra"])
    assert "iqstate plugins: error: unrecognized arguments: extra\n" in capsys.readouterr().err


def test_a_plugin_command_describes_itself_in_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert "serve an Application's stores over HTTP" in capsys.readouterr().out
