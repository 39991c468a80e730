"""watsonx Orchestrate datasets scored by spanscore next to watsonx 1.6.9's own verdicts.

Each row is a dataset, a trajectory and the Journey Success verdict watsonx 1.6.9 gives it (read
from its `argument_matching` and `ExpectedToolExtractor`: arguments flattened to dot paths,
each leaf under its own or its nearest ancestor's strategy, extra keys accepted; only the first
tool call of a message read; goals credited consume-once in goal order). Rows where spanscore
differs on purpose say so, and the docs table and the imported suite's comments say it too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spanscore.evaluation.suites.importers import import_file, to_yaml
from spanscore.evaluation.suites.load import load_suite
from spanscore.evaluation.trajectory.model import ToolCall, Trajectory, Turn

DOCS = Path(__file__).resolve().parents[2] / "docs" / "assertions.md"


def goal(name: str, tool: str, args: Any, matching: dict[str, str] | None = None) -> dict[str, Any]:
    detail: dict[str, Any] = {"type": "tool_call", "name": name, "tool_name": tool, "args": args}
    if matching:
        detail["arg_matching"] = matching
    return detail


def dataset(*details: dict[str, Any], graph: dict[str, list[str]] | None = None) -> dict[str, Any]:
    return {
        "agent": "hr_agent",
        "goals": graph if graph is not None else {d["name"]: [] for d in details},
        "goal_details": list(details),
        "story": "s",
        "starting_sentence": "s",
    }


def journey_success(tmp_path: Path, data: dict[str, Any], steps: list[ToolCall]) -> bool:
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps(data))
    trajectory = Trajectory(
        conversation_id="c-1",
        attributes={"scenario.id": "dataset"},
        turns=[Turn(index=0, steps=steps, final_response="done")],
    )
    (row,) = [r for r in load_suite(path).score(trajectory) if r.metric == "journey_success"]
    assert row.score.error is None, row.score
    return bool(row.score.passed)


def calls(*made: tuple[str, dict[str, Any]], parallel: bool = False) -> list[ToolCall]:
    return [
        ToolCall(name=name, arguments=args, parallel_group=0 if parallel else None)
        for name, args in made
    ]


NESTED = {"filters": {"a": 1}}
FUZZY_NESTED = {"filters": {"start": "2025-01-01", "days": 5}}  # by value, no judge

ROWS = [
    # (id, dataset, calls made, watsonx 1.6.9's verdict, spanscore's verdict)
    # --- nested extra keys: accepted under optional and fuzzy, as strict already did ---------
    ("optional-extra-nested-key",
     dataset(goal("g", "t", NESTED, {"filters": "optional"})),
     calls(("t", {"filters": {"a": 1, "b": 2}})), True, True),
    ("fuzzy-extra-nested-key",
     dataset(goal("g", "t", FUZZY_NESTED, {"filters": "fuzzy"})),
     calls(("t", {"filters": {"start": "2025-01-01T00:00", "days": 5.0, "tz": "UTC"}})),
     True, True),
    ("strict-extra-nested-key",
     dataset(goal("g", "t", NESTED)),
     calls(("t", {"filters": {"a": 1, "b": 2}})), True, True),
    # optional leaf by leaf: an absent object, or an absent leaf, is not checked
    ("optional-object-absent",
     dataset(goal("g", "t", NESTED, {"filters": "optional"})),
     calls(("t", {})), True, True),
    ("optional-leaf-absent",
     dataset(goal("g", "t", {"f": {"a": 1, "b": 2}}, {"f": "optional"})),
     calls(("t", {"f": {"a": 1}})), True, True),
    ("optional-leaf-differs",
     dataset(goal("g", "t", NESTED, {"filters": "optional"})),
     calls(("t", {"filters": {"a": 2, "b": 2}})), False, False),
    # fuzzy leaves must be present; numbers compare by value
    ("fuzzy-leaf-absent",
     dataset(goal("g", "t", FUZZY_NESTED, {"filters": "fuzzy"})),
     calls(("t", {"filters": {"start": "2025-01-01"}})), False, False),
    ("fuzzy-number-leaf-differs",
     dataset(goal("g", "t", FUZZY_NESTED, {"filters": "fuzzy"})),
     calls(("t", {"filters": {"start": "2025-01-01", "days": 6}})), False, False),
    # a leaf's own strategy wins over its parent's
    ("leaf-strategy-overrides-parent",
     dataset(goal("g", "t", {"f": {"a": 1, "b": 2}}, {"f": "optional", "f.b": "ignore"})),
     calls(("t", {"f": {"a": 1, "b": 3}})), True, True),
    # --- deliberate difference 1: watsonx reads only a message's first tool call ---------------
    ("parallel-calls",
     dataset(goal("a", "get_profile", {"u": "x"}), goal("b", "get_balance", {"u": "x"})),
     calls(("get_profile", {"u": "x"}), ("get_balance", {"u": "x"}), parallel=True),
     False, True),
    ("same-calls-one-by-one",
     dataset(goal("a", "get_profile", {"u": "x"}), goal("b", "get_balance", {"u": "x"})),
     calls(("get_profile", {"u": "x"}), ("get_balance", {"u": "x"})), True, True),
    # --- deliberate difference 2: goals on one tool, greedy in goal order vs optimal ------------
    # the first call satisfies both goals; greedy gives it to g1, and the second call fits only
    # g1, so g2 is never met there
    ("greedy-takes-the-call-another-goal-needed",
     dataset(goal("g1", "t", {"x": 1}, {"x": "optional"}), goal("g2", "t", {"x": 1, "y": 2})),
     calls(("t", {"x": 1, "y": 2}), ("t", {"z": 3})), False, True),
    ("calls-in-the-greedy-order",
     dataset(goal("g1", "t", {"x": 1}, {"x": "optional"}), goal("g2", "t", {"x": 1, "y": 2})),
     calls(("t", {"z": 3}), ("t", {"x": 1, "y": 2})), True, True),
]  # fmt: skip

DELIBERATE = {"parallel-calls", "greedy-takes-the-call-another-goal-needed"}


@pytest.mark.parametrize(
    ("row_id", "data", "made", "watsonx", "ours"), ROWS, ids=[r[0] for r in ROWS]
)
def test_journey_success_next_to_watsonx(
    tmp_path: Path,
    row_id: str,
    data: dict[str, Any],
    made: list[ToolCall],
    watsonx: bool,
    ours: bool,
) -> None:
    assert journey_success(tmp_path, data, made) is ours
    assert (watsonx == ours) is (row_id not in DELIBERATE)


def notes(path: Path) -> str:
    return " ".join(import_file("watsonx", path).scenario_notes[path.stem])


def test_the_deliberate_differences_are_commented_where_they_can_matter(tmp_path: Path) -> None:
    independent = dataset(goal("a", "get_profile", {"u": "x"}), goal("b", "get_balance", {}))
    path = tmp_path / "independent.json"
    path.write_text(json.dumps(independent))
    text = notes(path)
    assert "first tool call of a message" in text
    assert "consume-once" not in text  # no two goals on one tool

    one_tool = dataset(goal("g1", "t", {"x": 1}), goal("g2", "t", {"y": 2}))
    path.write_text(json.dumps(one_tool))
    assert "consume-once" in notes(path)
    assert "# goals on one tool (deliberate difference)" in to_yaml(import_file("watsonx", path))

    chained = dataset(
        goal("g1", "t", {"x": 1}), goal("g2", "t", {"y": 2}), graph={"g1": ["g2"], "g2": []}
    )
    path.write_text(json.dumps(chained))
    text = notes(path)
    assert "first tool call of a message" not in text  # g2 waits for g1: never in one response
    assert "consume-once" not in text


def test_a_nested_strategy_becomes_one_rule_per_leaf(tmp_path: Path) -> None:
    data = dataset(
        goal("g", "t", {"f": {"q": "time off", "n": 5, "d": {}}, "unused": 1},
             {"f": "fuzzy", "f.n": "optional", "other": "fuzzy"})
    )  # fmt: skip
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps(data))
    result = import_file("watsonx", path)
    matching = result.suite["scenarios"][0]["assertions"][0]["goal_details"][0]["arg_matching"]
    assert matching == {
        "f.q": {"strategy": "judged", "threshold": 0.8},
        "f.n": "optional",
        "f.d": "ignore",  # an empty object has no leaves: watsonx checks nothing there
    }
    notes = " ".join(result.scenario_notes["dataset"])
    assert "other, which are not expected arguments" in notes


def test_the_docs_table_states_both_deliberate_differences() -> None:
    text = " ".join(DOCS.read_text().split())
    assert "first tool call of a message" in text
    assert "consume-once" in text
