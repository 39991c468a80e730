"""The commands of the README and of the docs pages run as shown.

Every block of shell commands in README.md and in docs/ is a ```console block. The blocks of
each page run, in the order of the page, as one bash script (`set -euo pipefail`) in a working
folder of the page's own, unless an `<!-- illustrative: why -->` line right above a block says
why it cannot (the set-up commands themselves, `sudo`, a collector in the foreground). Code
blocks whose first line is `# file: NAME` are written to NAME in that folder when the page
reaches them, so a later command runs the file as a reader would. Commands ending in `&` run in
the background until the end of their block.

Each page starts where `./run demo` leaves a reader: beside `examples/` and the demo's lake
`spanscore-demo/`, which the pages only read. The demo runs once, for every page.

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

from .support.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```$", re.S | re.M)
ILLUSTRATIVE = re.compile(r"<!-- illustrative: (.+?) -->\n$")


@dataclass
class Block:
    page: str
    line: int
    language: str
    body: str
    illustrative: str | None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

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

    @property
    def runs(self) -> bool:
        return self.language == "console" and self.illustrative is None


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()]
        marker = ILLUSTRATIVE.search(before)
        found.append(
            Block(
                page=str(page.relative_to(ROOT)),
                line=before.count("\n") + 1,
                language=match.group(1),
                body=match.group(2),
                illustrative=marker.group(1) if marker else None,
            )
        )
    return found


RUNNABLE_PAGES = [page for page in PAGES if any(b.runs for b in blocks(page))]


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_shell_block_is_a_console_block_and_says_why_when_it_does_not_run(page: Path):
    for block in blocks(page):
        if block.language != "console":
            prompts = [line for line in block.body.splitlines() if line.startswith("$ ")]
            assert not prompts, f"{block.where}: shell commands belong in ```console"
        elif block.illustrative is None:
            assert block.commands, f"{block.where}: a console block without commands"


def test_the_readme_and_the_pages_it_sends_readers_to_have_commands_that_run():
    readme = [b for b in blocks(ROOT / "README.md") if b.runs]
    assert len(readme) >= 3  # the next steps, the first agent, the first suite
    ran = {page_id(page) for page in RUNNABLE_PAGES}
    assert {"README.md", "docs/lake-and-sql.md", "docs/suites.md"} <= ran  # SQL, show, import


def _environment() -> dict[str, str]:
    venv_bin = Path(sys.executable).parent
    grpc, http = free_port(), free_port()
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
    return env


@pytest.fixture(scope="module")
def demo_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `./run demo` leaves behind, which the pages use."""
    folder = tmp_path_factory.mktemp("demo")
    demo = subprocess.run(
        [str(Path(sys.executable).parent / "spanscore"), "demo"], cwd=folder, env=_environment(),
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout + demo.stderr
    return folder / "spanscore-demo"


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=page_id)
def test_the_page_runs_as_shown(page: Path, demo_lake: Path, tmp_path: Path):
    env = _environment()
    model = free_port()
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # paths as from a checkout
    (tmp_path / "spanscore-demo").symlink_to(demo_lake)
    ran = 0
    for block in blocks(page):
        if block.file_name is not None:
            (tmp_path / block.file_name).write_text(block.body.split("\n", 1)[1])
            continue
        if not block.runs:
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
            f"{block.where}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        )
        shown = [line for line in block.body.splitlines() if line and not line.startswith("$ ")]
        if shown:  # the output shown begins with a line the real output has
            assert shown[0] in done.stdout.splitlines(), f"{block.where}\n{done.stdout}"
        ran += 1
    assert ran >= 1


def test_the_next_steps_the_demo_prints_are_the_readmes():
    from spanscore.examples.demo import next_commands

    printed = [command for command, _ in next_commands(Path("spanscore-demo"))]
    assert any(b.commands == printed for b in blocks(ROOT / "README.md") if b.runs)
