"""Trajectory assertions, table-driven: every mode against the edge cases users hit (repeated
names needing optimal pairing, extra/missing/reordered calls, empty lists, 1 vs 1.0, "1" vs 1,
nested key order, parallel vs sequential, optional calls and repetitions, regex and tolerance
arguments), plus the forbidden, order, goals and response assertions."""

from __future__ import annotations

from typing import Any

import pytest

from spanscore.evaluation.scoring.registry import EvalContext
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.suites.load import load_suite
from spanscore.evaluation.trajectory.model import ToolCall, Trajectory, Turn

Call = str | tuple[str, dict[str, Any]]


def trajectory(*steps: Call | list[Call], answer: str | None = None) -> Trajectory:
    """Calls in order; a list is a parallel block (requested by one model response)."""
    calls: list[ToolCall] = []
    for group, step in enumerate(steps, start=1):
        block = step if isinstance(step, list) else [step]
        for call in block:
            name, args = (call, {}) if isinstance(call, str) else call
            calls.append(
                ToolCall(
                    name=name,
                    arguments=args,
                    parallel_group=group if isinstance(step, list) else None,
                )
            )
    return Trajectory(
        conversation_id="c-1", turns=[Turn(index=0, steps=calls, final_response=answer)]
    )


def score(assertion: dict[str, Any], t: Trajectory) -> Score:
    suite = load_suite({"name": "t", "metrics": [assertion]})
    (row,) = suite.score(t)
    assert row.score.error is None, row.score.error
    return row.score


def calls(mode: str, expected: list[Any], **options: Any) -> dict[str, Any]:
    return {"type": "tool_calls", "mode": mode, "expected": expected, **options}


A1 = ("get_order", {"order_id": "A"})
B1 = ("get_order", {"order_id": "B"})
EA = {"name": "get_order", "arguments": {"order_id": "A"}}
EB = {"name": "get_order", "arguments": {"order_id": "B"}}

