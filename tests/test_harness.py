"""The test harness itself: what every test relies on about the processes it starts, and how
test modules share their helpers (through tests/support, never through each other)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from .support.collector import ServeProcess
from .support.polling import wait_for


def test_children_stop_on_sigint_whatever_started_the_run() -> None:
    """A process a test starts takes SIGINT's default, even when the run was launched with
    SIGINT ignored (`nohup`, a background job of a non-interactive shell): conftest's
    `pytest_configure` sees to it. Launched so, this fails without it."""
    shown = subprocess.run(
        [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT).__name__)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert shown.stdout.strip() == "default_int_handler"


# --- test modules share helpers through tests/support, never through each other ---------------

TESTS = Path(__file__).resolve().parent


def _is_test_module(name: str) -> bool:
    """`tests.….test_x` or `tests.….conftest`; a bare `test_x` or `conftest` too (what a
    test directory put on sys.path would let one import)."""
    parts = name.split(".")
    if parts[-1] != "conftest" and not parts[-1].startswith("test_"):
        return False
    return len(parts) == 1 or parts[0] == "tests"


def imports_of_test_modules(source: str, path: Path) -> list[str]:
    """The imports in `source` (the file at `path` under tests/) that reach a test module or
    a conftest, as "line: module"; relative imports are resolved against the file's package,
    and `from package import name` counts `package.name` too (it may be a module)."""
    package = [TESTS.name, *path.resolve().relative_to(TESTS).parent.parts]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        else:
            continue
        reached = [name for name in names if _is_test_module(name)]
        if reached:
            found.append(f"{node.lineno}: {reached[0]}")
    return found


IMPORT_CASES = {  # source, the file it is in (under tests/), what is reported
    "conftest-helper": ("from .conftest import query", "test_a.py", ["1: tests.conftest"]),
    "parent-conftest": (
        "from ..conftest import wait_for",
        "reliability/test_b.py",
        ["1: tests.conftest"],
    ),
    "sibling-test-module": (
        "from ..test_bad_input import export",
        "reliability/test_b.py",
        ["1: tests.test_bad_input"],
    ),
    "test-module-as-name": ("from . import test_lake", "test_a.py", ["1: tests.test_lake"]),
    "absolute-package-from": (
        "from tests.reliability import test_fuzz_decoders as contract",
        "reliability/fuzz_x.py",
        ["1: tests.reliability.test_fuzz_decoders"],
    ),
    "absolute-import": ("import tests.test_evaluate", "test_a.py", ["1: tests.test_evaluate"]),
    "bare-conftest": ("import conftest", "test_a.py", ["1: conftest"]),
    "inside-a-function": (
        "def f():\n    from .test_shim_openai_agents import PLAN",
        "test_a.py",
        ["2: tests.test_shim_openai_agents"],
    ),
    "support-module": ("from .support.lake import query", "test_a.py", []),
    "support-package": ("from ..support import otlp_factory as f", "reliability/test_b.py", []),
    "support-absolute": ("from tests.support.otlp_strategies import keys", "x.py", []),
    "product": ("from spanscore.evaluation import load_suite", "test_a.py", []),
    "a-function-named-test": ("from hypothesis import test_x", "test_a.py", []),
}


@pytest.mark.parametrize(
    ("source", "where", "expected"), IMPORT_CASES.values(), ids=list(IMPORT_CASES)
)
def test_imports_of_test_modules_are_found(source: str, where: str, expected: list[str]) -> None:
    assert imports_of_test_modules(source, TESTS / where) == expected


def test_no_test_module_imports_another_test_module_or_a_conftest() -> None:
    """Shared helpers live in tests/support: importing a test module runs its module-level
    code and drags its fixtures and parametrizations along, and conftest.py holds fixtures
    only, which pytest provides without imports."""
    files = sorted(TESTS.rglob("*.py"))
    assert len(files) > 50, files  # the walk found the tests
    offences = {
        str(path.relative_to(TESTS.parent)): found
        for path in files
        if (found := imports_of_test_modules(path.read_text(), path))
    }
    assert offences == {}


@pytest.mark.slow
def test_stopping_a_serve_process_leaves_none_of_its_processes(tmp_path: Path) -> None:
    """`ServeProcess.stop` is the clean-up tests and benchmarks rely on: the collector exits
    cleanly and its decode workers and resource tracker are gone when it returns."""
    server = ServeProcess(tmp_path / "lake", tmp_path / "collector.log", "--workers", "2")
    try:
        server.start(timeout=120)
        pid = server.pid
        started = wait_for(
            lambda: len(c := psutil.Process(pid).children(recursive=True)) >= 3 and c, timeout=60
        )
        assert server.stop() == 0
        assert [p.pid for p in started if p.is_running()] == []
        assert server.stop() == 0  # again: nothing to do, the same status
    finally:
        server.kill()
