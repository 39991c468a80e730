"""A run never stalls on one rule or one conversation: catastrophic regular expressions are
refused when the suite loads, every assertion has a time limit per conversation (a metric that
loops becomes an error score and the run goes on, in this process and in workers), and the
efficiency metric stays linear on a 100,000-call conversation."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from spanscore.evaluation import SuiteError, load_suite
from spanscore.evaluation.matching.patterns import check_pattern
from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.runs.run import evaluate
from spanscore.evaluation.trajectory.model import ToolCall, Trajectory, Turn
from spanscore.examples.synthetic import build_lake

from ..support.lake import query

LATER = dt.datetime.fromtimestamp(1_700_000_000, dt.UTC) + dt.timedelta(days=30)


@pytest.mark.parametrize(
    ("pattern", "refused"),
    [
        pytest.param("(a+)+$", True, id="nested-plus"),
        pytest.param(r"(\w*)*x", True, id="nested-star"),
        pytest.param(r"^(?:[a-z]+\s?)+$", True, id="nested-in-noncapturing"),
        pytest.param(r"(x|(a+)+)", True, id="nested-in-branch"),
        pytest.param(r"ORD-\d{4}", False, id="plain"),
        pytest.param(r"(ab)+c", False, id="repeated-group-without-inner-repeat"),
        pytest.param(r"(a|b)*", False, id="alternation"),
        pytest.param(r"\d+-\d+", False, id="sequence-of-repeats"),
    ],
)
def test_catastrophic_patterns_are_refused(pattern: str, refused: bool):
    if refused:
        with pytest.raises(ValueError, match="nests an unbounded repetition"):
            check_pattern(pattern)
    else:
        check_pattern(pattern)


def test_a_suite_with_a_catastrophic_rule_fails_to_load_at_its_path():
    suite = {
        "name": "s",
        "metrics": [
            {
                "type": "tool_calls",
                "expected": [{"name": "a", "rules": {"q": {"pattern": "(a+)+$"}}}],
            }
        ],
    }
    with pytest.raises(SuiteError) as caught:
        load_suite(suite)
    [problem] = caught.value.problems
    assert problem.path.startswith("metrics[0].expected[0]")
    assert "exponential time" in problem.message


LOOPING = '''
from spanscore.evaluation import metric


@metric
def stubborn(trajectory):
    """Loops forever, swallowing every Exception on the way."""
    while True:
        try:
            sum(range(1000))
        except Exception:
            pass
'''


@pytest.mark.parametrize("workers", [1, 2], ids=["in-process", "workers"])
def test_a_metric_that_never_returns_is_stopped_and_the_run_goes_on(tmp_path: Path, workers: int):
    lake = tmp_path / "lake"
    build_lake(lake, 6)
    (tmp_path / "loop.py").write_text(LOOPING)
    suite = load_suite(
        {
            "name": "loops",
            "time_limit_s": 0.5,
            "custom_metrics": ["loop.py"],
            "metrics": [{"type": "metric", "metric": "stubborn"}, {"type": "efficiency"}],
        },
        base_dir=tmp_path,
    )
    result = evaluate(lake, suite, RunOptions(settle_s=0, workers=workers, batch_size=3, now=LATER))
    assert result.scored == 6
    rows = query(lake, "SELECT metric, error FROM scores ORDER BY metric")
    stopped = [e for m, e in rows if m == "stubborn"]
    assert len(stopped) == 6
    assert all("took longer than its time limit of 0.5 s" in (e or "") for e in stopped)
    assert [e for m, e in rows if m == "efficiency"] == [None] * 6


def test_efficiency_is_linear_on_a_huge_conversation():
    # The second 50,000 calls repeat the first 50,000 (same tool, same arguments).
    calls = [
        ToolCall(name=f"t{i % 50_000 % 7}", arguments={"n": i % 50_000}) for i in range(100_000)
    ]
    huge = Trajectory(conversation_id="huge", turns=[Turn(index=0, steps=calls)])
    suite = load_suite({"name": "e", "metrics": [{"type": "efficiency", "threshold": 0.1}]})
    [row] = suite.score(huge)
    assert row.score.details is not None
    assert row.score.details["distinct"] == 50_000
    assert row.score.value == pytest.approx(0.5)


@pytest.mark.slow
def test_pairing_and_goals_stay_near_linear_on_a_huge_conversation():
    # 100,000 calls of three tools: expectations that repeat a tool without bound, a parallel
    # step, many same-tool pairs and a goal graph each used to take time quadratic (or worse)
    # in the conversation's length; within the time limit, none may hit it.
    calls = [ToolCall(name=f"t{i % 3}", arguments={"n": i % 1000}) for i in range(100_000)]
    huge = Trajectory(
        conversation_id="huge", turns=[Turn(index=0, steps=calls, final_response="done")]
    )
    unbounded = {"name": "t0", "min": 0, "max": None}
    suite = load_suite(
        {
            "name": "huge",
            "time_limit_s": 120,
            "metrics": [
                {
                    "type": "tool_calls",
                    "name": "in_order",
                    "mode": "in_order",
                    "expected": [["t0", "t1"], unbounded, {"name": "t2", "arguments": {"n": 2}}],
                },
                {
                    "type": "tool_calls",
                    "name": "unordered",
                    "mode": "unordered",
                    "expected": [unbounded, {"name": "t1", "arguments": {"n": 7}}],
                },
                {
                    "type": "goals",
                    "goals": {"a": ["b"], "b": ["c"]},
                    "goal_details": [
                        {"name": "a", "type": "tool_call", "tool_name": "t0"},
                        {"name": "b", "type": "tool_call", "tool_name": "t1"},
                        {"name": "c", "type": "tool_call", "tool_name": "t2", "args": {"n": -1}},
                        {"name": "d", "type": "text", "keywords": ["done"]},
                    ],
                },
                {
                    "type": "correctness",
                    "mode": "names_and_args",
                    "expected": [{"name": f"t{k}", "arguments": {"n": 4}} for k in range(3)],
                },
            ],
        }
    )
    rows = {r.metric: r.score for r in suite.score(huge)}
    assert {m: s.error for m, s in rows.items()} == dict.fromkeys(rows)
    in_order = rows["in_order"]
    assert in_order.value == 1.0  # every expected call, in order (not made in parallel)
    assert in_order.details is not None
    [note] = in_order.details["notes"]
    assert "aligned in the order listed" in note
    unordered = rows["unordered"]
    assert unordered.details is not None
    assert len(unordered.details["pairs"]) == 33_334 + 1  # every t0 call, and one t1
    assert "paired greedily" in unordered.details["notes"][0]
    goals = rows["goals"]
    assert goals.details is not None
    assert goals.details["failed"] == ["c"]
    correctness = rows["correctness"]
    assert correctness.details is not None
    assert len(correctness.details["matched"]) == 3
