"""The README's commands run as shown.

Every block of shell commands in the README is a ```console block; each runs, in the order of
the README, as one bash script (`set -euo pipefail`) in one working folder, unless an
`<!-- illustrative: why -->` line right above it says why it cannot (the set-up commands
themselves, `sudo`, a collector in the foreground). Code blocks whose first line is
`# file: NAME` are written to NAME in that folder when the README reaches them, so a later
command runs the file as a reader would. Commands ending in `&` run in the background until the
end of their block.

The only changes to what a reader types: the collector's default ports and the local model's
port 8000 become free ports (through the environment variables spanscore and OpenTelemetry
read, and in the text), so that the test never collides with a service of the machine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import free_port

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```$", re.S | re.M)
ILLUSTRATIVE = re.compile(r"<!-- illustrative: (.+?) -->\n$")


@dataclass
class Block:
    line: int
    language: str
    body: str
    illustrative: str | None

    @property
    def commands(self) -> list[str]:
        """The commands, without their prompts (continuation lines joined)."""
        commands: list[str] = []
        continuing = False
        for line in self.body.splitlines():
            if continuing:
                commands[-1] += "\n" + line
            elif line.startswith("$ "):
                commands.append(line[2:])
            else:
                continue
            continuing = line.endswith("\\")
        return commands

    @property
    def file_name(self) -> str | None:
        first = self.body.split("\n", 1)[0]
        return first.removeprefix("# file: ").strip() if first.startswith("# file: ") else None


def blocks() -> list[Block]:
    found = []
    for match in FENCE.finditer(README):
        before = README[: match.start()]
        marker = ILLUSTRATIVE.search(before)
        found.append(
            Block(
                line=before.count("\n") + 1,
                language=match.group(1),
                body=match.group(2),
                illustrative=marker.group(1) if marker else None,
            )
        )
    return found


def test_every_shell_block_is_a_console_block_and_says_why_when_it_does_not_run():
    for block in blocks():
        if block.language != "console":
            prompts = [line for line in block.body.splitlines() if line.startswith("$ ")]
            assert not prompts, f"README.md:{block.line}: shell commands belong in ```console"
        elif block.illustrative is None:
            assert block.commands, f"README.md:{block.line}: a console block without commands"
    runnable = [b for b in blocks() if b.language == "console" and b.illustrative is None]
    assert len(runnable) >= 5  # the next steps, the first agent, the first suite, SQL, show


@pytest.mark.slow
def test_the_readme_runs_as_shown(tmp_path: Path):
    venv_bin = Path(sys.executable).parent
    grpc, http, model = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "SPANSCORE_GRPC_PORT": str(grpc),
        "SPANSCORE_HTTP_PORT": str(http),
        "SPANSCORE_ENDPOINT": f"http://127.0.0.1:{http}",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{http}",
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("SPANSCORE_LAKE", "SPANSCORE_SUITE", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        env.pop(name, None)
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # paths as from a checkout
    # What `./run demo` leaves behind, which the next steps use.
    demo = subprocess.run(
        [str(venv_bin / "spanscore"), "demo"], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout + demo.stderr
    ran = 0
    for block in blocks():
        if block.file_name is not None:
            (tmp_path / block.file_name).write_text(block.body.split("\n", 1)[1])
            continue
        if block.language != "console" or block.illustrative is not None:
            continue
        script = "\n".join(
            [
                "set -euo pipefail",
                # background commands end with their block, like a reader's Ctrl-C
                "trap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT",
                *(command.replace("8000", str(model)) for command in block.commands),
            ]
        )
        done = subprocess.run(
            ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, (
            f"README.md:{block.line}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        )
        shown = [line for line in block.body.splitlines() if line and not line.startswith("$ ")]
        if shown:  # the output shown begins with a line the real output has
            assert shown[0] in done.stdout.splitlines(), f"README.md:{block.line}\n{done.stdout}"
        ran += 1
    assert ran >= 5


def test_the_next_steps_the_demo_prints_are_the_readmes():
    from spanscore.examples.demo import next_commands

    printed = [command for command, _ in next_commands(Path("spanscore-demo"))]
    assert any(b.commands == printed for b in blocks() if b.illustrative is None)