# (id, mode, expected, actual steps, passed, value)
MODES: list[tuple[str, str, list[Any], list[Any], bool, float]] = [
    # strict: same calls, same order, same count
    ("strict-same", "strict", ["a", "b", "c"], ["a", "b", "c"], True, 1.0),
    ("strict-reordered", "strict", ["a", "b"], ["b", "a"], False, 1 / 3),
    ("strict-extra", "strict", ["a", "b"], ["a", "b", "c"], False, 2 / 3),
    ("strict-missing", "strict", ["a", "b", "c"], ["a", "b"], False, 2 / 3),
    ("strict-both-empty", "strict", [], [], True, 1.0),
    ("strict-expected-empty", "strict", [], ["a"], False, 0.0),
    ("strict-actual-empty", "strict", ["a"], [], False, 0.0),
    ("strict-repeated-args-in-order", "strict", [EB, EA], [B1, A1], True, 1.0),
    ("strict-repeated-args-swapped", "strict", [EA, EB], [B1, A1], False, 1 / 3),
    (
        "strict-optional-skipped",
        "strict",
        ["a", {"name": "b", "optional": True}, "c"],
        ["a", "c"],
        True,
        1.0,
    ),
    (
        "strict-optional-made",
        "strict",
        ["a", {"name": "b", "optional": True}, "c"],
        ["a", "b", "c"],
        True,
        1.0,
    ),
    (
        "strict-repeat-within-bounds",
        "strict",
        ["a", {"name": "b", "min": 1, "max": 3}],
        ["a", "b", "b"],
        True,
        1.0,
    ),
    (
        "strict-repeat-over-max",
        "strict",
        ["a", {"name": "b", "max": 2}],
        ["a", "b", "b", "b"],
        False,
        0.75,
    ),
    ("strict-repeat-under-min", "strict", [{"name": "b", "min": 2}], ["b"], False, 0.5),
    (
        "strict-unbounded",
        "strict",
        [{"name": "poll", "max": None}, "done"],
        ["poll", "poll", "poll", "done"],
        True,
        1.0,
    ),
    # parallel steps: order inside one model response does not count
    ("strict-parallel-any-order", "strict", [["a", "b"], "c"], [["b", "a"], "c"], True, 1.0),
    ("strict-parallel-made-sequentially", "strict", [["a", "b"], "c"], ["a", "b", "c"], False, 1.0),
    ("unordered-parallel-made-sequentially", "unordered", [["a", "b"]], ["b", "a"], False, 1.0),
    ("in-order-parallel", "in_order", ["x", ["a", "b"]], ["x", "z", ["b", "a"]], True, 1.0),
    # unordered: the same multiset
    ("unordered-same", "unordered", ["a", "b", "a"], ["a", "a", "b"], True, 1.0),
    ("unordered-count-differs", "unordered", ["a", "b"], ["a", "a", "b"], False, 2 / 3),
    ("unordered-repeated-optimal", "unordered", [EA, EB], [B1, A1], True, 1.0),
    ("unordered-both-empty", "unordered", [], [], True, 1.0),
    ("unordered-missing", "unordered", ["a", "b"], ["a"], False, 0.5),
    # contains: every expected call, extras allowed
    ("contains-extras", "contains", ["a", "b"], ["x", "b", "a", "y"], True, 1.0),
    ("contains-missing", "contains", ["a", "b"], ["a", "x"], False, 0.5),
    ("contains-repeat-needs-two", "contains", ["a", "a"], ["a", "x"], False, 0.5),
    ("contains-expected-empty", "contains", [], ["a"], True, 1.0),
    ("contains-actual-empty", "contains", ["a"], [], False, 0.0),
    (
        "contains-optional-absent",
        "contains",
        ["a", {"name": "b", "optional": True}],
        ["a"],
        True,
        1.0,
    ),
    # the first-fit trap: a generic expectation must not take the only call the specific
    # expectation can use
    (
        "contains-optimal-not-first-fit",
        "contains",
        ["get_order", EA],
        [A1, ("get_order", {"order_id": "Z"})],
        True,
        1.0,
    ),
    # subset: every actual call is a distinct expected one, omissions allowed
    ("subset-omission", "subset", ["a", "b", "c"], ["a", "c"], True, 1.0),
    ("subset-extra", "subset", ["a", "b"], ["a", "x"], False, 0.5),
    ("subset-repeat-not-allowed", "subset", ["a", "b"], ["a", "a"], False, 0.5),
    ("subset-actual-empty", "subset", ["a"], [], True, 1.0),
    ("subset-expected-empty", "subset", [], ["a"], False, 0.0),
    # within: an allow-list, repeats allowed
    ("within-repeats", "within", ["search", "get"], ["search", "search", "search"], True, 1.0),
    ("within-outside", "within", ["search"], ["search", "cancel"], False, 0.5),
    ("within-actual-empty", "within", ["search"], [], True, 1.0),
    ("within-expected-empty", "within", [], ["a"], False, 0.0),
    # in_order: expected calls appear in order, gaps allowed
    ("in-order-gaps", "in_order", ["a", "c"], ["a", "b", "c", "d"], True, 1.0),
    ("in-order-wrong-order", "in_order", ["a", "c"], ["c", "a"], False, 0.5),
    ("in-order-repeated", "in_order", ["a", "b", "a"], ["a", "a", "b", "x", "a"], True, 1.0),
    ("in-order-expected-empty", "in_order", [], ["a"], True, 1.0),
    # graded modes
    ("precision-half", "precision", ["a"], ["a", "b"], False, 0.5),
    ("recall-half", "recall", ["a", "b"], ["a"], False, 0.5),
    ("f1", "f1", ["a", "b"], ["a", "c"], False, 0.5),
    ("f1-perfect", "f1", ["a", "b"], ["b", "a"], True, 1.0),
    ("precision-empty-actual", "precision", ["a"], [], True, 1.0),
    ("recall-empty-expected", "recall", [], ["a"], True, 1.0),
]


