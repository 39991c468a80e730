"""What a follower leaves, which runs `latest` and `previous` name, and a run right after a
shorter-settling one: a quiet period is no failed run, `previous` is a comparable run, and
"nothing new yet" is no error."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest

from spanscore import lake as lakes
from spanscore.evaluation import load_suite
from spanscore.evaluation.report.data import resolve_run as report_run
from spanscore.evaluation.runs.follow import Follower, FollowSettings, period_end
from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.runs.run_ids import resolve_run
from spanscore.examples.synthetic import build_lake

from .support.evaluation_runs import LATER, SUITE, run, write_suite
from .support.lake import query

GATED = {**SUITE, "gates": [{"min_pass_rate": 0.0}]}  # fails only when it measures nothing


@pytest.fixture(scope="module")
def followed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[object]]:
    """A synthetic lake (6 conversations) followed for three one-minute periods: the first
    scores them all, the next two find nothing new. Returns the lake, the suite, the closed
    runs."""
    tmp_path = tmp_path_factory.mktemp("followed")
    lake = tmp_path / "lake"
    build_lake(lake, 6)
    suite_path = write_suite(tmp_path, GATED)
    start = period_end(LATER, 60)
    ticks = iter(start + dt.timedelta(seconds=25 * i) for i in range(100))
    closed: list[object] = []
    Follower(
        str(lake),
        load_suite(suite_path),
        RunOptions(settle_s=0, workers=1),
        FollowSettings(period_s=60, poll_s=0.001, max_periods=3),
        on_period=closed.append,
        clock=lambda: next(ticks),
    ).run()
    return lake, suite_path, closed


def test_a_follower_records_no_run_for_a_period_with_nothing_to_score(
    followed: tuple[Path, Path, list[object]],
) -> None:
    lake, _, closed = followed
    assert [(r.status, r.scored) for r in closed] == [("succeeded", 6)]  # type: ignore[attr-defined]
    assert query(lake, "SELECT status, conversation_count FROM eval_runs") == [("succeeded", 6)]


def test_latest_and_previous_name_comparable_runs(
    followed: tuple[Path, Path, list[object]],
) -> None:
    """`previous` is the same suite's run before `latest`, and neither is a simulation's."""
    lake, suite_path, _ = followed
    [(first,)] = query(lake, "SELECT run_id FROM eval_runs")
    other = write_suite(lake.parent, {**SUITE, "name": "another"}, "another.yaml")
    since = LATER - dt.timedelta(days=60)
    run(lake, load_suite(other), since=since, now=LATER + dt.timedelta(days=1))
    later = LATER + dt.timedelta(days=2)
    second = run(lake, load_suite(suite_path), rescore=True, since=since, now=later)
    con = lakes.connect(str(lake))
    try:
        con.execute(
            "INSERT INTO eval_runs (run_id, suite_name, status, started_at, simulation_id) "
            "VALUES ('simulated-run', 'synthetic', 'succeeded', now() + INTERVAL 1 HOUR, 'sim-1')"
        )
        assert resolve_run(con, "latest") == second.run_id
        assert resolve_run(con, "previous") == first
        assert report_run(con, "latest") == second.run_id
        assert resolve_run(con, "simulated-run") == "simulated-run"  # named: found
    finally:
        con.close()
    compared = subprocess.run(
        [sys.executable, "-m", "spanscore.cli", "compare", "previous", "latest", "--lake",
         str(lake)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert "0 of 0 metrics" not in compared.stdout, compared.stdout


def test_a_run_right_after_a_shorter_settling_one_finds_nothing_new_and_exits_0(
    tmp_path: Path,
) -> None:
    lake = tmp_path / "lake"
    build_lake(lake, 2)
    suite = write_suite(tmp_path, SUITE)

    def evaluate(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "spanscore.cli", "evaluate", "--lake", str(lake), "--suite",
             str(suite), "--workers", "1", *args],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip

    first = evaluate("--settle", "0")
    assert first.returncode == 0, first.stdout + first.stderr
    plain = evaluate()
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "nothing new yet" in plain.stdout, plain.stdout
    assert query(lake, "SELECT count(*) FROM eval_runs") == [(1,)]
