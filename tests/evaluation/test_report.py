"""The report's content, read from a real evaluated lake and checked against independent SQL:
which run, the summary, tool figures, the baseline, verdicts placed on the right tool calls,
escaping of every lake string, the published JSON Schema, and the commands that write it.
The page itself, in a browser, is tested in test_report_browser.py."""

from __future__ import annotations

import dataclasses
import datetime as dt
import html
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from spanscore.cli import main
from spanscore.evaluation import ToolCall, load_suite
from spanscore.evaluation.report import (
    ReportError,
    ReportOptions,
    build_report,
    render,
    resolve_run,
    validate_report,
)
from spanscore.evaluation.report.html import script_json
from spanscore.evaluation.report.marks import positions, score_marks
from spanscore.evaluation.report.schema import schema_text
from spanscore.evaluation.report.trends import run_labels
from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.runs.run import evaluate
from spanscore.examples.synthetic import build_lake
from spanscore.lake import connect

from ..support.lake import query
from ..support.report_lake import PLANTED, PLANTED_MESSAGE, EvaluatedLake

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # the evaluated lake takes about 10 s to build, once


SMALL_SUITE = {
    "name": "small",
    "metrics": [
        {"type": "tool_calls", "mode": "contains", "expected": ["get_order"]},
        {"type": "tool_errors"},
    ],
}


@pytest.fixture
def small_lake(tmp_path: Path) -> tuple[Path, str]:
    """A synthetic lake (no collector: SQL inserts), evaluated once."""
    lake = tmp_path / "small"
    build_lake(lake, 20)
    result = evaluate(
        lake,
        load_suite(SMALL_SUITE),
        RunOptions(settle_s=0, workers=1, since=dt.datetime(2000, 1, 1, tzinfo=dt.UTC)),
    )
    return lake, result.run_id


def _doc(lake: EvaluatedLake, run: str | None = None, **options: Any) -> dict[str, Any]:
    con = connect(lake.lake, read_only=True)
    try:
        return dict(build_report(con, run or lake.run, ReportOptions(**options)))
    finally:
        con.close()


def _conversation(doc: dict[str, Any], conversation_id: str) -> dict[str, Any]:
    i = doc["conversations"]["id"].index(conversation_id)
    detail = doc["details"][i]
    assert detail is not None
    return dict(detail)


# --- which run, which baseline -----------------------------------------------------------------


def test_runs_are_found_by_id_prefix_or_latest(evaluated_lake: EvaluatedLake):
    con = connect(evaluated_lake.lake, read_only=True)
    try:
        assert resolve_run(con, "latest") == evaluated_lake.run
        assert resolve_run(con, evaluated_lake.baseline_run) == evaluated_lake.baseline_run
        assert resolve_run(con, evaluated_lake.baseline_run[:6]) == evaluated_lake.baseline_run
        with pytest.raises(ReportError, match="no evaluation run 'nope'"):
            resolve_run(con, "nope")
        with pytest.raises(ReportError, match="start of 2 run ids"):
            resolve_run(con, "")  # every id starts with the empty prefix
    finally:
        con.close()


def test_the_default_baseline_is_the_suites_previous_run(evaluated_lake: EvaluatedLake):
    doc = _doc(evaluated_lake)
    assert doc["baseline"]["run_id"] == evaluated_lake.baseline_run
    # The first run has nothing before it: no baseline, and a note that says so.
    first = _doc(evaluated_lake, evaluated_lake.baseline_run)
    assert first["baseline"] is None
    assert any("no earlier finished run" in n for n in first["notes"])
    assert _doc(evaluated_lake, compare=False)["baseline"] is None
    with pytest.raises(ReportError, match="baseline is the run itself"):
        _doc(evaluated_lake, baseline=evaluated_lake.run)