@pytest.mark.parametrize(
    ("mode", "expected", "actual", "passed", "value"),
    [case[1:] for case in MODES],
    ids=[case[0] for case in MODES],
)
def test_modes(mode: str, expected: list[Any], actual: list[Any], passed: bool, value: float):
    result = score(calls(mode, expected), trajectory(*actual))
    assert result.passed is passed, result.explanation
    assert result.value == pytest.approx(value), result.explanation
    assert 0.0 <= (result.value or 0.0) <= 1.0


# (id, expected call, actual arguments, passed)
ARGUMENTS: list[tuple[str, dict[str, Any], Any, bool]] = [
    ("int-equals-float", {"arguments": {"n": 1}}, {"n": 1.0}, True),
    ("float-equals-int", {"arguments": {"price": 100.0}}, {"price": 100}, True),
    ("string-is-not-number", {"arguments": {"n": 1}}, {"n": "1"}, False),
    ("number-is-not-string", {"arguments": {"n": "1"}}, {"n": 1}, False),
    (
        "cast-reads-expected-type",
        {"arguments": {"n": 1}, "rules": {"n": {"cast": True}}},
        {"n": "1"},
        True,
    ),
    ("bool-is-not-int", {"arguments": {"flag": True}}, {"flag": 1}, False),
    (
        "nested-key-order",
        {"arguments": {"a": {"x": 1, "y": [1, 2]}}},
        {"a": {"y": [1.0, 2], "x": 1}},
        True,
    ),
    ("list-order-matters", {"arguments": {"ids": [1, 2]}}, {"ids": [2, 1]}, False),
    ("exact-rejects-extra", {"arguments": {"a": 1}}, {"a": 1, "b": 2}, False),
    ("exact-rejects-missing", {"arguments": {"a": 1, "b": 2}}, {"a": 1}, False),
    ("partial-allows-extra", {"arguments": {"a": 1}, "match": "partial"}, {"a": 1, "b": 2}, True),
    (
        "partial-nested",
        {"arguments": {"a": {"x": 1}}, "match": "partial"},
        {"a": {"x": 1, "y": 2}},
        True,
    ),
    ("partial-still-needs-expected", {"arguments": {"a": 1}, "match": "partial"}, {"b": 2}, False),
    (
        "superset-allows-omission",
        {"arguments": {"a": 1, "b": 2}, "match": "superset"},
        {"a": 1},
        True,
    ),
    (
        "superset-rejects-extra",
        {"arguments": {"a": 1}, "match": "superset"},
        {"a": 1, "c": 3},
        False,
    ),
    ("ignore", {"arguments": {"a": 1}, "match": "ignore"}, {"z": 9}, True),
    ("no-arguments-names-only", {}, {"anything": 1}, True),
    ("empty-arguments-exact", {"arguments": {}}, {"a": 1}, False),
    (
        "rule-ignore",
        {"arguments": {"a": 1, "ts": "x"}, "rules": {"ts": "ignore"}},
        {"a": 1, "ts": "2026-01-01"},
        True,
    ),
    (
        "rule-ignore-absent",
        {"arguments": {"a": 1, "ts": "x"}, "rules": {"ts": "ignore"}},
        {"a": 1},
        True,
    ),
    (
        "optional-absent",
        {"arguments": {"a": 1, "b": 2}, "rules": {"b": "optional"}},
        {"a": 1},
        True,
    ),
    (
        "optional-present-wrong",
        {"arguments": {"a": 1, "b": 2}, "rules": {"b": "optional"}},
        {"a": 1, "b": 3},
        False,
    ),
    (
        "regex",
        {"arguments": {"id": "?"}, "rules": {"id": {"pattern": r"ORD-\d{4}"}}},
        {"id": "ORD-1001"},
        True,
    ),
    (
        "regex-whole-value",
        {"arguments": {"id": "?"}, "rules": {"id": {"pattern": r"ORD-\d"}}},
        {"id": "ORD-1001"},
        False,
    ),
    ("regex-without-expected-value", {"rules": {"id": {"regex": "ORD-.*"}}}, {"id": "ORD-7"}, True),
    ("regex-rule-needs-argument", {"rules": {"id": {"regex": "ORD-.*"}}}, {}, False),
    (
        "tolerance-in",
        {"arguments": {"t": 20.0}, "rules": {"t": {"tolerance": 2}}},
        {"t": 21.5},
        True,
    ),
    (
        "tolerance-out",
        {"arguments": {"t": 20.0}, "rules": {"t": {"tolerance": 2}}},
        {"t": 22.5},
        False,
    ),
    (
        "relative-tolerance",
        {"arguments": {"p": 100}, "rules": {"p": {"relative_tolerance": 0.1}}},
        {"p": 109},
        True,
    ),
    (
        "tolerance-not-a-number",
        {"arguments": {"t": 20}, "rules": {"t": {"tolerance": 2}}},
        {"t": "warm"},
        False,
    ),
    (
        "datetime-window",
        {"arguments": {"due": "2026-01-01T10:00:00Z"}, "rules": {"due": {"window_seconds": 3600}}},
        {"due": "2026-01-01T10:30:00+00:00"},
        True,
    ),
    (
        "datetime-outside",
        {"arguments": {"due": "2026-01-01T10:00:00Z"}, "rules": {"due": {"window_seconds": 3600}}},
        {"due": "2026-01-01T12:00:00Z"},
        False,
    ),
    (
        "trim-and-case-opt-in",
        {"arguments": {"e": "A@B.COM"}, "rules": {"e": {"trim": True, "case_insensitive": True}}},
        {"e": " a@b.com "},
        True,
    ),
    ("case-by-default", {"arguments": {"e": "A@B.COM"}}, {"e": "a@b.com"}, False),
    (
        "similarity",
        {
            "arguments": {"q": "time off schedule"},
            "rules": {"q": {"strategy": "similarity", "threshold": 0.8}},
        },
        {"q": "time off schedule information"},
        True,
    ),
    (
        "similarity-low",
        {
            "arguments": {"q": "time off schedule"},
            "rules": {"q": {"strategy": "similarity", "threshold": 0.8}},
        },
        {"q": "cancel my order"},
        False,
    ),
    (
        "dot-path-rule",
        {"arguments": {"addr": {"city": "Paris", "zip": "75001"}}, "rules": {"addr.zip": "ignore"}},
        {"addr": {"city": "Paris", "zip": "75002"}},
        True,
    ),
    ("arguments-not-an-object", {"arguments": {"a": 1}}, "a=1", False),
]


