"""How to type `spanscore` again: the commands the CLI suggests (the demo's next steps, the
hints in its errors) are printed as the reader can run them as printed, in the shell they
typed the last one in, whether `spanscore` is on their PATH or not (`./run demo` runs
`.venv/bin/spanscore` without activating the environment)."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path


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
    if started.is_absolute():
        try:
            started = started.relative_to(Path.cwd())
        except ValueError:
            return shlex.quote(str(started))
    shown = str(started)
    # A bare name is looked up on PATH: a path needs a slash (`./spanscore`).
    return shlex.quote(shown if os.sep in shown else f".{os.sep}{shown}")


def runnable(text: str) -> str:
    """`text` with the commands it suggests between backticks (`` `spanscore runs` ``) written
    as `spanscore_command()` runs them."""
    command = spanscore_command()
    if command == "spanscore":
        return text
    return text.replace("`spanscore ", f"`{command} ")
