"""The README cannot drift from the code, and keeps its promises (two commands, same CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanscore.cli import main
from spanscore.cli.reference import render

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_reference_sections_are_up_to_date() -> None:
    assert render(README) == README, (
        "README reference sections are stale: run "
        "`.venv/bin/python -m spanscore.cli.reference README.md`"
    )


def test_the_two_setup_commands_and_ci_agree() -> None:
    assert "$ ./run demo" in README
    assert "$ ./run test" in README
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./run test" in ci
    assert "./run lint" in ci
    lint = (ROOT / "run").read_text()
    for tool in ("ruff check", "ruff format --check", "mypy"):
        assert tool in lint


@pytest.mark.parametrize("name", sorted(main.commands))
def test_every_command_has_help_with_an_example(name: str) -> None:
    command = main.commands[name]
    assert command.help, f"spanscore {name} has no help text"
    assert f"$ spanscore {name}" in command.help, f"spanscore {name} has no example"
    assert f"#### `spanscore {name}`" in README