@pytest.mark.parametrize(
    ("expected", "actual", "passed"),
    [case[1:] for case in ARGUMENTS],
    ids=[case[0] for case in ARGUMENTS],
)
def test_arguments(expected: dict[str, Any], actual: Any, passed: bool):
    assertion = calls("strict", [{"name": "tool", **expected}])
    result = score(assertion, trajectory(("tool", actual)))
    assert result.passed is passed, result.explanation


def test_argument_mode_default_and_per_tool_override():
    t = trajectory(("get_order", {"order_id": "A", "verbose": True}), ("search", {"q": "x"}))
    expected = [EA, {"name": "search", "arguments": {"q": "x"}}]
    assert not score(calls("strict", expected), t).passed
    assert score(calls("strict", expected, arguments="partial"), t).passed
    per_tool = calls("strict", expected, tools={"get_order": {"match": "partial"}})
    assert score(per_tool, t).passed
    own = [{**EA, "match": "exact"}, expected[1]]  # the call's own mode beats the override
    assert not score(calls("strict", own, tools={"get_order": {"match": "partial"}}), t).passed


def test_name_normalisation_is_opt_in():
    t = trajectory("Get-Order", "search.products")
    expected = ["get_order", "SearchProducts"]
    assert not score(calls("strict", expected), t).passed
    assert score(calls("strict", expected, normalize_names=True), t).passed


def test_wrong_arguments_are_explained():
    result = score(calls("strict", [EA]), trajectory(("get_order", {"order_id": "Z"})))
    assert not result.passed
    assert "order_id: expected 'A', got 'Z'" in (result.explanation or "")
    assert result.details is not None
    assert result.details["missing"][0]["argument_problems"] == ["order_id: expected 'A', got 'Z'"]


