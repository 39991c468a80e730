"""Plugins: a package a team installs adds assertion types and metrics that suites name.

The plugin distribution of docs/plugins.md ("Writing a plugin"), built from the page's code
blocks in a temporary directory, is installed (by the project's installer, uv) into a
temporary virtual environment that sees the project's own
packages. `spanscore evaluate` run from that environment scores a suite naming the plugin's
assertion type (`acme/max_calls`), its registered metric (`acme/distinct_tools`) and a plain
function (`module:function`): on the local engine with worker processes, and on a Ray cluster,
with no file path shared between them. A suite naming a plugin that is not installed, or one
that fails to load, is a located suite error.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from spanscore.evaluation import SuiteError, load_suite
from spanscore.examples.synthetic import build_lake
from spanscore.lake import connect

ROOT = Path(__file__).resolve().parents[2]
CONVERSATIONS = 30
SINCE = "2023-11-13T00:00:00Z"  # before the synthetic lake's first conversation

DOCS = ROOT / "docs" / "plugins.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
BROKEN = "raise RuntimeError('this plugin is broken on purpose')\n"


def documented_blocks() -> list[tuple[str, str]]:
    """(language, body) of each code block of docs/plugins.md, in order."""
    return FENCE.findall(DOCS.read_text(encoding="utf-8"))


def documented_files() -> dict[str, str]:
    """The plugin package the page shows, by file name (`# file: NAME` blocks)."""
    return {
        body.split("\n", 1)[0].removeprefix("# file: ").strip(): body.split("\n", 1)[1]
        for _, body in documented_blocks()
        if body.startswith("# file: ")
    }


def documented_suite() -> dict[str, Any]:
    [suite] = [yaml.safe_load(body) for language, body in documented_blocks() if language == "yaml"]
    return suite  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def plugin_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a new virtual environment holding the plugin, which also sees every
    package of the environment running the tests (spanscore, Ray, ...)."""
    root = tmp_path_factory.mktemp("plugin")
    source = root / "acme-checks"
    for name, text in documented_files().items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)
    (source / "acme_checks" / "__init__.py").write_text("")
    # One more entry point, for the test of a plugin that fails to load.
    (source / "acme_checks" / "broken.py").write_text(BROKEN)
    pyproject = source / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + 'broken = "acme_checks.broken"\n')
    venv = root / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # A .pth line that imports runs at start-up: the test environment's packages, editable
    # installs included, become visible behind the venv's own.
    ours = sysconfig.get_paths()["purelib"]
    (Path(site) / "spanscore_tests_parent.pth").write_text(
        f"import site; site.addsitedir({ours!r})\n"
    )
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    assert uv is not None, "uv (a dev dependency) installs the plugin"
    subprocess.run(
        [uv, "pip", "install", "--python", str(python), "--no-deps", str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return python


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("lake") / "lake"
    build_lake(directory, CONVERSATIONS)
    return directory


def _evaluate(python: Path, lake: Path, suite: Path, *args: str) -> dict[str, Any]:
    result = subprocess.run(
        [
            *(str(python), "-m", "spanscore.cli", "evaluate", "--lake", str(lake)),
            *("--suite", str(suite), "--since", SINCE, "--settle", "0", "--format", "json"),
            *("--rescore", *args),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=suite.parent,
    )
    assert result.returncode in (0, 1), result.stderr
    assert result.stdout.strip(), result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def _scores(lake: Path, run_id: str) -> dict[str, list[tuple[Any, ...]]]:
    con = connect(lake, read_only=True)
    try:
        rows = con.execute(
            "SELECT metric, conversation_id, value, passed, error FROM scores "
            "WHERE run_id = ? ORDER BY metric, conversation_id",
            [run_id],
        ).fetchall()
    finally:
        con.close()
    by_metric: dict[str, list[tuple[Any, ...]]] = {}
    for metric, *rest in rows:
        by_metric.setdefault(metric, []).append(tuple(rest))
    return by_metric


def _suite_file(directory: Path, suite: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "suite.json"
    path.write_text(json.dumps(suite))
    return path


def test_a_suite_uses_an_installed_plugins_type_and_metrics_on_worker_processes(
    plugin_python: Path, lake: Path, tmp_path: Path
) -> None:
    suite = _suite_file(tmp_path / "suite", documented_suite())
    run = _evaluate(plugin_python, lake, suite, "--workers", "2", "--batch-size", "10")
    assert run["counts"]["scored"] == CONVERSATIONS
    scores = _scores(lake, run["run_id"])
    assert set(scores) == {
        "acme/max_calls",
        "acme/distinct_tools",
        "acme_checks.extra:calls_any_tool",
        "tool_calls",
    }
    for metric, rows in scores.items():
        assert len(rows) == CONVERSATIONS, metric
        assert all(error is None for *_, error in rows), (metric, rows[:3])
    # The plugin's rules, checked against the lake itself.
    con = connect(lake, read_only=True)
    try:
        calls = dict(
            con.execute(
                "SELECT c.conversation_id, count(t.tool_name) FROM conversations c "
                "LEFT JOIN tool_calls t USING (conversation_id) GROUP BY ALL"
            ).fetchall()
        )
        distinct = dict(
            con.execute(
                "SELECT conversation_id, count(DISTINCT tool_name) FROM tool_calls GROUP BY ALL"
            ).fetchall()
        )
    finally:
        con.close()
    assert {c: passed for c, _, passed, _ in scores["acme/max_calls"]} == {
        c: n <= 2 for c, n in calls.items()
    }
    assert {c: value for c, value, _, _ in scores["acme/distinct_tools"]} == {
        c: float(distinct.get(c, 0)) for c in calls
    }
    assert {c: passed for c, _, passed, _ in scores["acme_checks.extra:calls_any_tool"]} == {
        c: n > 0 for c, n in calls.items()
    }


@pytest.mark.slow
def test_the_same_suite_scores_the_same_on_a_ray_cluster(
    plugin_python: Path, lake: Path, tmp_path: Path
) -> None:
    suite = _suite_file(tmp_path / "suite", documented_suite())
    local = _evaluate(plugin_python, lake, suite, "--workers", "1")
    with _every_new_process_gone():
        on_ray = _evaluate(plugin_python, lake, suite, "--engine", "ray", "--batch-size", "10")
    assert on_ray["counts"]["scored"] == CONVERSATIONS
    assert _scores(lake, on_ray["run_id"]) == _scores(lake, local["run_id"])


@pytest.mark.parametrize(
    ("entry", "where", "message"),
    [
        pytest.param(
            {"type": "nobody/check"},
            "metrics[0].type",
            "no installed package registers the plugin 'nobody'",
            id="type-of-a-plugin-not-installed",
        ),
        pytest.param(
            {"type": "metric", "metric": "nobody/score"},
            "metrics[0].metric",
            "no installed package registers the plugin 'nobody'",
            id="metric-of-a-plugin-not-installed",
        ),
        pytest.param(
            {"type": "metric", "metric": "no_such_module_anywhere:score"},
            "metrics[0]",
            "cannot import 'no_such_module_anywhere'",
            id="function-in-a-missing-module",
        ),
    ],
)
def test_a_suite_naming_an_unknown_plugin_is_a_located_error(
    tmp_path: Path, entry: dict[str, Any], where: str, message: str
) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(json.dumps({"name": "s", "metrics": [entry]}, indent=1))
    with pytest.raises(SuiteError) as caught:
        load_suite(suite)
    [problem] = caught.value.problems
    assert str(suite) in str(problem)
    assert problem.line is not None
    assert where in str(problem)
    assert message in str(problem)


def test_a_broken_or_misnamed_plugin_is_a_located_error_in_its_environment(
    plugin_python: Path, tmp_path: Path
) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: s\nmetrics:\n  - type: broken/anything\n  - type: acme/max_callz\n")
    result = subprocess.run(
        [
            str(plugin_python),
            "-c",
            f"from spanscore.evaluation import load_suite; load_suite({str(suite)!r})",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert f"{suite}:3: metrics[0].type: the plugin 'broken'" in result.stderr
    assert "RuntimeError: this plugin is broken on purpose" in result.stderr


@contextlib.contextmanager
def _every_new_process_gone() -> Iterator[None]:
    """Every Ray process the block started is gone once it ends (killed, and the test failed,
    if one is still there after a generous wait)."""
    before = {p.pid for p in psutil.process_iter()}

    def started() -> list[psutil.Process]:
        found = []
        for process in psutil.process_iter(["cmdline", "status"]):
            if process.pid in before or process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if "ray" in " ".join(process.info["cmdline"] or []).lower():
                found.append(process)
        return found

    yield
    deadline = time.monotonic() + 60
    left = started()
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = started()
    for process in left:
        process.kill()
    assert not left, f"Ray processes left behind: {[p.info['cmdline'] for p in left]}"


def test_the_pages_testing_example_runs_in_the_plugins_environment(plugin_python: Path) -> None:
    [example] = [
        body
        for language, body in documented_blocks()
        if language == "python" and not body.startswith("# file: ")
    ]
    result = subprocess.run(
        [str(plugin_python), "-c", example], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
