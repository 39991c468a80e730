"""Evaluation runs: determinism, sampling, incremental windows, settling, interrupts (SIGINT and
kill -9) with resume, suite errors, failing metrics, gates and JUnit, comparison, and a run
while the collector ingests at full rate. Lakes are real DuckLakes on disk; the many-conversation
ones come from the synthetic builder, the ingesting one from real OTLP exports."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spanscore.collector import Collector
from spanscore.evaluation import load_suite
from spanscore.evaluation.runs.compare import compare_runs
from spanscore.evaluation.runs.gates import parse_gate
from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.runs.run import evaluate
from spanscore.evaluation.runs.window import choose, sample_key
from spanscore.examples.synthetic import build_lake
from spanscore.lake import connect

from ..support import otlp_factory as otlp
from ..support.evaluation_runs import (
    LATER,
    SUITE,
    SYNTHETIC_START,
    UTC,
    run,
    score_rows,
    write_suite,
)
from ..support.lake import query
from ..support.polling import wait_for


@pytest.fixture
def synthetic_lake(tmp_path: Path) -> Path:
    lake = tmp_path / "lake"
    build_lake(lake, 300)
    return lake


# --- determinism, sampling, windows ------------------------------------------------------------


def test_rescore_alone_after_a_run_says_it_needs_since_or_last(tmp_path: Path):
    """--rescore scores the window again but keeps its start at the previous run's end, so
    alone it finds nothing: the reason says how to widen the window."""
    lake = tmp_path / "lake"
    build_lake(lake, 20)
    suite = load_suite(SUITE)
    first = run(lake, suite, since=SYNTHETIC_START - dt.timedelta(days=1))
    assert first.scored == 20
    again = run(lake, suite, rescore=True)
    assert again.scored == 0
    assert again.empty_because is not None
    assert "20 ended before the window start" in again.empty_because
    assert "add --since or --last (e.g. --last 7d)" in again.empty_because
    widened = run(lake, suite, rescore=True, since=SYNTHETIC_START - dt.timedelta(days=1))
    assert widened.scored == 20
    assert "--rescore" not in (widened.empty_because or "")


def test_two_runs_give_identical_scores(synthetic_lake: Path):
    suite = load_suite(SUITE)
    first = run(synthetic_lake, suite, batch_size=64)
    assert first.status == "succeeded"
    assert first.scored == 300
    assert first.score_count == 300 * 5
    assert first.error_count == 0
    again = run(
        synthetic_lake,
        suite,
        rescore=True,
        workers=2,
        batch_size=50,
        since=SYNTHETIC_START - dt.timedelta(days=1),
    )
    assert again.scored == 300
    assert score_rows(synthetic_lake, first.run_id) == score_rows(synthetic_lake, again.run_id)


def test_a_run_leaves_the_processs_garbage_collector_as_it_found_it(synthetic_lake: Path):
    """A run collects less often while it lasts (a third of a warm judged run went to the
    collector), but `evaluate` is a library call: the caller's settings come back, whether the
    run ends or fails."""
    import gc

    before = gc.get_threshold(), gc.get_freeze_count()
    seen: list[tuple[int, int, int]] = []

    def watch(_: Any) -> None:
        seen.append(gc.get_threshold())

    result = evaluate(
        synthetic_lake,
        load_suite(SUITE),
        RunOptions(settle_s=0, workers=1, now=LATER),
        progress=watch,
    )
    assert result.scored == 300
    assert seen
    assert all(t[0] > before[0][0] for t in seen)
    assert (gc.get_threshold(), gc.get_freeze_count()) == before
    with pytest.raises(Exception, match="since"):
        run(synthetic_lake, load_suite(SUITE), since=LATER + dt.timedelta(days=1))
    assert (gc.get_threshold(), gc.get_freeze_count()) == before
    # A process that froze its own objects (a pre-forking server does) finds them frozen still.
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        run(synthetic_lake, load_suite(SUITE), rescore=True)
        # (a frozen object freed during the run leaves the count; unfreezing would empty it)
        assert gc.get_freeze_count() > frozen * 0.9
    finally:
        gc.unfreeze()


def test_the_first_batch_is_read_by_a_query_of_its_own(
    synthetic_lake: Path, monkeypatch: pytest.MonkeyPatch
):
    # Scoring, and the judge's first questions, start after one batch's rules query, not
    # after the sort of the first `query_conversations` conversations (the judge benchmark
    # waited seconds for it); the scores are the same either way.
    from spanscore.evaluation.runs.engines import local as run_module

    asked: list[int] = []
    read = run_module.rows_of_chunks

    def counted(con: Any, chunks: Any, **kwargs: Any) -> Any:
        asked.extend(len(chunk) for chunk in chunks)
        return read(con, chunks, **kwargs)

    monkeypatch.setattr(run_module, "rows_of_chunks", counted)
    suite = load_suite(SUITE)
    small_first = run(synthetic_lake, suite, batch_size=40, query_conversations=200)
    assert asked == [40, 200, 60]
    asked.clear()
    again = {"rescore": True, "since": SYNTHETIC_START - dt.timedelta(days=1)}
    whole = run(synthetic_lake, suite, batch_size=300, query_conversations=300, **again)
    assert asked == [300]
    assert small_first.scored == whole.scored == 300
    assert score_rows(synthetic_lake, small_first.run_id) == score_rows(
        synthetic_lake, whole.run_id
    )
    # By default a query reads one batch per worker: what a run holds is set by --batch-size,
    # not by the window (a query of 20,000 conversations held ahead was 1.8 GB at 100k); and
    # at least a floor of conversations, lowered here for so small a lake.
    monkeypatch.setattr(run_module, "MIN_QUERY_CONVERSATIONS", 50)
    asked.clear()
    by_batch = run(synthetic_lake, suite, batch_size=40, workers=2, **again)
    assert asked == [40, 80, 80, 80, 20]
    assert score_rows(synthetic_lake, by_batch.run_id) == score_rows(synthetic_lake, whole.run_id)


MIXED_METRIC = """\
from spanscore.evaluation import metric

