"""The repository keeps its promises: CI runs exactly the README's test command."""

from pathlib import Path

ROOT = Path(__file__).parent.parent


def readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set up and test", 1)[1]
    return section.split("```bash", 1)[1].split("```", 1)[0].strip()


def test_ci_runs_the_readme_test_command() -> None:
    command = readme_test_command()
    assert "pytest" in command
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert command in ci_lines