def test_threshold_overrides_the_mode_rule():
    t = trajectory("a", "b", "x")
    assert not score(calls("subset", ["a", "b"]), t).passed
    lenient = score(calls("subset", ["a", "b"], threshold=0.6), t)
    assert lenient.passed
    assert lenient.threshold == 0.6


def test_pairing_details_name_the_pairs():
    result = score(calls("unordered", [EA, EB]), trajectory(B1, A1))
    assert result.details is not None
    pairs = {(p["expected"], p["actual"]) for p in result.details["pairs"]}
    assert pairs == {(0, 1), (1, 0)}


# --- forbidden, order, goals, response ---------------------------------------------------------


def test_forbidden_calls():
    rule = {
        "type": "forbidden",
        "calls": ["delete_account", {"name": "cancel_order", "arguments": {"order_id": "ORD-1"}}],
    }
    assert score(rule, trajectory("get_order", ("cancel_order", {"order_id": "ORD-2"}))).passed
    bad = score(rule, trajectory(("cancel_order", {"order_id": "ORD-1", "reason": "x"})))
    assert not bad.passed
    assert bad.value == 0.0
    assert "cancel_order" in (bad.explanation or "")


def test_order_constraint():
    rule = {"type": "order", "before": "verify_customer", "after": "cancel_order"}
    assert score(rule, trajectory("verify_customer", "get_order", "cancel_order")).passed
    assert score(rule, trajectory("get_order")).passed  # nothing to constrain
    broken = score(rule, trajectory("cancel_order", "verify_customer", "cancel_order"))
    assert not broken.passed
    assert broken.value == 0.5


def test_order_constraint_requiring_success():
    failed_verify = Trajectory(
        conversation_id="c",
        turns=[
            Turn(
                index=0,
                steps=[
                    ToolCall(name="verify_customer", error="invalid code"),
                    ToolCall(name="cancel_order"),
                ],
            )
        ],
    )
    rule = {"type": "order", "before": "verify_customer", "after": "cancel_order"}
    assert score(rule, failed_verify).passed
    assert not score({**rule, "require_success": True}, failed_verify).passed


HR_GOALS = {
    "type": "goals",
    "goals": {
        "get_assignment_id_hr_agent-1": ["get_timeoff_schedule_hr_agent-1"],
        "get_timeoff_schedule_hr_agent-1": ["summarize"],
    },
    "goal_details": [
        {
            "type": "tool_call",
            "name": "get_assignment_id_hr_agent-1",
            "tool_name": "get_assignment_id_hr_agent",
            "args": {"username": "nwaters"},
        },
        {
            "type": "tool_call",
            "name": "get_timeoff_schedule_hr_agent-1",
            "tool_name": "get_timeoff_schedule_hr_agent",
            "args": {
                "assignment_id": "15778303",
                "end_date": "2025-01-30",
                "start_date": "2025-01-01",
            },
        },
        {
            "name": "summarize",
            "type": "text",
            "response": "Your time off schedule is on January 5, 2025.",
            "keywords": ["January 5, 2025"],
        },
    ],
}
ASSIGNMENT = ("get_assignment_id_hr_agent", {"username": "nwaters"})
SCHEDULE = (
    "get_timeoff_schedule_hr_agent",
    {"assignment_id": "15778303", "start_date": "2025-01-01", "end_date": "2025-01-30"},
)
ANSWER = "You have time off on January 5, 2025."


def test_goals_journey_success():
    result = score(HR_GOALS, trajectory(ASSIGNMENT, SCHEDULE, answer=ANSWER))
    assert result.passed
    assert result.value == 1.0
    assert result.details is not None
    assert result.details["tool_call_recall"] == 1.0