@metric(threshold=0.5)
def mixed(trajectory):
    digit = int(trajectory.conversation_id[-1], 16)
    if digit == 0:
        raise ValueError("cannot judge " + trajectory.conversation_id)
    return None if digit == 1 else digit / 15
"""


def test_the_summary_and_the_verdicts_read_the_sample_by_chunks_with_the_same_figures(
    synthetic_lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # The latest score of each conversation is picked by a window over all its scores: read by
    # chunks of the sample, so that the summary's memory is the chunk's, not the window's (it
    # took 1 GiB more than the scoring at 100,000 conversations).
    from spanscore.evaluation.runs import gates

    (tmp_path / "mixed.py").write_text(MIXED_METRIC)
    document = {
        "name": "mixed",
        "custom_metrics": ["mixed.py"],
        "metrics": [{"type": "metric", "metric": "mixed"}, *SUITE["metrics"][:2]],
    }
    suite = load_suite(write_suite(tmp_path, document))
    result = run(synthetic_lake, suite)
    con = connect(synthetic_lake)
    try:
        sample = [r[0] for r in con.execute("SELECT conversation_id FROM conversations").fetchall()]
        whole = gates.summarize(con, suite, sample)
        verdicts = gates.conversation_verdicts(con, suite, sample)
        monkeypatch.setattr(gates, "SAMPLE_CHUNK", 7)
        chunked = gates.summarize(con, suite, sample)
        assert gates.conversation_verdicts(con, suite, sample) == verdicts
    finally:
        con.close()
    mixed = next(r for r in whole if r.metric == "mixed")
    assert mixed.errors
    assert len(mixed.worst) == 3
    assert 0 < (mixed.pass_rate or 0) < 1
    # Sums of floats come in DuckDB's parallel order: equal to the last few bits only.
    for rows in (result.summary, chunked):
        assert [exact(r) for r in rows] == [exact(r) for r in whole]
        assert [(r.pass_rate, r.mean) for r in rows] == [
            (pytest.approx(r.pass_rate), pytest.approx(r.mean)) for r in whole
        ]


def exact(row: Any) -> tuple[Any, ...]:
    return (row.scenario_id, row.metric, row.conversations, row.judged, row.errors, row.worst,
            row.first_error)  # fmt: skip


@given(
    counts=st.lists(st.integers(1, 6), max_size=30),
    cuts=st.lists(st.integers(1, 200), max_size=6),
    size=st.integers(1, 7),
)
def test_rows_are_cut_into_chunks_of_whole_conversations(
    counts: list[int], cuts: list[int], size: int
):
    # The rows of a sorted query arrive in batches that may split a conversation; each chunk
    # a worker gets holds `size` whole conversations (the last fewer), in order, and reaches
    # it as the same rows.
    from spanscore.evaluation.runs.chunks import chunk_directory, chunks_of, received, shipped

    ids = [f"c{i:02d}" for i, n in enumerate(counts) for _ in range(n)]
    table = pa.table({"conversation_id": ids, "row": list(range(len(ids)))})
    bounds = sorted({0, len(ids), *(c for c in cuts if c < len(ids))})
    parts = [table.slice(a, z - a) for a, z in itertools.pairwise(bounds)]
    batches = [b for part in parts for b in part.to_batches()]
    chunks = list(chunks_of(iter(batches), size))
    assert [r for c in chunks for r in c.column("row").to_pylist()] == list(range(len(ids)))
    per_chunk = [len(set(c.column("conversation_id").to_pylist())) for c in chunks]
    assert all(n == size for n in per_chunk[:-1])
    assert all(0 < n <= size for n in per_chunk[-1:])
    with chunk_directory() as directory:
        for where in (directory, None):  # as a file, and as bytes where none can be written
            sent = [shipped(c, where) for c in chunks]
            assert all(isinstance(s, str) == (where is not None) for s in sent)
            assert [received(s).to_pylist() for s in sent] == [c.to_pylist() for c in chunks]
        assert not os.listdir(directory)  # a chunk's file is gone once received
    gone = shipped(table, os.path.join(directory, "removed"))  # no room for a file
    assert not isinstance(gone, str)
    assert received(gone).to_pylist() == table.to_pylist()


def test_chunk_directories_of_killed_runs_are_removed_by_the_next(tmp_path: Path):
    # A run killed with kill -9 cannot remove its directory of chunk files (in /dev/shm, that
    # is memory): the next run removes it once the process that made it is gone.
    from spanscore.evaluation.runs.chunks import chunk_directory

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    host = socket.gethostname()
    killed = tmp_path / f"spanscore-chunks-{ended.pid}@{host}-x1"
    killed.mkdir()
    (killed / "chunk.arrows").write_bytes(b"rows")
    older = tmp_path / f"spanscore-chunks-{ended.pid}-x3"  # named by an earlier version
    older.mkdir()
    running = tmp_path / f"spanscore-chunks-{os.getpid()}@{host}-x2"  # a run going on beside
    running.mkdir()
    # another host's (a container sharing the directory): its process ids are not ours
    elsewhere = tmp_path / f"spanscore-chunks-{ended.pid}@other-host-x4"
    elsewhere.mkdir()
    unrelated = tmp_path / "spanscore-chunks-notes"
    unrelated.mkdir()
    with chunk_directory(str(tmp_path)) as mine:
        assert Path(mine).name.startswith(f"spanscore-chunks-{os.getpid()}@{host}-")
        assert not killed.exists()
        assert not older.exists()
        assert running.exists()
        assert elsewhere.exists()
        assert unrelated.exists()
    assert not Path(mine).exists()


def test_sampling_is_deterministic_and_near_the_rate():
    ids = [(f"conv-{i}", "a" if i % 4 else "b") for i in range(20_000)]
    picked = choose(ids, rate=0.1, limit=None, seed=7)
    assert picked == choose(list(reversed(ids)), rate=0.1, limit=None, seed=7)
    assert 1_800 <= len(picked) <= 2_200
    assert picked != choose(ids, rate=0.1, limit=None, seed=8)
    assert all(sample_key(c, 7) < 0.1 for c in picked)
    limited = choose(ids, rate=None, limit=1_000, seed=7)
    assert len(limited) == 1_000
    strata = [s for c, s in ids if c in set(limited)]
    assert strata.count("b") == 250  # 1 in 4 conversations is in stratum b


def test_a_sample_picks_the_same_conversations_every_run(synthetic_lake: Path):
    suite = load_suite(SUITE)
    first = run(synthetic_lake, suite, sample=0.1, seed=3)
    second = run(
        synthetic_lake,
        suite,
        sample=0.1,
        seed=3,
        rescore=True,
        since=SYNTHETIC_START - dt.timedelta(days=1),
    )
    assert 15 <= first.sampled <= 45
    ids = {
        r[0]
        for r in query(
            synthetic_lake, "SELECT conversation_id FROM scores WHERE run_id = ?", [first.run_id]
        )
    }
    again = {
        r[0]
        for r in query(
            synthetic_lake, "SELECT conversation_id FROM scores WHERE run_id = ?", [second.run_id]
        )
    }
    assert ids == again
    assert len(ids) == first.sampled


def test_incremental_runs_pick_up_where_the_last_ended(tmp_path: Path):
    lake = tmp_path / "lake"
    build_lake(lake, 100)
    suite = load_suite(SUITE)
    first = run(lake, suite)
    assert first.window_start is None
    assert first.scored == 100
    # New traffic after the first run's window; the default window starts where it ended.
    later_ns = int((LATER + dt.timedelta(hours=1)).timestamp() * 1e9)
    build_lake(lake, 40, first=100, start_ns=later_ns)
    second = run(lake, suite, now=LATER + dt.timedelta(days=2))
    assert second.window_start == first.window_end
    assert (second.candidates, second.scored) == (40, 40)
    # Conversations already scored by this suite version are skipped, even in a wider window.
    third = run(
        lake, suite, since=SYNTHETIC_START - dt.timedelta(days=1), now=LATER + dt.timedelta(days=2)
    )
    assert (third.sampled, third.skipped, third.scored) == (140, 140, 0)
    # A changed suite is a new version: everything is scored again.
    changed = load_suite({**SUITE, "metrics": SUITE["metrics"][:2]})
    fourth = run(
        lake,
        changed,
        since=SYNTHETIC_START - dt.timedelta(days=1),
        now=LATER + dt.timedelta(days=2),
    )
    assert fourth.scored == 140


def test_settle_leaves_conversations_still_receiving_spans(tmp_path: Path):
    lake = tmp_path / "lake"
    now = dt.datetime.now(UTC)
    recent_ns = int((now - dt.timedelta(days=1, minutes=-3)).timestamp() * 1e9)
    build_lake(lake, 20, start_ns=recent_ns)  # spread over the day up to ~now
    suite = load_suite(SUITE)
    settled = run(lake, suite, now=now, settle_s=3 * 3600)
    everything = run(
        lake, suite, now=now, settle_s=0, rescore=True, since=now - dt.timedelta(days=3)
    )
    assert everything.scored == 20
    assert settled.scored < 20


# --- failures and interrupts -------------------------------------------------------------------


RAISING_METRICS = """\
from spanscore.evaluation import metric

