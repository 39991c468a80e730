"""`spanscore evaluate --engine ray`: on a local Ray cluster the test starts (two CPUs, its
temporary directory under the test's), the same `scores` rows, summary and run record as the
local engine, on a shared lake (PostgreSQL catalog, data on the loopback S3 server); a worker
killed with SIGKILL in the middle of its shard is retried and no conversation is scored twice.
Every Ray process is gone when a test ends."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from spanscore.evaluation import load_suite
from spanscore.evaluation.runs.engines.ray import shards_for
from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.runs.run import evaluate
from spanscore.evaluation.runs.store import ScoreRecord, score_table, write_scores_once
from spanscore.examples.synthetic import build_lake
from spanscore.lake import connect

from ..support.evaluation_runs import LATER, SUITE, SYNTHETIC_START, score_rows, write_suite
from ..support.lake import query
from ..support.polling import wait_for

TASK_TITLE = "ray::score_shard"  # what Ray names a worker process while it runs our task


def _descendants() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


@pytest.fixture
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Ray cluster of this test (head and workers are children of this process, two CPUs);
    its address. Shut down, and every process it started checked gone, at the end."""
    import ray

    before = {p.pid for p in _descendants()}
    # Short: Ray's sockets live under it, and a socket path is limited to 107 bytes.
    temp_dir = tmp_path_factory.mktemp("ray")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _temp_dir=str(temp_dir),
        logging_level=logging.WARNING,
        log_to_driver=False,
    )
    started = [p for p in _descendants() if p.pid not in before]
    try:
        yield str(ray.get_runtime_context().gcs_address)
    finally:
        ray.shutdown()
        started += [p for p in _descendants() if p.pid not in before]

        def all_gone() -> bool:
            return not [p for p in started if p.is_running() and p.status() != "zombie"]

        try:
            wait_for(all_gone, timeout=60, interval=0.2)
        finally:
            for leftover in started:  # never leave a process behind, even when failing
                if leftover.is_running():
                    leftover.kill()


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spanscore.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
@pytest.mark.postgres
def test_ray_gives_the_same_scores_summary_and_run_record_as_the_local_engine(
    shared_lake: str, tmp_path: Path, ray_cluster: str
):
    build_lake(shared_lake, 150)
    suite_path = write_suite(tmp_path, SUITE)
    local = evaluate(
        shared_lake,
        load_suite(suite_path),
        RunOptions(settle_s=0, workers=1, batch_size=64, now=LATER),
    )
    assert local.status == "succeeded"
    assert local.score_count == 150 * 5
    done = _run_cli(
        "evaluate",
        "--lake",
        shared_lake,
        "--suite",
        str(suite_path),
        "--engine",
        "ray",
        "--ray-address",
        ray_cluster,
        "--settle",
        "0",
        "--rescore",
        "--since",
        (SYNTHETIC_START - dt.timedelta(days=1)).isoformat(),
        "--batch-size",
        "40",
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    remote = json.loads(done.stdout)
    assert remote["counts"]["scored"] == 150
    assert remote["counts"]["scores"] == local.score_count
    assert remote["summary"] == local.to_dict()["summary"]
    assert remote["gates"] == local.to_dict()["gates"]
    assert score_rows(shared_lake, remote["run_id"]) == score_rows(shared_lake, local.run_id)
    recorded = query(
        shared_lake,
        "SELECT status, conversation_count, score_count, error_count FROM eval_runs "
        "WHERE run_id = ?",
        [remote["run_id"]],
    )
    assert recorded == [("succeeded", 150, 150 * 5, 0)]


# Each call appends "pid conversation" to a log, so the test sees which worker scored what.
SLOW_LOGGED_METRIC = """\
import os
import time
from spanscore.evaluation import metric

@metric
def slow_logged(trajectory):
    time.sleep(0.05)
    with open({log!r}, "a") as log:
        log.write(f"{{os.getpid()}} {{trajectory.conversation_id}}\\n")
    return True
"""


@pytest.mark.slow
def test_a_worker_killed_mid_shard_is_retried_without_double_scores(
    tmp_path: Path, ray_cluster: str
):
    lake = tmp_path / "lake"
    build_lake(lake, 200)
    calls = tmp_path / "calls.log"
    (tmp_path / "slow_logged.py").write_text(SLOW_LOGGED_METRIC.format(log=str(calls)))
    suite = load_suite(
        write_suite(
            tmp_path,
            {
                "name": "slow",
                "custom_metrics": ["slow_logged.py"],
                "metrics": [{"type": "metric", "metric": "slow_logged"}, SUITE["metrics"][0]],
            },
        )
    )
    killed: list[int] = []

    def logged() -> list[tuple[str, str]]:
        if not calls.exists():
            return []
        return [(p, c) for p, c in (line.split() for line in calls.read_text().splitlines())]

    def title(process: psutil.Process) -> str:
        try:
            return " ".join(process.cmdline())
        except psutil.Error:
            return ""

    def kill_one_worker_mid_shard() -> None:
        def scoring_worker() -> psutil.Process | None:
            for process in _descendants():
                if title(process).startswith(TASK_TITLE):
                    return process
            return None

        worker = wait_for(scoring_worker, timeout=300, interval=0.05)
        pid = str(worker.pid)
        so_far = sum(1 for p, _ in logged() if p == pid)
        # Mid-shard: it has scored a conversation since it was seen running the task.
        wait_for(lambda: sum(1 for p, _ in logged() if p == pid) > so_far, timeout=120)
        if title(worker).startswith(TASK_TITLE):
            worker.kill()
            killed.append(worker.pid)

    killer = threading.Thread(target=kill_one_worker_mid_shard, daemon=True)
    killer.start()
    result = evaluate(
        lake,
        suite,
        RunOptions(settle_s=0, engine="ray", batch_size=25, now=LATER),
    )
    killer.join(timeout=60)
    assert killed, "no worker was found scoring a shard"
    assert result.status == "succeeded"
    assert result.scored == 200
    assert result.score_count == 200 * 2
    # The shard the killed worker was scoring was scored again, in full, by another worker.
    calls_made = logged()
    last = [c for p, c in calls_made if p == str(killed[0])][-1]
    todo = sorted({c for _, c in calls_made})
    assert len(todo) == 200
    shard = next(s for s in shards_for(todo, 25, 2) if last in s)
    for conversation in shard:
        assert any(p != str(killed[0]) for p, c in calls_made if c == conversation), (
            f"{conversation} of the lost shard was not scored again"
        )
    # ... and every conversation has exactly one score per metric in the lake.
    counts = query(
        lake,
        "SELECT conversation_id, metric, count(*) FROM scores WHERE run_id = ? GROUP BY ALL",
        [result.run_id],
    )
    assert len(counts) == 200 * 2
    assert Counter(c for _, _, c in counts) == {1: 200 * 2}
    assert query(lake, "SELECT conversation_count FROM eval_runs")[0][0] == 200


def test_a_shard_committed_before_its_worker_was_lost_is_not_written_again(tmp_path: Path):
    lake = tmp_path / "lake"
    build_lake(lake, 3)
    ids = [r[0] for r in query(lake, "SELECT conversation_id FROM conversations")]
    rows = score_table([ScoreRecord(c, None, "m", value=1.0, passed=True) for c in ids])
    con = connect(lake)
    try:
        assert write_scores_once(con, "run-a", ids, rows) is True
        assert write_scores_once(con, "run-a", ids, rows) is False  # the retried attempt
        assert write_scores_once(con, "run-b", ids, rows) is True  # another run is another
    finally:
        con.close()
    assert query(lake, "SELECT run_id, count(*) FROM scores GROUP BY ALL ORDER BY 1") == [
        ("run-a", 3),
        ("run-b", 3),
    ]


def test_engine_ray_without_ray_installed_is_a_one_line_error(tmp_path: Path):
    lake = tmp_path / "lake"
    build_lake(lake, 3)
    suite_path = write_suite(tmp_path, SUITE)
    # Python treats a module set to None in sys.modules as not installed.
    program = (
        "import sys; sys.modules['ray'] = None; from spanscore.cli import main; "
        "sys.argv = ['spanscore', *sys.argv[1:]]; main()"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            program,
            "evaluate",
            "--lake",
            str(lake),
            "--suite",
            str(suite_path),
            "--engine",
            "ray",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "Error: --engine ray needs Ray: pip install 'spanscore-evaluation[ray]'"
    ]
    assert query(lake, "SELECT count(*) FROM eval_runs") == [(0,)]
