"""The store of `eval_runs` and `scores`: its rows declare the tables' columns (a column added to
the schema without its field fails here), and what a run writes reads back by name, on a real
lake."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest

from spanscore.evaluation import Score, load_suite
from spanscore.evaluation.runs import store
from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.runs.run import evaluate
from spanscore.evaluation.runs.store import RunRow, ScoreRecord, score_table, write_scores_once
from spanscore.examples.synthetic import build_lake
from spanscore.lake import connect, query
from spanscore.lake.schema import EVAL_RUNS, SCORES

ROOT = Path(__file__).resolve().parents[2]
LATER = dt.datetime.fromtimestamp(1_700_000_000, dt.UTC) + dt.timedelta(days=30)
SUITE = {
    "name": "store",
    "metrics": [
        {"type": "tool_calls", "mode": "contains", "expected": ["get_order"]},
        {"type": "efficiency"},
    ],
}
ADDED_BY_THE_STORE = ("run_id", "created_at")


def _names(row_type: type) -> list[str]:
    return [f.name for f in dataclasses.fields(row_type)]


# --- one field per column ----------------------------------------------------------------------


def test_the_score_record_has_one_field_per_scores_column_a_run_writes():
    columns = [c.name for c in SCORES if c.name not in ADDED_BY_THE_STORE]
    assert _names(ScoreRecord) == columns, (
        "spanscore.lake.schema.SCORES and ScoreRecord (runs/store.py) differ: give the record "
        "one field per column, in the table's order"
    )


def test_the_run_row_has_one_field_per_eval_runs_column():
    assert _names(RunRow) == [c.name for c in EVAL_RUNS], (
        "spanscore.lake.schema.EVAL_RUNS and RunRow (runs/store.py) differ"
    )


def test_a_score_is_the_record_without_the_names_the_run_gives_it():
    # conversation_id, scenario_id and metric come from the run; the rest from the metric.
    assert _names(Score) == _names(ScoreRecord)[3:]


def test_the_reports_score_doc_publishes_every_field_of_the_record():
    # A report's score sits under its conversation, so it needs no conversation_id. The
    # published schema may gain fields, never lose one.
    published = json.loads((ROOT / "docs" / "report.schema.json").read_text())
    shown = set(published["$defs"]["ScoreDoc"]["properties"])
    assert set(_names(ScoreRecord)) - {"conversation_id"} <= shown


# --- what is written reads back by name --------------------------------------------------------


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    lake = tmp_path / "lake"
    build_lake(lake, 20)
    return lake


def _evaluate(lake: Path, now: dt.datetime = LATER) -> str:
    since = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)  # the whole lake, every time
    options = RunOptions(settle_s=0, workers=1, now=now, since=since, rescore=True)
    result = evaluate(lake, load_suite(SUITE), options)
    assert result.status == "succeeded"
    return result.run_id


def test_records_written_read_back_field_for_field(lake: Path):
    ids = [r["conversation_id"] for r in query(connect(lake), "SELECT * FROM conversations")]
    records = [
        ScoreRecord(ids[0], None, "m", value=0.5, passed=False, threshold=0.8, explanation="e"),
        ScoreRecord(ids[1], "s", "m", label="good", details='{"why": [1, 2]}'),
        ScoreRecord(ids[2], "s", "n", error="no spans"),
    ]
    con = connect(lake)
    try:
        assert write_scores_once(con, "run-x", ids[:3], score_table(records)) is True
        assert store.scores_of_run(con, "run-x") == sorted(
            records, key=lambda r: (r.conversation_id, r.scenario_id or "", r.metric)
        )
        assert store.score_count(con, "run-x") == 3
        assert store.scores_of_run(con, "no-such-run") == []
    finally:
        con.close()


def test_a_runs_rows_read_back_as_sql_gives_them(lake: Path):
    first = _evaluate(lake)
    second = _evaluate(lake, LATER + dt.timedelta(hours=1))
    con = connect(lake)
    try:
        run = store.run_row(con, second)
        assert run is not None
        stored = next(query(con, "SELECT * FROM eval_runs WHERE run_id = ?", [second]))
        assert dataclasses.asdict(run) == stored
        assert run.status == "succeeded"
        assert run.facts["sampled"] == 20
        assert run.sample["seed"] == 0

        scores = store.scores_of_run(con, second)
        assert len(scores) == run.score_count == 40
        by_sql = query(
            con,
            "SELECT * EXCLUDE (run_id, created_at) FROM scores WHERE run_id = ? "
            "ORDER BY conversation_id, scenario_id NULLS FIRST, metric",
            [second],
        )
        assert [dataclasses.asdict(s) for s in scores] == list(by_sql)

        assert [r.run_id for r in store.runs(con, suite="store")] == [second, first]
        assert [r.run_id for r in store.runs(con, limit=1)] == [second]
        assert [r.run_id for r in store.runs(con, prefix=first[:8])] == [first]
        assert store.runs(con, suite="another") == []
        assert [r.run_id for r in store.runs(con, run_ids=[first, "x"])] == [first]
        previous = store.previous_run(con, second)
        assert previous is not None
        assert previous.run_id == first
        assert store.previous_run(con, first) is None
        assert store.run_row(con, "no-such-run") is None
        pairs = store.paired_scores(con, first, second)
        assert len(pairs) == 40
        assert all(p.value_a == p.value_b and p.passed_a == p.passed_b for p in pairs)
    finally:
        con.close()