@metric
def fussy(trajectory):
    if trajectory.conversation_id.endswith("0"):
        raise ValueError("cannot judge " + trajectory.conversation_id)
    return True
"""


def test_a_metric_that_raises_gives_an_error_score_and_the_run_goes_on(
    synthetic_lake: Path, tmp_path: Path
):
    (tmp_path / "fussy.py").write_text(RAISING_METRICS)
    suite = load_suite(
        write_suite(
            tmp_path,
            {
                "name": "fussy",
                "custom_metrics": ["fussy.py"],
                "metrics": [{"type": "metric", "metric": "fussy"}],
            },
        )
    )
    result = run(synthetic_lake, suite)
    assert result.scored == 300
    errors = query(
        synthetic_lake,
        "SELECT conversation_id, error FROM scores WHERE run_id = ? AND error IS NOT NULL",
        [result.run_id],
    )
    assert errors
    assert result.error_count == len(errors)
    assert all(c.endswith("0") and e == f"ValueError: cannot judge {c}" for c, e in errors)
    passed = query(
        synthetic_lake, "SELECT count(*) FROM scores WHERE run_id = ? AND passed", [result.run_id]
    )[0][0]
    assert passed == 300 - len(errors)


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spanscore.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("suite", "expected"),
    [
        ("name: s\nmetrics:\n  - type: tool_calls\n    mode: sometimes\n", "suite.yaml:4"),
        ("name: s\nmetrics:\n  - {type: metric, metric: nowhere}\n", "unknown metric 'nowhere'"),
        (
            "name: s\nmetrics:\n  - {type: response, pattern: '(unclosed'}\n",
            "invalid regular expression",
        ),
        ("name: s\ncustom_metrics: [missing.py]\n", "custom_metrics[0]: FileNotFoundError"),
    ],
    ids=["bad-mode", "unknown-metric", "bad-regex", "missing-file"],
)
def test_a_suite_error_fails_before_scoring_with_exit_2(
    synthetic_lake: Path, tmp_path: Path, suite: str, expected: str
):
    path = write_suite(tmp_path, suite)
    done = cli("evaluate", "--lake", str(synthetic_lake), "--suite", str(path), "--settle", "0")
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
    assert query(synthetic_lake, "SELECT count(*) FROM eval_runs")[0][0] == 0


def test_usage_errors_exit_2(synthetic_lake: Path, tmp_path: Path):
    path = write_suite(tmp_path, SUITE)
    bad_gate = cli(
        "evaluate",
        "--lake",
        str(synthetic_lake),
        "--suite",
        str(path),
        "--fail-under",
        "pass_rat=0.5",
    )
    assert bad_gate.returncode == 2
    assert "pass_rate, score_pass_rate, mean or pass^K" in bad_gate.stderr
    bad_time = cli(
        "evaluate", "--lake", str(synthetic_lake), "--suite", str(path), "--since", "yesterday"
    )
    assert bad_time.returncode == 2
    assert "ISO 8601" in bad_time.stderr


def test_gates_exit_codes_and_junit(synthetic_lake: Path, tmp_path: Path):
    # Answers name order ORD-<n>: 111 of the 300 mention ORD-1 (1, 10-19, 100-199).
    ord1 = {"type": "response", "name": "ord1", "keywords": ["ORD-1"]}
    path = write_suite(tmp_path, {**SUITE, "metrics": [*SUITE["metrics"], ord1]})
    junit = tmp_path / "report.xml"
    base = ["evaluate", "--lake", str(synthetic_lake), "--suite", str(path), "--settle", "0"]
    failing = cli(*base, "--fail-under", "ord1.pass_rate=0.5", "--junit", str(junit))
    assert failing.returncode == 1, failing.stderr
    assert "gate FAILED: ord1: conversation pass rate 0.370 (needs >= 0.5)" in failing.stdout
    assert "gate passed" not in failing.stdout
    tree = ElementTree.parse(junit).getroot()
    scored = [s for s in tree.findall("testsuite") if s.get("name") != "(run)"]
    cases = [c for s in scored for c in s.findall("testcase")]
    assert len(cases) == 300 * 6
    failures = [f for s in scored for f in s.findall(".//failure")]
    (gate,) = tree.findall("testsuite[@name='(run)']/testcase/failure")
    assert gate.get("message") == "ord1: conversation pass rate 0.370 (needs >= 0.5)"
    stored = query(synthetic_lake, "SELECT count(*) FROM scores WHERE passed = false")[0][0]
    assert len(failures) == stored > 0
    assert len(failures) == 300 - 111
    passing = cli(*base, "--rescore", "--since", "2020-01-01", "--fail-under", "ord1.mean=0.3")
    assert passing.returncode == 0, passing.stderr
    assert "gate passed: ord1: mean 0.370" in passing.stdout


def test_parse_gate():
    assert parse_gate("pass_rate=0.9").min_pass_rate == 0.9
    gate = parse_gate("refund/tool_calls.mean=0.75")
    assert (gate.scenario, gate.metric, gate.min_mean) == ("refund", "tool_calls", 0.75)
    with pytest.raises(ValueError, match="not a number"):
        parse_gate("pass_rate=high")


SLOW_METRICS = """\
import time
from spanscore.evaluation import metric