@pytest.mark.parametrize(
    ("steps", "answer", "failed_goal", "reason"),
    [
        ([SCHEDULE, ASSIGNMENT], ANSWER, "get_timeoff_schedule_hr_agent-1", "before"),
        ([ASSIGNMENT], ANSWER, "get_timeoff_schedule_hr_agent-1", "not called"),
        (
            [
                ASSIGNMENT,
                ("get_timeoff_schedule_hr_agent", {**SCHEDULE[1], "end_date": "2025-02-28"}),
            ],
            ANSWER,
            "get_timeoff_schedule_hr_agent-1",
            "end_date",
        ),
        ([ASSIGNMENT, SCHEDULE], "You have no time off.", "summarize", "January 5, 2025"),
    ],
    ids=["wrong-order", "missing-step", "wrong-arguments", "missing-keyword"],
)
def test_goals_failures_name_the_goal(steps: list[Any], answer: str, failed_goal: str, reason: str):
    result = score(HR_GOALS, trajectory(*steps, answer=answer))
    assert not result.passed
    assert result.details is not None
    assert failed_goal in result.details["failed"]
    assert reason in result.details["goals"][failed_goal]["reason"]


def test_goals_fuzzy_and_optional_arguments():
    goals = {
        "type": "goals",
        "goal_details": [
            {
                "type": "tool_call",
                "name": "q",
                "tool_name": "search",
                "args": {"username": "nwaters", "query": "time off schedule", "page": 1},
                "arg_matching": {"query": "fuzzy", "page": "optional"},
            }
        ],
    }
    ok = trajectory(("search", {"username": "nwaters", "query": "time off schedule information"}))
    assert score(goals, ok).passed
    wrong_page = trajectory(
        ("search", {"username": "nwaters", "query": "time off schedule", "page": 2})
    )
    assert not score(goals, wrong_page).passed


def test_goal_graph_errors_are_suite_errors():
    from spanscore.evaluation.suites.load import SuiteError

    cyclic = {
        **HR_GOALS,
        "goals": {"summarize": ["get_assignment_id_hr_agent-1"], **HR_GOALS["goals"]},
    }
    with pytest.raises(SuiteError, match="cycle"):
        load_suite({"name": "t", "metrics": [cyclic]})
    unknown = {**HR_GOALS, "goals": {"nope": ["summarize"]}}
    with pytest.raises(SuiteError, match="'nope' is not in goal_details"):
        load_suite({"name": "t", "metrics": [unknown]})


def test_response_checks():
    rule = {
        "type": "response",
        "keywords": ["ORD-1001", "shipped"],
        "forbidden_keywords": ["card"],
        "pattern": r"ORD-\d{4}",
    }
    assert score(rule, trajectory(answer="Order ORD-1001 has SHIPPED.")).passed
    partial = score(rule, trajectory(answer="Order ORD-1001 is on its way; card ending 4242."))
    assert not partial.passed
    assert partial.value == pytest.approx(2 / 4)
    similar = {
        "type": "response",
        "expected": "Your order has shipped",
        "similarity_threshold": 0.7,
    }
    assert score(similar, trajectory(answer="your order has shipped today")).passed
    assert not score(similar, trajectory(answer=None)).passed


def test_context_is_not_needed_for_calls():
    # the assertion works on any trajectory, with an empty context too
    from spanscore.evaluation.assertions.tool_calls import ToolCallsAssertion

    assertion = ToolCallsAssertion.model_validate(calls("contains", ["a"]))
    assert assertion.evaluate(trajectory("a"), EvalContext()).passed


def test_a_call_made_out_of_order_is_reported_out_of_order_with_its_position():
    from spanscore.evaluation.report.marks import score_marks

    t = trajectory("cancel_order", "get_order", "verify_customer")
    s = score(calls("strict", ["get_order", "verify_customer", "cancel_order"]), t)
    assert not s.passed
    assert s.explanation == (
        "2 of 3 expected calls made, 2 of 3 calls matched; "
        "cancel_order out of order: made as call 1 of 3, expected as #3"
    )
    marks, missing = score_marks(t.turns[0].steps, 0, s.details)
    assert missing == []  # made, so not under "expected calls not made"
    assert [(m["call"], m["kind"], m["note"]) for m in marks if m["kind"] == "extra"] == [
        (0, "extra", "out of order: made as call 1, expected as #3 (cancel_order)")
    ]
    # A call that was not made at all is still missing.
    s = score(calls("in_order", ["get_order", "refund"]), trajectory("get_order"))
    assert s.explanation.endswith("; missing refund")