def test_regressions_come_first_then_fixes_as_compare_computes_them(
    evaluated_lake: EvaluatedLake,
):
    base = _doc(evaluated_lake)["baseline"]
    # The earlier suite version let cs-budget-search-2 look the customer up, and wanted
    # "delivered" from cs-order-status-1, which says "shipped".
    assert [(c["kind"], c["conversation_id"]) for c in base["conversations"]] == [
        ("regressed", "cs-budget-search-2"),
        ("fixed", "cs-order-status-1"),
    ]
    moved = [(m["direction"], m["scenario_id"], m["metric"]) for m in base["metrics"]][:2]
    assert moved == [
        ("regressed", "product_search_with_budget", "tool_calls"),
        ("improved", "order_status_check", "response"),
    ]
    assert all(m["direction"] == "unchanged" for m in base["metrics"][2:])
    regressed = base["metrics"][0]
    assert (regressed["pass_rate_a"], regressed["pass_rate_b"]) == (1.0, 0.5)
    assert regressed["delta"] == pytest.approx(-0.25)  # 1 -> 0.5 on one of two conversations
    doc = _doc(evaluated_lake)
    changes = dict(zip(doc["conversations"]["id"], doc["conversations"]["change"], strict=True))
    assert changes["cs-budget-search-2"] == "regressed"
    assert changes["cs-order-status-1"] == "fixed"
    assert changes["cs-cancel-1"] is None


# --- the numbers, against SQL ------------------------------------------------------------------


def test_the_summary_and_the_conversations_match_the_scores_table(evaluated_lake: EvaluatedLake):
    doc = _doc(evaluated_lake)
    expected = {
        (r[0], r[1]): (r[2], r[3], r[4])
        for r in query(
            evaluated_lake.lake,
            "SELECT scenario_id, metric, count(DISTINCT conversation_id), "
            "round(avg(passed::INT), 4), count(error) FROM scores WHERE run_id = ? GROUP BY ALL",
            [evaluated_lake.run],
        )
    }
    got = {
        (s["scenario_id"], s["metric"]): (s["conversations"], s["pass_rate"], s["errors"])
        for s in doc["summary"]
    }
    assert got == expected
    failing = {
        r[0]
        for r in query(
            evaluated_lake.lake,
            "SELECT DISTINCT conversation_id FROM scores WHERE run_id = ? AND NOT passed",
            [evaluated_lake.run],
        )
    }
    columns = doc["conversations"]
    assert {c for c, r in zip(columns["id"], columns["result"], strict=True) if r == "failed"} == (
        failing
    )
    assert failing == {"cs-budget-search-2", "cs-cancel-2"}
    i = columns["id"].index("cs-cancel-2")
    assert {columns["keys"][k] for k in columns["failing"][i]} >= {
        "auth_cancel_order/tool_calls",
        "verify_before_cancel/order",
    }
    assert columns["scenario"][i] == "auth_cancel_order"
    assert columns["service"][i] == "customer-service"
    assert columns["first_message"][columns["id"].index("cs-planted-1")] == PLANTED_MESSAGE
    run = doc["run"]
    assert (run["conversations"], run["status"]) == (10, "gate_failed")
    assert [g["passed"] for g in run["gates"]] == [True, False]
    assert run["gates"][1]["scope"] == "verify_before_cancel"
    assert run["judge"] is not None  # the suite's rubrics are judged (see the judge test)


def test_tool_figures_match_the_tool_calls_view(evaluated_lake: EvaluatedLake):
    doc = _doc(evaluated_lake)
    expected = {
        r[0]: (r[1], r[2])
        for r in query(
            evaluated_lake.lake,
            "SELECT tool_name, count(*), count(error) FROM tool_calls GROUP BY ALL",
        )
    }
    assert {t["name"]: (t["calls"], t["errors"]) for t in doc["tools"]} == expected
    get_order = next(t for t in doc["tools"] if t["name"] == "get_order")
    assert get_order["errors"] == 1  # ORD-9999 does not exist
    assert get_order["p50_ms"] is not None
    assert get_order["p50_ms"] <= get_order["p95_ms"]


def test_the_trend_marks_this_run_among_the_suites_runs(evaluated_lake: EvaluatedLake):
    trend = _doc(evaluated_lake)["trend"]
    assert [(t["run_id"], t["current"]) for t in trend] == [
        (evaluated_lake.baseline_run, False),
        (evaluated_lake.run, True),
    ]
    rate = query(
        evaluated_lake.lake,
        "SELECT avg(passed::INT) FROM scores WHERE run_id = ?",
        [evaluated_lake.run],
    )[0][0]
    assert trend[1]["pass_rate"] == pytest.approx(rate, abs=1e-4)


