"""A custom metric file outside the suite's folder is not run without an explicit opt-in
(issue 16, item 12): a metric file is Python that `evaluate` imports, and a suite handed over
(or generated) that names `/anywhere/else.py` or `../../x.py` would run it.

The metric file below leaves a mark when it is imported: refused means never imported.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest

from spanscore.evaluation import SuiteError, load_suite
from spanscore.evaluation.trajectory.model import ToolCall, Trajectory, Turn
from spanscore.examples.synthetic import build_lake

from ..support.lake import query

LATER = dt.datetime.fromtimestamp(1_700_000_000, dt.UTC) + dt.timedelta(days=30)

MARKING = """
from pathlib import Path
from spanscore.evaluation import metric

Path(__file__).with_suffix(".imported").touch()


@metric
def calls_made(trajectory):
    return len(trajectory.tool_calls) > 0
"""


def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A suite folder and, next to it (outside it), a folder with the metric file."""
    suites, shared = tmp_path / "suites", tmp_path / "shared"
    suites.mkdir()
    shared.mkdir()
    (shared / "marking.py").write_text(MARKING)
    return suites, shared / "marking.py"


def suite_text(reference: str) -> str:
    return (
        "name: outside\n"
        f"custom_metrics: [{reference!r}]\n"
        "metrics:\n"
        "  - {type: metric, metric: calls_made}\n"
    )


@pytest.mark.parametrize("how", ["dot-dot", "absolute", "symlink"])
def test_a_metric_file_outside_the_suite_folder_is_a_located_suite_error(
    tmp_path: Path, how: str
) -> None:
    suites, metric_file = layout(tmp_path)
    reference = {"dot-dot": "../shared/marking.py", "absolute": str(metric_file)}.get(how)
    if reference is None:  # a link inside the folder that leads out of it
        (suites / "marking.py").symlink_to(metric_file)
        reference = "marking.py"
    path = suites / "suite.yaml"
    path.write_text(suite_text(reference))
    with pytest.raises(SuiteError) as caught:
        load_suite(path)
    # The outside file first; then, as it was not loaded, its metric is unknown.
    problem, unknown = caught.value.problems
    assert "unknown metric 'calls_made'" in unknown.message
    assert str(problem).startswith(f"{path}:2: custom_metrics[0]: ")
    assert "outside the suite's folder" in problem.message
    assert "--allow-outside-metrics" in problem.message
    assert not metric_file.with_suffix(".imported").exists()  # never imported

    suite = load_suite(path, allow_outside_metrics=True)
    conversation = Trajectory(
        conversation_id="c", turns=[Turn(index=0, steps=[ToolCall(name="get_order")])]
    )
    [row] = suite.score(conversation)
    assert row.score.passed is True
    assert metric_file.with_suffix(".imported").exists()


def test_a_metric_file_inside_the_folder_needs_no_opt_in(tmp_path: Path) -> None:
    suites, _ = layout(tmp_path)
    (suites / "metrics").mkdir()
    (suites / "metrics" / "marking.py").write_text(MARKING)
    path = suites / "suite.yaml"
    path.write_text(suite_text("metrics/marking.py"))
    assert load_suite(path).registry.get("calls_made") is not None


def evaluate(lake: Path, suite: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *(sys.executable, "-m", "spanscore.cli", "evaluate"),
            *("--lake", str(lake), "--suite", str(suite)),
            *("--since", "2023-11-01T00:00:00Z", "--until", LATER.isoformat()),
            *("--settle", "0", "--workers", "2", "--batch-size", "3"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_evaluate_runs_an_outside_metric_only_when_allowed(tmp_path: Path) -> None:
    suites, metric_file = layout(tmp_path)
    lake = tmp_path / "lake"
    build_lake(lake, 6)
    path = suites / "suite.yaml"
    path.write_text(suite_text("../shared/marking.py"))

    refused = evaluate(lake, path)
    assert refused.returncode == 2, refused.stderr
    assert f"{path}:2: custom_metrics[0]: " in refused.stderr
    assert "outside the suite's folder" in refused.stderr
    assert not metric_file.with_suffix(".imported").exists()
    assert query(lake, "SELECT count(*) FROM eval_runs")[0][0] == 0

    # Allowed: scored, in the worker processes too (each loads the suite again).
    allowed = evaluate(lake, path, "--allow-outside-metrics")
    assert allowed.returncode == 0, allowed.stderr
    rows = query(lake, "SELECT count(*), count(error) FROM scores WHERE metric = 'calls_made'")
    assert rows == [(6, 0)]
