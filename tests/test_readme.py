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

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
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
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`./run demo` in a new shell: a checkout's folder with `.venv/` beside the reader, not on
    their PATH; the folder and what the demo printed."""
    folder = tmp_path_factory.mktemp("demo")
    (folder / ".venv").symlink_to(Path(sys.executable).parent.parent)
    demo = _new_shell(".venv/bin/spanscore demo", folder)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    return folder, demo.stdout


@pytest.fixture(scope="module")
def demo_lake(demo_run: tuple[Path, str]) -> Path:
    """What `./run demo` leaves behind, which the pages use."""
    return demo_run[0] / "spanscore-demo"


# Under the test's own timeout (pytest-timeout, 300 s), so that the test, not the timeout,
# ends a block that hangs.
BLOCK_DEADLINE_S = 240


def _bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`script` in bash, in a session of its own: a block that does not end (a collector
    started in the foreground) fails the test within its deadline, and everything the block
    started is killed with it, rather than outliving the test."""
    process = subprocess.Popen(
        ["bash", "-c", script],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=BLOCK_DEADLINE_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"did not end within {BLOCK_DEADLINE_S} s:\n{script}\n{out}\n{err}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # what the block left in the background
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def _new_shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`command` in a new shell that has not activated .venv (the PATH of a fresh login)."""
    return _bash(command, cwd, _fresh_login_environment())


def _fresh_login_environment() -> dict[str, str]:
    """The test's environment with the PATH of a fresh login (no .venv activated)."""
    env = {k: v for k, v in _environment().items() if k != "PATH"}
    env["PATH"] = os.pathsep.join(["/usr/local/bin", "/usr/bin", "/bin"])
    return env


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
        done = _bash(script, tmp_path, env)
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


# --- hints run as printed, in a new shell --------------------------------------------------------


@pytest.mark.slow
def test_every_command_the_demo_and_its_errors_suggest_runs_as_printed_in_a_new_shell(
    demo_run: tuple[Path, str],
):
    tmp_path, stdout = demo_run
    printed = [
        line.split("$ ", 1)[1] for line in stdout.splitlines() if line.lstrip().startswith("$ ")
    ]
    assert len(printed) >= 6, stdout  # the SQL shown, and the three next steps
    # Errors whose message suggests a command: an unknown run, a collector's gRPC port.
    unknown = _new_shell(".venv/bin/spanscore report nosuchrun --lake spanscore-demo", tmp_path)
    assert unknown.returncode == 2, unknown.stderr
    grpc = free_port()
    with socket.socket() as listener:  # answers nothing HTTP/1.1 can read
        listener.bind(("127.0.0.1", grpc))
        listener.listen()
        threading.Thread(target=_answer_like_http2, args=(listener,), daemon=True).start()
        status = _new_shell(
            f".venv/bin/spanscore status --endpoint http://127.0.0.1:{grpc}", tmp_path
        )
    assert status.returncode == 2, status.stderr
    hints = [re.findall(r"`([^`]*spanscore [^`]*)`", e.stderr) for e in (unknown, status)]
    assert all(hints), (unknown.stderr, status.stderr)
    for command in printed:
        if " ui --lake " in command:  # a server: it answers as printed, until stopped
            _serves_as_printed(command, tmp_path)
            continue
        done = _new_shell(command, tmp_path)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        if " show " in command:  # as the docs show it: the agent named, turns from 1
            assert "  agent customer-service  " in done.stdout, done.stdout
            assert "\nturn 1  user: " in done.stdout, done.stdout
    for command in [h for found in hints for h in found]:
        done = _new_shell(command, tmp_path)  # runs (a collector may not be there to answer)
        assert done.returncode not in (126, 127), f"{command}\n{done.stderr}"
    # What they write stays in the demo's lake folder (ignored by git, unlike a report.html
    # in the checkout).
    written = [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()]
    assert written, written
    assert all(w.startswith("spanscore-demo/") for w in written), written


def _serves_as_printed(command: str, cwd: Path) -> None:
    """A server command run as printed, in a new shell (its port from its variable, any free
    one, so that the test needs no fixed port): it prints its URL, the URL answers, and it stops
    on Ctrl-C."""
    import urllib.request

    env = {**_fresh_login_environment(), "SPANSCORE_UI_PORT": "0"}
    process = subprocess.Popen(
        ["bash", "-c", f"exec {command}"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert found, f"{command}: {line!r}"
        with urllib.request.urlopen(found.group(0), timeout=60) as answer:
            assert answer.status == 200
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=60)


def _answer_like_http2(listener: socket.socket) -> None:
    connection, _ = listener.accept()
    with connection:
        connection.recv(1024)
        connection.sendall(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")  # an HTTP/2 SETTINGS frame