def test_each_scenario_and_metric_has_its_trend_on_its_own_scale(evaluated_lake: EvaluatedLake):
    doc = _doc(evaluated_lake)
    runs = [t["run_id"] for t in doc["trend"]]
    assert "mean" not in doc["trend"][0]  # no mean over metrics of different scales
    rows = query(
        evaluated_lake.lake,
        "SELECT run_id, scenario_id, metric, conversation_id, passed, value FROM scores "
        "WHERE list_contains(?, run_id)",
        [runs],
    )

    def average(values: list[Any]) -> float | None:
        known = [float(v) for v in values if v is not None]
        return round(sum(known) / len(known), 4) if known else None

    series = {(s["scenario_id"], s["metric"]): s for s in doc["trend_series"]}
    keys = {(s["scenario_id"], s["metric"]) for s in doc["summary"]}
    assert set(series) == keys | {(scenario, None) for scenario, _ in keys}
    for (scenario, metric), item in series.items():
        assert len(item["pass_rate"]) == len(item["mean"]) == len(runs)
        for i, run in enumerate(runs):
            mine = [r for r in rows if r[0] == run and r[1] == scenario]
            if metric is not None:
                mine = [r for r in mine if r[2] == metric]
                assert item["pass_rate"][i] == average([r[4] for r in mine]), (metric, run)
                assert item["mean"][i] == average([r[5] for r in mine]), (metric, run)
                continue
            # A scenario: the share of its conversations whose judged scores all passed.
            verdicts: dict[str, list[bool]] = {}
            for r in mine:
                if r[4] is not None:
                    verdicts.setdefault(r[3], []).append(r[4])
            assert item["pass_rate"][i] == average([all(v) for v in verdicts.values()])
    # The cs-budget-search-2 regression is on its scenario's trend and on its metric's.
    assert series["product_search_with_budget", None]["pass_rate"] == [1.0, 0.5]
    assert series["product_search_with_budget", "tool_calls"]["pass_rate"] == [1.0, 0.5]
    # The judged rubrics are drawn on the scale they declare, 0-5, even where every value is
    # 5; the other metrics on 0-1.
    efficiency = series[None, "tool_usage_efficiency"]
    assert efficiency["mean"] == [5.0, 5.0]
    assert efficiency["scale"] == {"low": 0.0, "high": 5.0}
    assert series[None, "verification_compliance"]["scale"] == {"low": 0.0, "high": 5.0}
    assert series["order_status_check", "response"]["scale"] == {"low": 0.0, "high": 1.0}
    summary = {(s["scenario_id"], s["metric"]): s["scale"] for s in doc["summary"]}
    assert summary[None, "tool_usage_efficiency"] == {"low": 0.0, "high": 5.0}
    assert summary[None, "data_privacy"] is None  # labels only, no value
    histogram = next(d for d in doc["distributions"] if d["metric"] == "tool_usage_efficiency")
    assert (histogram["histogram"]["low"], histogram["histogram"]["high"]) == (0.0, 5.0)
    assert histogram["histogram"]["counts"][-1] == histogram["values"] == 10


def test_runs_started_close_together_get_distinct_labels():
    def at(*parts: int) -> dt.datetime:
        return dt.datetime(*parts, tzinfo=dt.UTC)

    ids = ["aaaa1111", "bbbb2222", "cccc3333"]
    assert run_labels([at(2026, 1, 1), at(2026, 1, 2), at(2026, 1, 3)], ids) == [
        "01-01",
        "01-02",
        "01-03",
    ]
    same_day = [at(2026, 1, 2, 1, 0), at(2026, 1, 2, 3, 30), at(2026, 1, 3, 3, 30)]
    assert run_labels(same_day, ids) == ["01-02 01:00", "01-02 03:30", "01-03 03:30"]
    same_minute = [at(2026, 1, 2, 3, 30, 5), at(2026, 1, 2, 3, 30, 9), at(2026, 1, 2, 4)]
    assert run_labels(same_minute, ids) == [
        "01-02 03:30:05",
        "01-02 03:30:09",
        "01-02 04:00:00",
    ]
    same_second = [at(2026, 1, 2, 3, 30, 5), at(2026, 1, 2, 3, 30, 5), at(2026, 1, 3)]
    assert run_labels(same_second, ids) == [
        "01-02 03:30:05 aaaa11",
        "01-02 03:30:05 bbbb22",
        "01-03 00:00:00 cccc33",
    ]
    assert run_labels([at(2025, 12, 31), at(2026, 1, 1), None], ids) == [
        "2025-12-31",
        "2026-01-01",
        "cccc3333",
    ]


