"""How to type `spanscore` again: the commands the CLI suggests (the demo's next steps, the
hints in its errors) are printed as the reader can run them as printed, in a new shell, from
any folder, whether `spanscore` is on their PATH or not (`./run demo` runs
`.venv/bin/spanscore` without activating the environment): the program by its absolute path
when it is not on PATH, and the lake the command was given (an embedded lake by its absolute
path) where the hint names none."""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from pathlib import Path

import click

from .options import LAKE_META


def spanscore_command() -> str:
    """`spanscore` when that runs this same program, else the path it was started by
    (`.venv/bin/spanscore`), else `PYTHON -m spanscore.cli`."""
    started = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if started is not None and started.name == "__main__.py" and started.parent.name == "cli":
        return f"{shlex.quote(sys.executable)} -m spanscore.cli"
    if started is None or started.name != "spanscore" or not started.is_file():
        return "spanscore"  # not started as the command (a test's CliRunner, an embedding)
    found = shutil.which("spanscore")
    if found is not None and Path(found).resolve() == started.resolve():
        return "spanscore"
    # Absolute (not resolved: a virtual environment's `bin` may be a link), so that it runs
    # from any folder.
    return shlex.quote(str(started.absolute()))


# A suggested command between backticks: `spanscore SUBCOMMAND ...`.
_HINT = re.compile(r"`spanscore ([a-z][a-z-]*)([^`]*)`")


def runnable(text: str, lake: str | None = None) -> str:
    """`text` with the commands it suggests between backticks (`` `spanscore runs` ``) written
    as `spanscore_command()` runs them, with `--lake` (`lake`, else the one this command line
    was given) added to those that take one and name no lake nor endpoint."""
    if lake is None:
        ctx = click.get_current_context(silent=True)
        lake = ctx.meta.get(LAKE_META) if ctx is not None else None
    shown_lake = _shown_lake(lake) if lake else None
    command = spanscore_command()

    def written(found: re.Match[str]) -> str:
        name, rest = found.group(1), found.group(2)
        if (
            shown_lake is not None
            and "--lake" not in rest
            and "--endpoint" not in rest
            and _takes_lake(name)
        ):
            rest = f" --lake {shown_lake}{rest}"
        return f"`{command} {name}{rest}`"

    return _HINT.sub(written, text)


def _shown_lake(lake: str) -> str | None:
    """An embedded lake by its absolute path; None for a PostgreSQL one (its connection
    string may hold a password: not printed)."""
    from spanscore.lake import LakeLocation

    try:
        directory = LakeLocation.parse(lake).directory
    except Exception:  # a lake that cannot be named: the hint stays as it is
        return None
    return shlex.quote(str(directory)) if directory is not None else None


def _takes_lake(name: str) -> bool:
    from spanscore.cli import main

    found = main.get_command(click.Context(main), name)
    return found is not None and any(p.name == "lake" for p in found.params)
