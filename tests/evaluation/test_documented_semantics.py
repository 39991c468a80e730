"""Scores that match their documentation (issue 11, items 9-13): watsonx's argument key
matching, parallel steps compared in any order, optimal pairing in `goals`, tool schemas per
conversation, and the published suite schema. Edge cases are table rows with a comment each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spanscore.evaluation.suites.importers import import_file
from spanscore.evaluation.suites.load import load_suite
from spanscore.evaluation.trajectory.model import ToolCall, Trajectory, Turn


def trajectory(
    *calls: tuple[str, dict[str, Any]], answer: str = "done", scenario: str = "dataset"
) -> Trajectory:
    steps = [ToolCall(name=name, arguments=args) for name, args in calls]
    return Trajectory(
        conversation_id="c-1",
        attributes={"scenario.id": scenario},
        turns=[Turn(index=0, steps=steps, final_response=answer)],
    )


# --- 9. watsonx: the expected arguments must match; extra actual ones are accepted ---------------

EXPECTED_ARGS = {"username": "nwaters", "filters": {"start": "2025-01-01", "end": "2025-01-31"}}

WATSONX_KEYS = [
    # (id, actual arguments, journey success)
    ("same", EXPECTED_ARGS, True),
    # an extra top-level argument: watsonx checks only the expected ones
    ("extra-top-level", {**EXPECTED_ARGS, "page": 2}, True),
    # an extra key inside a nested object: accepted at every nesting level
    (
        "extra-nested",
        {**EXPECTED_ARGS, "filters": {**EXPECTED_ARGS["filters"], "tz": "UTC"}},
        True,
    ),
    # a missing expected argument fails
    ("missing-top-level", {"filters": EXPECTED_ARGS["filters"]}, False),
    # a missing nested key fails
    ("missing-nested", {**EXPECTED_ARGS, "filters": {"start": "2025-01-01"}}, False),
    # a different value fails (strict is an exact match)
    ("different-value", {**EXPECTED_ARGS, "username": "someone"}, False),
]


@pytest.mark.parametrize(
    ("actual", "passed"), [r[1:] for r in WATSONX_KEYS], ids=[r[0] for r in WATSONX_KEYS]
)
def test_watsonx_goals_accept_extra_actual_arguments_at_every_level(
    tmp_path: Path, actual: dict[str, Any], passed: bool
):
    dataset = {
        "agent": "hr_agent",
        "goals": {"schedule-1": []},
        "goal_details": [{"type": "tool_call", "name": "schedule-1",
                          "tool_name": "get_schedule", "args": EXPECTED_ARGS}],
        "story": "s",
        "starting_sentence": "s",
    }  # fmt: skip
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps(dataset))
    goal = import_file("watsonx", path).suite["scenarios"][0]["assertions"][0]["goal_details"][0]
    assert goal["match"] == "partial"
    suite = load_suite(path)  # the native file as a suite, as `evaluate --suite` reads it
    (row,) = [r for r in suite.score(trajectory(("get_schedule", actual)))
              if r.metric == "journey_success"]  # fmt: skip
    assert row.score.passed is passed, row.score.explanation


def test_the_docs_table_says_what_watsonx_does_with_extra_arguments():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "assertions.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| watsonx | extra actual"))
    assert "`match: partial`" in row
    assert "fail (`match: exact`" not in row


# --- 10. a parallel step matches its calls in any order among themselves ------------------------


def sequential(*names: str) -> Trajectory:
    return trajectory(*[(n, {}) for n in names])


PARALLEL = [
    # (id, mode, expected, calls made one after the other, check_parallel, passed, value)
    # the alphabetical order of the names no longer decides: both orders pass
    ("strict-ab", "strict", [["search", "get"], "buy"], ["get", "search", "buy"], False, True, 1.0),
    ("strict-ba", "strict", [["search", "get"], "buy"], ["search", "get", "buy"], False, True, 1.0),
    ("in_order-ab", "in_order", [["zeta", "alpha"]], ["alpha", "x", "zeta"], False, True, 1.0),
    ("in_order-ba", "in_order", [["zeta", "alpha"]], ["zeta", "x", "alpha"], False, True, 1.0),
    # the steps keep their order: the later step made first fails strict
    ("strict-steps-reordered", "strict", [["a", "b"], "c"], ["c", "a", "b"], False, False,
     2 / 4),
    # check_parallel still requires one model response, with the same value either way
    ("checked-ab", "strict", [["search", "get"]], ["get", "search"], True, False, 1.0),
    ("checked-ba", "strict", [["search", "get"]], ["search", "get"], True, False, 1.0),
    # a step around a repeated call: the best window is found, not the first
    ("strict-window", "strict", ["get", ["get", "put"]], ["get", "put", "get"], False, True,
     1.0),
]  # fmt: skip


@pytest.mark.parametrize(
    ("mode", "expected", "made", "check", "passed", "value"),
    [r[1:] for r in PARALLEL],
    ids=[r[0] for r in PARALLEL],
)
def test_a_parallel_step_matches_in_any_order(
    mode: str, expected: list[Any], made: list[str], check: bool, passed: bool, value: float
):
    assertion = {"type": "tool_calls", "mode": mode, "expected": expected,
                 "check_parallel": check}  # fmt: skip
    (row,) = load_suite({"name": "p", "metrics": [assertion]}).score(sequential(*made))
    assert (row.score.passed, row.score.value) == (passed, pytest.approx(value)), (
        row.score.explanation
    )


# --- 11. goals pair calls optimally, whatever order the goals are listed in ---------------------

BROAD = {"type": "tool_call", "name": "broad", "tool_name": "search", "args": {"q": "shoes"},
         "match": "partial"}  # fmt: skip
NARROW = {"type": "tool_call", "name": "narrow", "tool_name": "search",
          "args": {"q": "shoes", "size": 42}, "match": "partial"}  # fmt: skip
# The narrow call comes first: first-fit gave it to the broad goal and left the narrow one
# with nothing.
NARROW_FIRST = (("search", {"q": "shoes", "size": 42}), ("search", {"q": "shoes", "size": 43}))

GOALS = [
    # (id, goal_details, dependency graph, calls, passed, unmet goal and its reason)
    ("broad-listed-first", [BROAD, NARROW], {}, NARROW_FIRST, True, None),
    ("narrow-listed-first", [NARROW, BROAD], {}, NARROW_FIRST, True, None),
    # with a dependency the order still holds: broad must come after narrow here
    ("after-dependency", [BROAD, NARROW], {"narrow": ["broad"]}, NARROW_FIRST, True, None),
    # broad must come before narrow, but the only call narrow fits is the first: one unmet
    ("order-impossible", [BROAD, NARROW], {"broad": ["narrow"]}, NARROW_FIRST, False,
     ("narrow", "search was called before the goals it depends on")),
    # one call cannot meet two goals
    ("one-call", [BROAD, NARROW], {}, NARROW_FIRST[:1], False,
     ("narrow", "each search call that fits it meets another goal")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("details", "graph", "calls", "passed", "unmet"),
    [r[1:] for r in GOALS],
    ids=[r[0] for r in GOALS],
)
def test_goals_pair_calls_optimally(
    details: list[dict[str, Any]],
    graph: dict[str, list[str]],
    calls: tuple[tuple[str, dict[str, Any]], ...],
    passed: bool,
    unmet: tuple[str, str] | None,
):
    assertion = {"type": "goals", "goals": graph, "goal_details": details}
    (row,) = load_suite({"name": "g", "metrics": [assertion]}).score(trajectory(*calls))
    assert row.score.passed is passed, row.score.explanation
    goals = row.score.details["goals"]
    if unmet is None:
        assert all(g["met"] for g in goals.values())
        assert goals["narrow"]["at"] == 0
    else:
        name, reason = unmet
        assert goals[name] == {"met": False, "reason": reason}
        assert row.score.value == 0.5


# --- 12. tool schemas belong to the conversation being scored -----------------------------------


def test_scoring_one_trajectory_at_a_time_uses_each_ones_own_tool_schemas():
    # Through the documented `suite.score(...)`, one trajectory at a time, each freed before
    # the next is built (so CPython reuses its memory, and its id()).
    suite = load_suite({"name": "v", "metrics": [{"type": "tool_call_validity"}]})
    for i in range(200):
        wanted = "integer" if i % 2 else "string"
        definitions = [{"type": "function", "function": {
            "name": "get_order", "parameters": {"type": "object",
            "properties": {"order_id": {"type": wanted}}, "required": ["order_id"]}}}]  # fmt: skip
        value: Any = 7 if i % 2 else "ORD-7"  # valid against this conversation's own schema
        t = Trajectory(
            conversation_id=f"c-{i}",
            attributes={"gen_ai.tool.definitions": definitions},
            turns=[Turn(index=0, steps=[ToolCall(name="get_order",
                                                 arguments={"order_id": value})])],
        )  # fmt: skip
        (row,) = suite.score(t)
        assert row.score.passed, (i, row.score.explanation)
        del t, row