@metric
def slow(trajectory):
    time.sleep(0.004)
    return True
"""


def _scored_conversations(lake: Path) -> int:
    try:
        return query(lake, "SELECT count(DISTINCT conversation_id) FROM scores")[0][0]
    except Exception:  # the writer may hold the catalog for a moment
        return 0


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigint", "kill"])
def test_interrupted_runs_resume_and_score_each_conversation_once(tmp_path: Path, how: str):
    lake = tmp_path / "lake"
    build_lake(lake, 1500)
    (tmp_path / "slow.py").write_text(SLOW_METRICS)
    path = write_suite(
        tmp_path,
        {
            "name": "slow",
            "custom_metrics": ["slow.py"],
            "metrics": [{"type": "metric", "metric": "slow"}, *SUITE["metrics"][:2]],
        },
    )
    args = [
        sys.executable,
        "-m",
        "spanscore.cli",
        "evaluate",
        "--lake",
        str(lake),
        "--suite",
        str(path),
        "--settle",
        "0",
        "--workers",
        "1",
        "--batch-size",
        "100",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: _scored_conversations(lake) >= 300, timeout=120, interval=0.1)
    if how == "sigint":
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "run the same command again to resume" in err
        status = query(lake, "SELECT status FROM eval_runs")[0][0]
        assert status == "interrupted"
    else:
        proc.kill()
        proc.wait(30)
    partial = _scored_conversations(lake)
    assert 0 < partial < 1500
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    statuses = sorted(r[0] for r in query(lake, "SELECT status FROM eval_runs"))
    assert statuses == ["interrupted", "succeeded"]
    # Every conversation scored exactly once per metric, across both runs.
    counts = query(
        lake,
        "SELECT conversation_id, metric, count(*) FROM scores GROUP BY ALL HAVING count(*) <> 1",
    )
    assert counts == []
    assert _scored_conversations(lake) == 1500
    resumed = query(lake, "SELECT conversation_count FROM eval_runs WHERE status = 'succeeded'")
    assert resumed[0][0] == 1500 - partial


# --- comparison --------------------------------------------------------------------------------


def test_compare_lists_changed_metrics_and_conversations(tmp_path: Path):
    lake = tmp_path / "lake"
    build_lake(lake, 200)
    lenient = load_suite(
        {
            "name": "s",
            "metrics": [
                {
                    "type": "tool_calls",
                    "name": "calls",
                    "mode": "contains",
                    "expected": ["get_order"],
                }
            ],
        }
    )
    strict = load_suite(
        {
            "name": "s",
            "metrics": [
                {
                    "type": "tool_calls",
                    "name": "calls",
                    "mode": "contains",
                    "expected": ["get_order", "get_order"],
                }
            ],
        }
    )
    a = run(lake, lenient)
    b = run(lake, strict, since=SYNTHETIC_START - dt.timedelta(days=1))
    con = connect(lake)
    comparison = compare_runs(con, a.run_id, b.run_id)
    (change,) = comparison.metrics
    assert change.paired == 200
    assert change.delta is not None
    assert change.delta < 0
    assert change.significant
    regressed = [c for c in comparison.conversations if c.kind == "regressed"]
    assert regressed
    assert len(regressed) == sum(1 for c in comparison.conversations)
    with pytest.raises(ValueError, match="no evaluation run"):
        compare_runs(con, a.run_id, "nope")
    con.close()
    shown = cli("compare", "--lake", str(lake), a.run_id, b.run_id)
    assert shown.returncode == 0, shown.stderr
    assert "1 of 1 metrics changed" in shown.stdout
    assert "regressed" in shown.stdout


# --- while the collector ingests ---------------------------------------------------------------


@pytest.mark.slow
def test_a_run_while_the_collector_ingests_at_full_rate(
    make_collector: Any, lake_dir: Path, tmp_path: Path
):
    collector: Collector = make_collector(batch_delay_ms=5)
    url = f"http://127.0.0.1:{collector.http_port}/v1/traces"
    stop = threading.Event()
    sent = [0]
    failures: list[str] = []

    def blast() -> None:
        n = 0
        while not stop.is_set():
            spans = []
            for _ in range(50):
                n += 1
                conv = f"ingest-{n}"
                spans += [
                    otlp.span(
                        "chat gpt",
                        attributes={
                            "gen_ai.operation.name": "chat",
                            "gen_ai.conversation.id": conv,
                            "gen_ai.output.messages": json.dumps(
                                [
                                    {
                                        "role": "assistant",
                                        "parts": [{"type": "text", "content": "shipped"}],
                                    }
                                ]
                            ),
                        },
                    ),
                    otlp.span(
                        "execute_tool get_order",
                        attributes={
                            "gen_ai.operation.name": "execute_tool",
                            "gen_ai.tool.name": "get_order",
                            "gen_ai.conversation.id": conv,
                            "gen_ai.tool.call.arguments": "{}",
                            "gen_ai.tool.call.result": "{}",
                        },
                    ),
                ]
            request = urllib.request.Request(
                url, data=otlp.request(spans), headers={"Content-Type": "application/x-protobuf"}
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    response.read()
                sent[0] += len(spans)
            except Exception as exc:
                failures.append(repr(exc))

    threads = [threading.Thread(target=blast) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: sent[0] >= 3_000, timeout=60)
        suite = load_suite(
            {
                "name": "live",
                "metrics": [
                    {"type": "tool_calls", "mode": "contains", "expected": ["get_order"]},
                    {"type": "response", "keywords": ["shipped"]},
                ],
            }
        )
        result = evaluate(lake_dir, suite, RunOptions(settle_s=0, workers=2, batch_size=200))
        more = sent[0]
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert failures == []
    assert result.status == "succeeded"
    assert result.error_count == 0
    assert more > 3_000  # ingestion went on during the run
    # The run saw exactly the lake as of its snapshot: every conversation there, scored once.
    pinned = connect(lake_dir, snapshot=result.snapshot)
    at_snapshot = pinned.execute(
        "SELECT count(*) FROM conversations WHERE end_time < ?", [result.window_end]
    ).fetchone()
    pinned.close()
    assert at_snapshot is not None
    assert result.scored == result.candidates == at_snapshot[0]
    scored = query(
        lake_dir,
        "SELECT count(DISTINCT conversation_id), count(*) FROM scores WHERE run_id = ?",
        [result.run_id],
    )[0]
    assert scored == (result.scored, result.scored * 2)
    assert (
        query(
            lake_dir, "SELECT count(*) FROM scores WHERE run_id = ? AND NOT passed", [result.run_id]
        )[0][0]
        == 0
    )


def test_one_conversation_is_one_conversation(tmp_path: Path):
    from spanscore.evaluation.runs.result import plural

    assert (plural(1, "conversation"), plural(2, "conversation")) == (
        "1 conversation",
        "2 conversations",
    )
    lake = tmp_path / "lake"
    build_lake(lake, 1)
    path = write_suite(tmp_path, {"name": "one", "metrics": [{"type": "efficiency"}]})
    done = cli("evaluate", "--lake", str(lake), "--suite", str(path), "--settle", "0")
    assert done.returncode == 0, done.stderr
    assert "1 conversation in the window, 1 sampled" in done.stdout
