"""Continuous evaluation (`spanscore evaluate --follow`): one run per period, each conversation
scored exactly once across a kill -9 and a restart, backfill of what was missed, and new
conversations scored as they arrive."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from spanscore.evaluation import load_suite
from spanscore.evaluation.runs.export_otlp import resolve_endpoint
from spanscore.evaluation.runs.follow import Follower, FollowSettings, period_end
from spanscore.evaluation.runs.options import RunOptions
from spanscore.examples.synthetic import build_lake

from ..support import otlp_factory as f
from ..support.collector import start_collector
from ..support.evaluation_runs import LATER, SUITE, run, write_suite
from ..support.lake import query
from ..support.polling import wait_for

UTC = dt.UTC


def _scored(lake: Path) -> int:
    return query(lake, "SELECT count(DISTINCT conversation_id) FROM scores")[0][0]


def _pinned(lake: Path) -> int:
    """The snapshot the running follower's row pins (`details.snapshot`)."""
    return query(
        lake,
        "SELECT max(json_extract(details, '$.snapshot')::BIGINT) FROM eval_runs "
        "WHERE status = 'running'",
    )[0][0]


def _twice(lake: Path) -> list[tuple[object, ...]]:
    return query(
        lake,
        "SELECT conversation_id, scenario_id, metric, count(*) FROM scores "
        "GROUP BY ALL HAVING count(*) > 1",
    )


