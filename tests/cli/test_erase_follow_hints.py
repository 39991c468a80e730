"""What a follower leaves, which runs `latest` and `previous` name, and a run right after a
shorter-settling one: a quiet period is no failed run, `previous` is a comparable run, and
"nothing new yet" is no error."""

from __future__ import annotations

import datetime as dt
import os
import re
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

from ..support.evaluation_runs import LATER, SUITE, run, write_suite
from ..support.lake import query

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


# --- hints run as printed, in a new shell, from any folder ---------------------------------------

ROOT = Path(__file__).resolve().parents[2]
HINTS_SUITE = """\
name: hints
scenarios:
  - {id: fine, user: {goal: g, opening: hello}}
metrics:
  - {type: response, keywords: [help]}
"""


def _shell(command: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`command` in a new bash, as a fresh login has it: .venv not activated, no PATH to it."""
    fresh = {k: v for k, v in os.environ.items() if not k.startswith(("SPANSCORE_", "VIRTUAL"))}
    fresh["PATH"] = os.pathsep.join(["/usr/local/bin", "/usr/bin", "/bin"])
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env={**fresh, **env}, capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with `.venv/` in it (this environment), as `./run` leaves a checkout, and a
    lake `lake` there holding one run; the reader types `.venv/bin/spanscore`."""
    folder = tmp_path_factory.mktemp("checkout")
    (folder / ".venv").symlink_to(Path(sys.executable).parent.parent)
    build_lake(folder / "lake", 2)
    run(folder / "lake", load_suite(write_suite(folder, SUITE)))
    return folder


def _hints(text: str) -> list[str]:
    return re.findall(r"`([^`]*spanscore[^`]* [a-z][^`]*)`", text)


def test_an_errors_hint_runs_from_another_folder(checkout: Path, tmp_path: Path) -> None:
    failed = _shell(".venv/bin/spanscore report nosuchrun --lake lake", checkout)
    assert failed.returncode == 2, failed.stderr
    [hint] = _hints(failed.stderr)
    assert f"--lake {checkout / 'lake'}" in hint, hint
    listed = _shell(hint, tmp_path)
    assert listed.returncode == 0, f"{hint}\n{listed.stdout}\n{listed.stderr}"
    assert "synthetic" in listed.stdout, listed.stdout


def test_the_simulations_score_it_hint_runs_from_another_folder(
    checkout: Path, tmp_path: Path
) -> None:
    from spanscore.examples.llm_server import ScriptedLLM
    from spanscore.examples.user_policy import ScriptedUsers

    (checkout / "hints.yaml").write_text(HINTS_SUITE)
    with ScriptedLLM(ScriptedUsers({})) as users:  # knows no goal: gives up after one turn
        simulated = _shell(
            ".venv/bin/spanscore simulate --lake lake --suite hints.yaml --agent "
            f"tests.support.simulated_agents:by_scenario --user-base-url {users.base_url}",
            checkout,
            PYTHONPATH=str(ROOT),
        )
    assert simulated.returncode == 0, simulated.stdout + simulated.stderr
    [hint] = [h for h in _hints(simulated.stdout) if " evaluate " in h]
    assert "--simulation sim-" in hint, hint
    assert "--lake " in hint, hint
    scored = _shell(hint, tmp_path)
    assert scored.returncode in (0, 1), f"{hint}\n{scored.stdout}\n{scored.stderr}"
    assert "simulation sim-" in scored.stdout, scored.stdout