def test_runs_of_one_day_are_told_apart_on_the_trend(small_lake: tuple[Path, str]):
    lake, first = small_lake
    since = RunOptions(settle_s=0, workers=1, since=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    second = evaluate(lake, load_suite(SMALL_SUITE), dataclasses.replace(since, rescore=True))
    con = connect(lake)
    try:  # the two runs started on the same day, in the same minute
        con.execute(
            "UPDATE eval_runs SET started_at = TIMESTAMPTZ '2026-03-04 05:06:07+00' "
            "+ to_seconds(CASE WHEN run_id = ? THEN 0 ELSE 30 END)",
            [first],
        )
    finally:
        con.close()
    doc = build_report_doc(EvaluatedLake(lake, first, second.run_id), second.run_id)
    labels = [t["label"] for t in doc["trend"]]
    assert labels == ["03-04 05:06:07", "03-04 05:06:37"]
    page = render(doc)
    trend = page.split('class="plot trend"')[1].split("</svg>")[0]
    assert re.findall(r'class="xlabel"[^>]*>([^<]*)<', trend) == labels


def test_tools_are_broken_down_by_the_assertions_that_failed_on_them(
    evaluated_lake: EvaluatedLake,
):
    found = _doc(evaluated_lake)["tool_failures"]
    failed = query(
        evaluated_lake.lake,
        "SELECT scenario_id, metric, conversation_id FROM scores WHERE run_id = ? AND NOT passed",
        [evaluated_lake.run],
    )
    assert found["failed_scores"] == len(failed)
    # verification_compliance (a judged rubric) fails cs-cancel-2 without marking a call.
    assert found["unmarked"] == 1
    cells = {(c["tool"], c["scenario_id"], c["metric"]): c for c in found["cells"]}
    by_key = {(r[0], r[1]): set() for r in failed}
    for scenario, metric, conversation in failed:
        by_key[scenario, metric].add(conversation)
    for (tool, scenario, metric), cell in cells.items():
        assert set(cell["conversation_ids"]) <= by_key[scenario, metric], (tool, metric)
        assert cell["conversations"] == len(cell["conversation_ids"])
    assert cells["lookup_customer", "product_search_with_budget", "tool_calls"]["marks"] == {
        "extra": 1
    }
    assert cells["cancel_order", "verify_before_cancel", "order"]["marks"] == {"violation": 1}
    assert cells["get_order", "auth_cancel_order", "tool_calls"]["marks"] == {"missing": 1}
    assert cells["cancel_order", "verify_before_cancel", "order"]["conversation_ids"] == [
        "cs-cancel-2"
    ]
    # Read from the embedded conversations' marks, or placed afresh: the same.
    assert _doc(evaluated_lake, max_trajectories=0)["tool_failures"] == found


def test_label_metrics_are_listed_with_their_labels(evaluated_lake: EvaluatedLake):
    columns = _doc(evaluated_lake)["conversations"]
    expected = dict(
        query(
            evaluated_lake.lake,
            "SELECT conversation_id, label FROM scores "
            "WHERE run_id = ? AND metric = 'data_privacy'",
            [evaluated_lake.run],
        )
    )
    assert set(columns["labels"]) == {"data_privacy", "unauthorized_action"}  # no value, labels
    assert dict(zip(columns["id"], columns["labels"]["data_privacy"], strict=True)) == expected
    assert set(expected.values()) == {"compliant"}


def test_the_judges_calls_tokens_and_cost_are_shown(evaluated_lake: EvaluatedLake):
    # The example suite's rubrics are judged: the first run asked the (local scripted) judge,
    # the second found every answer in the lake's judge cache.
    for run_id in (evaluated_lake.baseline_run, evaluated_lake.run):
        calls, hits, cost, prompt = query(
            evaluated_lake.lake,
            "SELECT judge_calls, judge_cache_hits, judge_cost_usd, judge_prompt_tokens "
            "FROM eval_runs WHERE run_id = ?",
            [run_id],
        )[0]
        doc = build_report_doc(evaluated_lake, run_id)
        judge = doc["run"]["judge"]
        assert judge is not None
        assert (judge["calls"], judge["cost_usd"]) == (calls, pytest.approx(cost))
        assert judge["figures"]["judge.cache_hits"] == hits
        title = re.search(r'<dt>judge</dt><dd title="([^"]*)"', render(doc))
        assert title is not None
        assert f"judge.cache_hits {hits}; " in title.group(1)
        assert f"{calls:,} calls" in render(doc)
        assert f"{prompt:,} prompt tokens" in render(doc)
    first = build_report_doc(evaluated_lake, evaluated_lake.baseline_run)["run"]["judge"]
    assert first is not None
    assert (first["calls"] or 0) > 0
    second = build_report_doc(evaluated_lake, evaluated_lake.run)["run"]["judge"]
    assert second is not None
    assert second["figures"]["judge.cache_hits"] > 0
    # A judged score's explanation is the judge's, next to its verdict.
    explanation = query(
        evaluated_lake.lake,
        "SELECT explanation FROM scores WHERE run_id = ? AND conversation_id = 'cs-cancel-2' "
        "AND metric = 'verification_compliance'",
        [evaluated_lake.run],
    )[0][0]
    detail = _conversation(
        dict(build_report_doc(evaluated_lake, evaluated_lake.run)), "cs-cancel-2"
    )
    judged = next(x for x in detail["scores"] if x["metric"] == "verification_compliance")
    assert judged["explanation"] == explanation
    assert judged["passed"] is False


def test_a_run_without_a_judge_shows_none(small_lake: tuple[Path, str]):
    lake, run_id = small_lake
    con = connect(lake, read_only=True)
    try:
        doc = build_report(con, run_id)
    finally:
        con.close()
    assert doc["run"]["judge"] is None
    assert "<dt>judge</dt>" not in render(doc)


def build_report_doc(lake: EvaluatedLake, run: str) -> Any:
    con = connect(lake.lake, read_only=True)
    try:
        return build_report(con, run)
    finally:
        con.close()


# --- verdicts on the calls they were about ------------------------------------------------------


def test_each_verdict_lands_on_its_tool_call(evaluated_lake: EvaluatedLake):
    detail = _conversation(_doc(evaluated_lake), "cs-cancel-2")
    calls = [s for t in detail["turns"] for s in t["steps"] if s["kind"] == "tool_call"]
    assert [c["name"] for c in calls] == [
        "cancel_order",
        "send_verification_code",
        "verify_customer",
    ]
    scores = detail["scores"]

    def marks_of(index: int) -> set[tuple[str, str]]:
        return {
            (
                f"{scores[m['score']]['scenario_id'] or ''}/{scores[m['score']]['metric']}",
                m["kind"],
            )
            for m in detail["marks"]
            if m["call"] == index
        }

    # cancel_order came first: the order policy was broken there, and the strict trajectory
    # found it out of order (it was expected last, after get_order, which never came).
    assert marks_of(0) >= {
        ("verify_before_cancel/order", "violation"),
        ("auth_cancel_order/tool_calls", "extra"),
    }
    (out_of_order,) = [
        m["note"]
        for m in detail["marks"]
        if m["call"] == 0 and scores[m["score"]]["metric"] == "tool_calls"
    ]
    assert out_of_order == "out of order: made as call 1, expected as #4 (cancel_order)"
    assert ("auth_cancel_order/tool_calls", "matched") in marks_of(1)
    # Only what was not made is missing (cancel_order was made, out of order).
    assert {(scores[m["score"]]["metric"], m["name"]) for m in detail["missing"]} == {
        ("tool_calls", "get_order"),
    }


TWO = [
    ToolCall(name="search", arguments={"q": "b"}, parallel_group=0),
    ToolCall(name="lookup", arguments={"id": 1}, parallel_group=0),
    ToolCall(name="search", arguments={"q": "a"}, parallel_group=0),
    ToolCall(name="cancel", arguments={}, parallel_group=None),
]


@pytest.mark.parametrize(
    ("recorded", "mode", "expected"),
    [
        # unordered modes record the calls as made
        (["search", "lookup", "search", "cancel"], "unordered", [0, 1, 2, 3]),
        # ordered modes sort each parallel block by name, then arguments: search "a" (index 2)
        # comes before search "b" (index 0)
        (["lookup", "search", "search", "cancel"], "strict", [1, 2, 0, 3]),
        # names that do not fit the trajectory (it changed after scoring): no positions
        (["lookup", "search", "cancel", "search"], "strict", None),
        (["search", "lookup", "search"], "unordered", None),
    ],
    ids=["as-made", "parallel-block-sorted", "changed-trajectory", "length-differs"],
)
def test_positions_undo_the_ordered_modes_block_sorting(recorded, mode, expected):
    assert positions(TWO, recorded, mode) == expected


def test_marks_of_each_kind_of_details():
    calls = TWO
    pairing = {
        "mode": "strict",
        "expected": ["lookup", "search"],
        "actual": ["lookup", "search", "search", "cancel"],
        "pairs": [
            {"expected": 0, "actual": 0, "score": 1.0},
            {"expected": 1, "actual": 1, "score": 0.5},
        ],
        "missing": [{"name": "refund", "expected": 1, "made": 0}],
        "extra": [{"index": 2, "name": "search"}, {"index": 3, "name": "cancel"}],
    }
    marks, missing = score_marks(calls, 4, pairing)
    assert [(m["call"], m["kind"]) for m in marks] == [
        (1, "matched"),
        (2, "matched"),
        (0, "extra"),
        (3, "extra"),
    ]
    assert "arguments match 0.50" in marks[1]["note"]
    assert all(m["score"] == 4 for m in marks)
    assert [(m["name"], m["note"]) for m in missing] == [("refund", "expected 1, made 0")]
    violations, _ = score_marks(calls, 0, {"violations": [{"index": 3, "name": "cancel"}, 1]})
    assert [(m["call"], m["kind"]) for m in violations] == [(3, "violation"), (1, "violation")]
    within, _ = score_marks(calls, 0, {"mode": "within", "calls": 4, "not_allowed": ["search"]})
    assert [m["call"] for m in within] == [0, 2]
    assert score_marks(calls, 0, "a judge's raw verdict") == ([], [])
    assert score_marks(calls, 0, {"violations": [99, "x"]}) == ([], [])


def _scored_details(assertion: dict[str, Any], calls: list[ToolCall]) -> dict[str, Any]:
    from spanscore.evaluation.trajectory.model import Trajectory, Turn

    suite = load_suite({"name": "s", "metrics": [assertion]})
    (row,) = suite.score(Trajectory(conversation_id="c", turns=[Turn(index=0, steps=calls)]))
    assert isinstance(row.score.details, dict)
    return row.score.details


def test_marks_land_where_the_scorer_recorded_each_call():
    # strict sorts the parallel block: the expected search for "a" pairs with index 2, and
    # the scorer records that; the report does not redo the sorting
    details = _scored_details(
        {
            "type": "tool_calls",
            "mode": "strict",
            "expected": [
                [
                    "lookup",
                    {"name": "search", "arguments": {"q": "a"}},
                    {"name": "search", "arguments": {"q": "b"}},
                ],
                "cancel",
            ],
        },
        TWO,
    )
    assert details["actual_index"] == [1, 2, 0, 3]
    marks, _ = score_marks(TWO, 0, details)
    notes = {m["call"]: m["note"] for m in marks}
    assert notes[2] == "matches expected #2 (search)"
    assert notes[0] == "matches expected #3 (search)"
    # recorded positions are followed as recorded, whatever the names alone would suggest
    swapped = {**details, "actual_index": [1, 0, 2, 3]}
    assert {m["call"]: m["note"] for m in score_marks(TWO, 0, swapped)[0]}[0] == notes[2]
    # positions that no longer fit the trajectory: no marks
    for stale in ([1, 2, 3, 0], [1, 1, 0, 3], [1, 2, 0], [1, 2, 0, 9], [1, 2, 0, True]):
        assert score_marks(TWO, 0, {**details, "actual_index": stale})[0] == [], stale


def test_within_marks_only_the_calls_it_did_not_allow():
    # the two searches share a name; only the one whose arguments break the rule is marked
    details = _scored_details(
        {
            "type": "tool_calls",
            "mode": "within",
            "expected": [
                {"name": "search", "arguments": {"q": "b"}},
                "lookup",
                "cancel",
            ],
        },
        TWO,
    )
    assert details["not_allowed"] == ["search"]
    marks, _ = score_marks(TWO, 0, details)
    assert [(m["call"], m["kind"]) for m in marks] == [(2, "extra")]
    assert score_marks(TWO[:3], 0, details)[0] == []  # the trajectory changed after scoring


# --- escaping --------------------------------------------------------------------------------


def test_lake_strings_cannot_become_markup_in_the_page(evaluated_lake: EvaluatedLake):
    doc = build_report_doc(evaluated_lake, evaluated_lake.run)
    detail = _conversation(dict(doc), "cs-planted-1")
    results = [
        s["result"]
        for t in detail["turns"]
        for s in t["steps"]
        if s["kind"] == "tool_call" and s["name"] == "search_products"
    ]
    handoff = detail["turns"][-1]["steps"][-1]
    assert (handoff["kind"], handoff["from_agent"], handoff["to_agent"]) == (
        "handoff",
        "customer-service",
        "billing",
    )
    names = [product["name"] for result in results for product in result]
    assert PLANTED + " laptop stand" in names  # the markup is in the lake's data
    page = render(doc)
    # ... and nowhere in the page as markup: only the page's own two script kinds, one data
    # block, no event handler attributes, no closing tag from the data.
    assert "<script>window.__pwned" not in page
    assert "\\u003cscript\\u003ewindow.__pwned = 3" in page  # the message, escaped in the data
    assert "<b>laptop" not in page
    assert page.count("<script>") == 1
    assert len(re.findall(r"<script[ >]", page)) == 2 + page.count(
        'type="application/octet-stream"'
    )
    assert "onerror" not in page
    text = script_json({"x": "</script><!-- & \u2028"})
    for raw in ("<", ">", "&", "\u2028"):
        assert raw not in text
    assert json.loads(text) == {"x": "</script><!-- & \u2028"}


# --- the JSON format ---------------------------------------------------------------------------


def test_the_json_report_follows_the_published_schema(evaluated_lake: EvaluatedLake):
    published = (ROOT / "docs" / "report.schema.json").read_text()
    assert published == schema_text(), (
        "docs/report.schema.json is stale: run .venv/bin/python -c 'from "
        'spanscore.evaluation.report.schema import schema_text; print(schema_text(), end="")\' '
        "> docs/report.schema.json"
    )
    document = json.loads(render(build_report_doc(evaluated_lake, evaluated_lake.run), "json"))
    jsonschema.validate(document, json.loads(published))
    validate_report(document)
    broken = {**document, "conversations": {**document["conversations"], "id": "not a list"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, json.loads(published))


# --- the commands ------------------------------------------------------------------------------


def test_the_report_command_writes_html_and_json(evaluated_lake: EvaluatedLake, tmp_path: Path):
    runner = CliRunner()
    out = tmp_path / "r.html"
    result = runner.invoke(main, ["report", "--lake", str(evaluated_lake.lake), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert f"report of run {evaluated_lake.run} written to {out} (10 conversations" in result.output
    assert out.read_text().startswith("<!DOCTYPE html>")
    as_json = tmp_path / "r.json"
    result = runner.invoke(
        main,
        [
            "report",
            evaluated_lake.baseline_run[:8],
            "--lake",
            str(evaluated_lake.lake),
            "--format",
            "json",
            "-o",
            str(as_json),
            "--trace-url",
            "https://tracing.example/trace/{trace_id}",
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(as_json.read_text())
    assert document["run"]["run_id"] == evaluated_lake.baseline_run
    assert document["baseline"] is None  # nothing before the first run
    assert document["trace_url"] == "https://tracing.example/trace/{trace_id}"
    for args, expected in [
        ([], evaluated_lake.baseline_run),  # the previous run by default
        (["--baseline", evaluated_lake.run[:7]], evaluated_lake.run),
        (["--baseline", "none"], None),
    ]:
        result = runner.invoke(
            main,
            [
                "report",
                evaluated_lake.run
                if expected != evaluated_lake.run
                else evaluated_lake.baseline_run,
                "--lake",
                str(evaluated_lake.lake),
                "--format",
                "json",
                "-o",
                str(as_json),
                "--max-trajectories",
                "1",
                *args,
            ],
        )
        assert result.exit_code == 0, result.output
        document = json.loads(as_json.read_text())
        assert (document["baseline"] or {}).get("run_id") == expected
        assert sum(d is not None for d in document["details"]) == 1
    for args, message in [
        (["nope"], "no evaluation run 'nope'"),
        (["--trace-url", "javascript:alert(1)"], "must start with http:// or https://"),
    ]:
        result = runner.invoke(
            main, ["report", "--lake", str(evaluated_lake.lake), "-o", str(out), *args]
        )
        assert result.exit_code == 2  # an input error, by the exit-code contract
        assert message in result.output


def test_evaluate_writes_the_report_of_its_run(tmp_path: Path):
    lake = tmp_path / "lake"
    build_lake(lake, 20)
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SMALL_SUITE))
    out = tmp_path / "nightly" / "report.html"
    result = CliRunner().invoke(
        main,
        [
            "evaluate",
            "--lake",
            str(lake),
            "--suite",
            str(suite),
            "--since",
            "2000-01-01",
            "--settle",
            "0",
            "--workers",
            "1",
            "--report",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    run_id = re.search(r"^run (\w+):", result.output, re.M).group(1)  # type: ignore[union-attr]
    assert f"report of run {run_id} written to {out} (20 conversations" in result.output
    assert f"run {run_id}" in out.read_text()


def test_the_demo_writes_the_report_and_prints_its_path(tmp_path: Path):
    from spanscore.examples.demo import run_demo

    lines: list[str] = []
    lake = tmp_path / "demo"
    run_demo(lake, echo=lines.append)
    said = [line for line in lines if "report" in line and str(lake / "report.html") in line]
    assert said, lines[-5:]
    run_id = query(lake, "SELECT run_id FROM eval_runs")[0][0]
    page = (lake / "report.html").read_text()
    assert f"run {run_id}" in page
    assert "verify_before_cancel" in page  # its failed gate, in the header


def test_a_strict_run_that_failed_on_warnings_says_why_in_json_and_header(tmp_path: Path):
    """Every gate passed, yet the run failed: its warnings fail a strict run. The summary,
    the evaluate JSON, and later the report of that run (read back from the lake) all say
    so, each warning with its reason."""
    lake = tmp_path / "lake"
    build_lake(lake, 20)
    suite = tmp_path / "suite.json"
    nobody = [{"id": f"nobody-{n}", "assertions": [{"type": "tool_errors"}]} for n in (1, 2)]
    suite.write_text(
        json.dumps({**SMALL_SUITE, "scenarios": nobody, "gates": [{"min_pass_rate": 0}]})
    )
    runner = CliRunner()
    common = ["--lake", str(lake), "--suite", str(suite), "--since", "2000-01-01"]
    ran = runner.invoke(main, ["evaluate", *common, "--settle", "0", "--workers", "1", "--strict"])
    assert ran.exit_code == 1, ran.output
    warnings = [f"scenario 'nobody-{n}' selected none of the 20 conversations" for n in (1, 2)]
    for warning in warnings:
        assert f"warning (strict: fails the run): {warning}" in ran.output
    assert "run FAILED: strict mode: 2 warnings fail the run" in ran.output
    run_id = re.search(r"^run (\w+):", ran.output, re.M).group(1)  # type: ignore[union-attr]

    as_json = tmp_path / "r.json"
    made = runner.invoke(
        main, ["report", run_id, "--lake", str(lake), "--format", "json", "-o", str(as_json)]
    )
    assert made.exit_code == 0, made.output
    run = json.loads(as_json.read_text())["run"]
    jsonschema.validate(
        json.loads(as_json.read_text()),
        json.loads((ROOT / "docs" / "report.schema.json").read_text()),
    )
    assert run["status"] == "gate_failed"
    assert [g["passed"] for g in run["gates"]] == [True]
    assert (run["strict"], run["warnings"]) == (True, warnings)
    assert run["failures"] == ["strict mode: 2 warnings fail the run"]
    assert run["status_reasons"] == ["strict mode: 2 warnings fail the run"]

    page = tmp_path / "r.html"
    made = runner.invoke(main, ["report", run_id, "--lake", str(lake), "-o", str(page)])
    assert made.exit_code == 0, made.output
    header = page.read_text().split("</header>")[0]
    why = header.split('<div class="why">')[1].split("</div>")[0]
    assert "gate_failed because:" in why
    assert "strict mode: 2 warnings fail the run" in why
    listed = re.findall(r'<ul class="warnings">(.*?)</ul>', header)[0]
    for warning in warnings:
        assert f"fails the run (strict)</span> {html.escape(warning)}</li>" in listed
