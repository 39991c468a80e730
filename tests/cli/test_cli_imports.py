"""What the command line imports: `spanscore --help`, `sql`, `show` and a run that judges nothing
leave the collector (gRPC), the judge's `openai` and what else they do not use alone, so that
they answer at once (bench/cli.py times them). Checked in a fresh interpreter's `sys.modules`,
never timed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spanscore.examples.synthetic import build_lake

from ..support.evaluation_runs import SUITE, write_suite
from ..support.lake import query

# One interpreter runs the steps in turn; after each it records which of WATCHED are loaded.
PROBE = r"""
import json, sys
steps, out = json.loads(sys.argv[1]), sys.argv[2]
WATCHED = json.loads(sys.argv[3])
loaded = {}
for name, args in steps:
    if args is None:
        import spanscore.cli, spanscore.evaluation
    else:
        from spanscore.cli import main
        try:
            main(args, prog_name="spanscore")
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
    loaded[name] = [m for m in WATCHED if m in sys.modules]
with open(out, "w") as f:
    json.dump(loaded, f)
"""

HEAVY = ["openai", "httpx2", "grpc", "spanscore.collector"]
WATCHED = [*HEAVY, "duckdb", "pyarrow", "pydantic", "spanscore.evaluation.suites"]


@pytest.mark.slow  # one interpreter, four commands: about 5 s
def test_commands_import_only_what_they_use(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    build_lake(lake, 3)
    conversation = query(lake, "SELECT min(conversation_id) FROM spans")[0][0]
    suite = write_suite(tmp_path, SUITE)
    steps = [
        ("import spanscore.cli and spanscore.evaluation", None),
        ("--help", ["--help"]),
        ("sql", ["sql", "--lake", str(lake), "SELECT count(*) FROM spans"]),
        ("show", ["show", "--lake", str(lake), conversation]),
        (
            "evaluate, nothing judged",
            [
                *("evaluate", "--lake", str(lake), "--suite", str(suite)),
                *("--since", "2020-01-01", "--settle", "0s", "--workers", "1"),
            ],
        ),
    ]
    out = tmp_path / "loaded.json"
    subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(steps), str(out), json.dumps(WATCHED)],
        check=True,
        capture_output=True,
        timeout=240,
    )
    loaded = json.loads(out.read_text())
    assert list(loaded) == [name for name, _ in steps]
    assert loaded["import spanscore.cli and spanscore.evaluation"] == []
    assert loaded["--help"] == []
    for name in ("sql", "show", "evaluate, nothing judged"):
        assert "duckdb" in loaded[name], f"{name} read no lake: the probe measured nothing"
        assert not set(HEAVY) & set(loaded[name]), name
    assert "spanscore.evaluation.suites" not in loaded["show"]


def _fresh_modules(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after `statement`."""
    done = subprocess.run(
        [sys.executable, "-c", f"{statement}; import sys; print('\\n'.join(sys.modules))"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return set(done.stdout.split())


def test_the_command_group_imports_a_command_only_when_it_is_wanted() -> None:
    loaded = _fresh_modules("import spanscore.cli")
    commands = {m for m in loaded if m.startswith("spanscore.cli.")}
    assert commands <= {"spanscore.cli.options", "spanscore.cli.invocation"}, commands
    assert "asyncio" not in loaded  # the simulator's
    shown = _fresh_modules(
        "import click; from spanscore.cli import main; "
        "main.get_command(click.Context(main), 'show')"
    )
    assert "spanscore.cli.show" in shown
    assert "spanscore.cli.simulate" not in shown


def test_a_conversations_rows_are_read_without_the_trajectory_model() -> None:
    # `show` reads the rows in one thread while another imports the model (pydantic).
    loaded = _fresh_modules("import spanscore.evaluation.trajectory.rows")
    assert "duckdb" in loaded
    assert not {m for m in loaded if m.split(".")[0] == "pydantic"}
    assert "spanscore.evaluation.trajectory.model" not in loaded