@contextlib.contextmanager
def _follower(
    lake: Path, suite: Path, log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    args = [
        sys.executable, "-m", "spanscore.cli", "evaluate", "--lake", str(lake),
        "--suite", str(suite), "--follow", "--settle", "0s", "--poll", "0.2s",
        "--batch-size", "2", "--workers", "1", "--since", "2023-01-01",
    ]  # fmt: skip
    with log.open("ab") as out:
        proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(os.getpid()).children(recursive=True):
                if child.pid == proc.pid:
                    child.kill()


SLOW_METRIC = """
import time


def takes_its_time(trajectory):
    time.sleep(0.2)
    return True
"""


@pytest.mark.slow
def test_follower_scores_each_conversation_once_across_kill_9_and_restart(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    total = 30
    build_lake(lake, total)
    # A metric that takes its time (0.2 s a conversation, committed two at a time), so that
    # the kill lands while the backfill is scored, however fast the machine.
    (tmp_path / "slow_metric.py").write_text(SLOW_METRIC)
    slow = {"type": "metric", "metric": "slow_metric:takes_its_time"}
    suite = write_suite(tmp_path, {**SUITE, "metrics": [*SUITE["metrics"], slow]})
    env = {"PYTHONPATH": str(tmp_path)}
    log = tmp_path / "follow.log"
    with _follower(lake, suite, log, env) as first:
        wait_for(lambda: _scored(lake) > 0 or first.poll() is not None, timeout=120, interval=0.2)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    at_kill = _scored(lake)
    assert 0 < at_kill < total, log.read_text()[-2000:]
    assert query(lake, "SELECT status FROM eval_runs") == [("running",)]

    with _follower(lake, suite, log, env) as second:
        wait_for(lambda: _scored(lake) == total, timeout=240, interval=0.5)
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0, log.read_text()[-2000:]
    assert not _twice(lake)
    runs = query(
        lake,
        "SELECT status, conversation_count, window_end IS NOT NULL, "
        "json_extract(details, '$.follow.period_s')::DOUBLE FROM eval_runs ORDER BY started_at",
    )
    assert [r[0] for r in runs] == ["interrupted", "succeeded"]
    assert _scored(lake) == total
    assert runs[1][1] == total - at_kill  # the rest of the backfill
    assert runs[1][3] == 3600.0
    text = log.read_text()
    assert "one run per 1h" in text
    assert "succeeded" in text


@pytest.mark.slow
def test_follower_scores_conversations_as_they_arrive(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    total = 2
    build_lake(lake, total)
    suite = write_suite(tmp_path, SUITE)
    with _follower(lake, suite, tmp_path / "follow.log") as follower:
        wait_for(lambda: _scored(lake) == total, timeout=240, interval=0.5)
        first_pin = _pinned(lake)
        # New conversations through a collector on the same lake: scored as they settle.
        collector = start_collector(lake)
        try:
            for i in range(12):
                body = f.request(f.tool_spans(2, conversation=f"new-{i}"))
                post = urllib.request.Request(
                    f"http://127.0.0.1:{collector.http_port}/v1/traces",
                    data=body,
                    headers={"Content-Type": "application/x-protobuf"},
                )
                urllib.request.urlopen(post, timeout=30).close()
            wait_for(lambda: _scored(lake) == total + 12, timeout=120, interval=0.5)
            # Each pass pins what it reads at, not the period's first snapshot: a follower
            # would otherwise keep maintenance from thinning or expiring anything for hours.
            assert _pinned(lake) > first_pin
        finally:
            collector.stop(timeout=10)
        follower.send_signal(signal.SIGTERM)
        assert follower.wait(timeout=60) == 0
    assert not _twice(lake)


@pytest.mark.slow
def test_one_run_per_period_and_none_for_a_quiet_one(tmp_path: Path, make_collector: Any) -> None:
    lake = tmp_path / "lake"
    build_lake(lake, 6)
    sink = make_collector(lake=tmp_path / "sink")  # where the verdicts go, pass after pass
    suite = load_suite(write_suite(tmp_path, SUITE))
    start = period_end(LATER, 60)  # the start of a minute, after the synthetic conversations
    ticks = iter(start + dt.timedelta(seconds=25 * i) for i in range(100))
    closed = []
    follower = Follower(
        str(lake),
        suite,
        RunOptions(settle_s=0, workers=1),
        FollowSettings(
            period_s=60,
            poll_s=0.001,
            max_periods=3,
            export=resolve_endpoint(f"http://127.0.0.1:{sink.http_port}", {}),
        ),
        on_period=closed.append,
        clock=lambda: next(ticks),
    )
    follower.run()
    # The backfill, then two periods with nothing new: those leave no run.
    assert [(r.status, r.scored) for r in closed] == [("succeeded", 6)]
    assert follower.closed == 3
    rows = query(
        lake,
        "SELECT window_start, window_end, conversation_count, status FROM eval_runs "
        "ORDER BY started_at",
    )
    assert rows == [(None, start + dt.timedelta(seconds=50), 6, "succeeded")]
    assert not _twice(lake)
    scores = query(lake, "SELECT count(*) FROM scores")[0][0]
    assert closed[0].export["sent"] == scores
    events = "SELECT count(*) FROM logs WHERE event_name = 'gen_ai.evaluation.result'"
    assert query(tmp_path / "sink", events)[0][0] == scores


# A conversation whose spans reach the lake after a pass has looked (an SDK's batch delay, a
# gateway's retry, a slow group commit) while their end times are already behind that pass's
# window end: the next pass must still find it, however late the commit was.
LATE_COMMITS = [
    pytest.param(0.0, 1.0, id="no-settle-committed-a-second-after-its-end"),
    pytest.param(600.0, 3600.0, id="committed-an-hour-late-past-a-ten-minute-settle"),
]


@pytest.mark.parametrize(("settle_s", "late_s"), LATE_COMMITS)
def test_a_conversation_committed_after_a_pass_ending_before_its_window_end_is_scored(
    tmp_path: Path, settle_s: float, late_s: float
) -> None:
    lake = tmp_path / "lake"
    build_lake(lake, 2)
    suite = load_suite(write_suite(tmp_path, SUITE))
    start = period_end(LATER, 3600)
    ticks = iter(start + dt.timedelta(seconds=60 * i) for i in range(1, 100))
    passes: list[Any] = []
    collector = start_collector(lake)
    try:

        def on_pass(done: Any) -> None:
            passes.append(done)
            if len(passes) == 1:
                # Ended before the first pass's window end, committed only now.
                ended = done.until - dt.timedelta(seconds=late_s)
                _post_late(collector.http_port, "late", ended)
            elif len(passes) == 2:
                follower.stop()

        follower = Follower(
            str(lake),
            suite,
            RunOptions(settle_s=settle_s, workers=1),
            FollowSettings(period_s=3600, poll_s=0.001),
            on_pass=on_pass,
            clock=lambda: next(ticks),
        )
        follower.run()
    finally:
        collector.stop(timeout=10)
    assert [p.scored for p in passes] == [2, 1]
    assert query(lake, "SELECT DISTINCT conversation_id FROM scores WHERE "
                 "conversation_id = 'late'") == [("late",)]  # fmt: skip
    # One run holds both passes; nothing scored twice.
    assert query(lake, "SELECT status, conversation_count FROM eval_runs") == [("succeeded", 3)]
    assert not _twice(lake)


def _post_late(port: int, conversation: str, ended: dt.datetime) -> None:
    spans = f.tool_spans(2, conversation=conversation)
    for s in spans:
        s.start_time_unix_nano = int(ended.timestamp() * 1e9) - 1000
        s.end_time_unix_nano = int(ended.timestamp() * 1e9)
    post = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/traces",
        data=f.request(spans),
        headers={"Content-Type": "application/x-protobuf"},
    )
    urllib.request.urlopen(post, timeout=30).close()  # acknowledged: committed


def test_a_restarted_follower_finds_what_was_committed_after_the_last_one_looked(
    tmp_path: Path,
) -> None:
    lake = tmp_path / "lake"
    build_lake(lake, 2)
    suite = load_suite(write_suite(tmp_path, SUITE))
    start = period_end(LATER, 3600)
    collector = start_collector(lake)
    try:
        followers: list[Follower] = []

        def follow(at: dt.datetime) -> None:
            follower = Follower(
                str(lake),
                suite,
                RunOptions(settle_s=0, workers=1),  # no --since: where the last run ended
                FollowSettings(period_s=3600, poll_s=0.001),
                on_pass=lambda _: followers[-1].stop(),  # one pass, then its run closes
                clock=lambda: at,
            )
            followers.append(follower)
            follower.run()

        follow(start + dt.timedelta(seconds=60))
        # Ended before the first follower's window end; committed after it stopped.
        _post_late(collector.http_port, "late", start + dt.timedelta(seconds=30))
        follow(start + dt.timedelta(seconds=120))
    finally:
        collector.stop(timeout=10)
    runs = query(lake, "SELECT status, conversation_count FROM eval_runs ORDER BY started_at")
    assert runs == [("succeeded", 2), ("succeeded", 1)]
    assert query(lake, "SELECT DISTINCT conversation_id FROM scores WHERE "
                 "conversation_id = 'late'") == [("late",)]  # fmt: skip
    assert not _twice(lake)


def test_a_nightly_run_scores_what_was_committed_after_the_previous_one_looked(
    tmp_path: Path,
) -> None:
    # The same late commit, between two nightly runs: the second starts where the first
    # ended, after the late conversation's end, and still finds it.
    lake = tmp_path / "lake"
    build_lake(lake, 2)
    suite = load_suite(write_suite(tmp_path, SUITE))
    first = run(lake, suite, settle_s=600)
    assert first.scored == 2
    collector = start_collector(lake)
    try:
        _post_late(collector.http_port, "late", first.window_end - dt.timedelta(hours=1))
    finally:
        collector.stop(timeout=10)
    second = run(lake, suite, settle_s=600, now=LATER + dt.timedelta(days=1))
    assert second.window_start == first.window_end
    assert second.scored == 1
    assert query(lake, "SELECT count(*) FROM scores WHERE conversation_id = 'late'")[0][0] > 0
    third = run(lake, suite, settle_s=600, now=LATER + dt.timedelta(days=2))
    assert third.scored == 0  # found once, scored once
    assert not _twice(lake)
