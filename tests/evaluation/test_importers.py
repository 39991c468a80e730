"""Importers: other tools' test files read as suites, with their documented semantics.

Table-driven mapping per format (pure: no lake), the suites they produce load, and the two
worked examples score real trajectories: the seven ArkSim customer-service scenarios and the
watsonx HR time-off dataset, loaded from their native files, against conversations run by the
example agents through the real collector into a lake. The judged parts (ArkSim agent
constraints, watsonx fuzzy arguments, the tool-selection tester's semantic judge) are scored
with a judge served over loopback by `ScriptedLLM`, whose verdicts pass or fail them."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from spanscore.cli import main
from spanscore.collector import Collector
from spanscore.evaluation import Trajectory, load_trajectories, open_lake
from spanscore.evaluation.llm.pool import JudgeRunner
from spanscore.evaluation.suites.importers import NO_EXPECTATION, detect, import_file, to_yaml
from spanscore.evaluation.suites.importers._common import ImporterError, ImportResult
from spanscore.evaluation.suites.load import SuiteError, load_suite, suite_json_schema
from spanscore.evaluation.suites.loaded import LoadedSuite
from spanscore.evaluation.trajectory.model import ToolCall, Turn
from spanscore.examples.customer_service import Store
from spanscore.examples.customer_service.scripted import (
    Conversation,
    ScriptedAgent,
    conversations,
    wrong_plans,
)
from spanscore.examples.hr import DATASET
from spanscore.examples.hr import agent as hr
from spanscore.examples.llm_server import LLMRequest, ScriptedLLM

ROOT = Path(__file__).resolve().parents[2]
ARKSIM_FILE = ROOT / "examples" / "customer_service" / "arksim_scenarios.json"


def write(tmp_path: Path, name: str, data: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def only_assertion(result: ImportResult, index: int = 0) -> dict[str, Any]:
    assertions = result.suite["scenarios"][index]["assertions"]
    assert len(assertions) == 1, assertions
    return dict(assertions[0])


def notes(result: ImportResult) -> str:
    return " ".join(n for ns in result.scenario_notes.values() for n in ns)


# --- a judge for the judged imports -------------------------------------------------------------

# The (expected, actual) pairs the test judge calls equivalent; everything else differs.
SAME_MEANING = {
    ("time off schedule", "time off schedule information"),
    ("New York", "NYC"),
    ("When should I remind you?", "What time would you like the reminder?"),
}
_EXPECTED_RESPONSE = re.compile(r'expected response: "(.*?)" ')
_CONSTRAINT = re.compile(r"respect this constraint: (.*?) It must hold")


def judge_policy(request: LLMRequest) -> str:
    """A judge policy: semantic matches by `SAME_MEANING`; ArkSim constraints of the form
    "never say X" by whether an ASSISTANT line says X; the tester's rubric by `SAME_MEANING`
    between the expected response and the final answer."""
    system = next(m.text for m in request.messages if m.role == "system")
    user = request.messages[-1].text
    schema = request.body["response_format"]["json_schema"]["schema"]
    answers = [line[11:] for line in user.splitlines() if line.startswith("ASSISTANT: ")]
    if "equivalent" in schema["properties"]:
        lines = user.splitlines()
        values = dict(x.split(": ", 1) for x in lines if x.startswith(("Expected", "Actual")))
        same = (values["Expected"], values["Actual"]) in SAME_MEANING
        return json.dumps({"reasoning": "test judge", "equivalent": same})
    labels = schema["properties"]["label"]["enum"]
    constraint = _CONSTRAINT.search(system)
    if constraint:
        forbidden = constraint.group(1).removeprefix("never say ").strip(" .")
        violated = any(forbidden in answer for answer in answers)
        label = "constraint_violation" if violated else "no failure"
    else:
        found = _EXPECTED_RESPONSE.search(system)
        assert found, system
        same = bool(answers) and (found.group(1), answers[-1]) in SAME_MEANING
        label = "equivalent" if same else "different"
    assert label in labels
    return json.dumps({"reasoning": "test judge", "label": label})


@pytest.fixture
def judge_llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM(judge_policy) as llm:
        yield llm


def judged_scores(
    llm: ScriptedLLM, result: ImportResult, trajectory: Trajectory
) -> dict[tuple[str | None, str], Any]:
    """The imported suite (it must load) scoring `trajectory` with the test judge."""
    suite = load_suite(result.suite)
    config = suite.judge_config().model_copy(update={"base_url": llm.base_url})
    with JudgeRunner(config) as judge:
        rows = suite.score(trajectory, judge)
    return {(row.scenario_id, row.metric): row.score for row in rows}


def conversation(scenario_id: str, *turns: tuple[list[ToolCall], str | None]) -> Trajectory:
    return Trajectory(
        conversation_id=f"c-{scenario_id}",
        attributes={"scenario.id": scenario_id},
        turns=[
            Turn(index=i, user_message="hi", steps=list(calls), final_response=answer)
            for i, (calls, answer) in enumerate(turns)
        ],
    )


# --- ArkSim ----------------------------------------------------------------------------------


def arksim(expected: list[Any], mode: str | None = "contains", **extra: Any) -> dict[str, Any]:
    assertion: dict[str, Any] = {"type": "tool_calls", "expected": expected}
    if mode is not None:
        assertion["match_mode"] = mode
    scenario = {
        "scenario_id": "s1",
        "user_id": "u",
        "goal": "a goal",
        "agent_context": "ctx",
        "user_profile": "p",
        "assertions": [assertion],
        **extra,
    }
    return {"schema_version": "v1", "scenarios": [scenario]}


ARKSIM_MODES = [
    # (match_mode, spanscore mode): the four modes keep their names; unordered is the default.
    ("strict", "strict"),
    ("unordered", "unordered"),
    ("contains", "contains"),
    ("within", "within"),
    (None, "unordered"),
]


@pytest.mark.parametrize(("mode", "ours"), ARKSIM_MODES, ids=[str(m) for m, _ in ARKSIM_MODES])
def test_arksim_match_modes(tmp_path: Path, mode: str | None, ours: str) -> None:
    path = write(tmp_path, "scenarios.json", arksim([{"name": "a"}, {"name": "b"}], mode))
    assertion = only_assertion(import_file("arksim", path))
    assert assertion == {"type": "tool_calls", "mode": ours, "expected": ["a", "b"]}


ARKSIM_ARGS = [
    # ignore (the default) compares names only: the bare name
    ({"name": "get_order", "arguments": {"order_id": "X"}}, "get_order"),
    (
        {"name": "get_order", "arguments": {"order_id": "X"}, "arg_match_mode": "exact"},
        {"name": "get_order", "arguments": {"order_id": "X"}, "match": "exact"},
    ),
    (
        {"name": "get_order", "arguments": {"order_id": "X"}, "arg_match_mode": "partial"},
        {"name": "get_order", "arguments": {"order_id": "X"}, "match": "partial"},
    ),
    # exact without arguments: ArkSim compares with {} (no arguments at all)
    (
        {"name": "ping", "arg_match_mode": "exact"},
        {"name": "ping", "arguments": {}, "match": "exact"},
    ),
]


@pytest.mark.parametrize(("call", "ours"), ARKSIM_ARGS, ids=["ignore", "exact", "partial", "{}"])
def test_arksim_argument_modes(tmp_path: Path, call: dict[str, Any], ours: Any) -> None:
    path = write(tmp_path, "scenarios.json", arksim([call]))
    assert only_assertion(import_file("arksim", path))["expected"] == [ours]


def test_arksim_empty_expected_always_passes_so_nothing_is_imported(tmp_path: Path) -> None:
    # ArkSim: "No expected tool calls defined" matches whatever the agent did, in every mode.
    result = import_file("arksim", write(tmp_path, "s.json", arksim([], "strict")))
    assert result.suite["scenarios"][0]["assertions"] == [NO_EXPECTATION]
    assert "empty expected list" in notes(result)
    assert "no_expectation" in notes(result)
    assert "empty expected list" in to_yaml(result)


def test_arksim_quirks_are_noted(tmp_path: Path) -> None:
    calls = [
        {"name": "f", "arguments": {"a": {"b": 1}}, "arg_match_mode": "partial"},
        {"name": "f", "arguments": {"a": {"b": 2}}, "arg_match_mode": "partial"},
    ]
    data = arksim(calls, "unordered")
    data["scenarios"][0]["assertions"] += [
        {"type": "tool_calls", "expected": [{"name": "g"}], "match_mode": "strict"},
        {"type": "agent_response", "expected": "be polite"},
    ]
    result = import_file("arksim", write(tmp_path, "s.json", data))
    tool_calls, constraint = result.suite["scenarios"][0]["assertions"]
    assert tool_calls["mode"] == "unordered"  # only the first tool_calls counts
    assert constraint["type"] == "judged"
    text = notes(result)
    for phrase in ("first-fit", "top-level keys", "first tool_calls", "feat/agent-constraints"):
        assert phrase in text


ARKSIM_CONSTRAINTS = [
    # (constraints, rubric names): one is `agent_response`, several are numbered
    (["Never reveal card numbers."], ["agent_response"]),
    (["Verify first.", "Be polite."], ["agent_response_1", "agent_response_2"]),
]


@pytest.mark.parametrize(("constraints", "names"), ARKSIM_CONSTRAINTS, ids=["one", "two"])
def test_arksim_agent_response_becomes_a_judged_rubric(
    tmp_path: Path, constraints: list[str], names: list[str]
) -> None:
    data = arksim([{"name": "a"}])
    data["scenarios"][0]["assertions"] += [
        {"type": "agent_response", "expected": c} for c in constraints
    ]
    result = import_file("arksim", write(tmp_path, "s.json", data))
    tool_calls, *rubrics = result.suite["scenarios"][0]["assertions"]
    assert tool_calls["type"] == "tool_calls"
    assert [r["name"] for r in rubrics] == names
    for rubric, constraint in zip(rubrics, constraints, strict=True):
        assert rubric["type"] == "judged"
        assert constraint in rubric["criteria"]
        assert "every assistant turn" in rubric["criteria"]
        assert set(rubric["labels"]) == {"no failure", "constraint_violation"}
        assert "directly contradicts" in rubric["labels"]["constraint_violation"]
        assert rubric["pass_labels"] == ["no failure"]
    text = notes(result)
    assert "unreleased upstream" in text
    assert "reads the whole conversation once" in text
    assert "whole conversation once" in to_yaml(result)
    loaded = load_suite(result.suite)
    assert [a.metric_name for a in loaded.suite.scenarios[0].assertions] == ["tool_calls", *names]


def test_arksim_agent_response_needs_its_constraint(tmp_path: Path) -> None:
    data = arksim([{"name": "a"}])
    data["scenarios"][0]["assertions"].append({"type": "agent_response"})
    with pytest.raises(ImporterError, match=r"assertions\[1\]\.expected: expected a non-empty"):
        import_file("arksim", write(tmp_path, "s.json", data))


@pytest.mark.parametrize(
    ("answers", "passed"),
    [
        pytest.param(["Your order has shipped."], True, id="kept"),
        pytest.param(["Your card is 4111.", "Anything else?"], False, id="violated-early"),
    ],
)
def test_arksim_agent_response_is_scored_by_the_judge(
    tmp_path: Path, judge_llm: ScriptedLLM, answers: list[str], passed: bool
) -> None:
    data = arksim([{"name": "get_order"}])
    data["scenarios"][0]["assertions"].append(
        {"type": "agent_response", "expected": "never say 4111"}
    )
    result = import_file("arksim", write(tmp_path, "s.json", data))
    turns = [([ToolCall(name="get_order")] if i == 0 else [], a) for i, a in enumerate(answers)]
    got = judged_scores(judge_llm, result, conversation("s1", *turns))
    assert got[("s1", "tool_calls")].passed is True
    score = got[("s1", "agent_response")]
    assert score.error is None, score
    assert score.passed is passed
    assert score.label == ("no failure" if passed else "constraint_violation")


def test_arksim_older_shape(tmp_path: Path) -> None:
    old = {
        "schema_version": "v1",
        "scenarios": [
            {
                "scenario_id": "s1",
                "expected_tool_calls": [
                    {"name": "f", "arguments": {"x": 1}, "arg_match_mode": "subset"}
                ],
                "match_mode": "subset",
            }
        ],
    }
    assertion = only_assertion(import_file("arksim", write(tmp_path, "s.json", old)))
    assert assertion == {
        "type": "tool_calls",
        "mode": "within",
        "expected": [{"name": "f", "arguments": {"x": 1}, "match": "partial"}],
    }


# --- watsonx ----------------------------------------------------------------------------------


def test_watsonx_dataset_becomes_a_goals_scenario_named_after_the_file() -> None:
    result = import_file("watsonx", DATASET)
    (scenario,) = result.suite["scenarios"]
    assert scenario["id"] == "timeoff_schedule"
    goals, keywords = scenario["assertions"]
    assert goals["type"] == "goals"
    assert goals["name"] == "journey_success"
    assert goals["goals"] == json.loads(DATASET.read_text())["goals"]
    assert [g["name"] for g in goals["goal_details"]] == [
        "get_assignment_id_hr_agent-1",
        "get_timeoff_schedule_hr_agent-1",
        "summarize",
    ]
    assert keywords == {
        "type": "response",
        "name": "summary_keywords",
        "keywords": ["January 5, 2025"],
    }


WATSONX_ARGS = [
    # (args, arg_matching, imported args, imported arg_matching)
    ({"u": "x"}, None, {"u": "x"}, None),  # strict is the default
    # fuzzy text is judged (LLM, then embeddings, then token similarity) at the threshold
    (
        {"u": "x", "q": "time off"},
        {"q": "fuzzy"},
        {"u": "x", "q": "time off"},
        {"q": {"strategy": "judged", "threshold": 0.8}},
    ),
    # fuzzy numbers and dates compare by value first in watsonx: kept as value rules
    (
        {"d": "2025-01-01"},
        {"d": "fuzzy"},
        {"d": "2025-01-01"},
        {"d": {"strategy": "datetime", "window_seconds": 0}},
    ),
    (
        {"n": "15778303"},
        {"n": "fuzzy"},
        {"n": "15778303"},
        {"n": {"strategy": "tolerance", "tolerance": 0.001, "cast": True}},
    ),
    ({"u": "x", "m": "y"}, {"m": "ignore"}, {"u": "x", "m": "y"}, {"m": "ignore"}),
    ({"u": "x", "d": "2025"}, {"d": "optional"}, {"u": "x", "d": "2025"}, {"d": "optional"}),
    ({"u": "x", "m": "<IGNORE>"}, None, {"u": "x", "m": "<IGNORE>"}, {"m": "ignore"}),
    ({"IGNORE": None}, None, None, None),  # any arguments at all
]


@pytest.mark.parametrize(
    ("args", "matching", "ours", "our_matching"),
    WATSONX_ARGS,
    ids=[
        "strict",
        "fuzzy",
        "fuzzy-date",
        "fuzzy-number",
        "ignore",
        "optional",
        "<IGNORE>",
        "IGNORE-all",
    ],
)
def test_watsonx_argument_matching(
    tmp_path: Path, args: Any, matching: Any, ours: Any, our_matching: Any
) -> None:
    detail: dict[str, Any] = {"type": "tool_call", "name": "t-1", "tool_name": "t", "args": args}
    if matching:
        detail["arg_matching"] = matching
    data = {"agent": "a", "goals": {"t-1": []}, "goal_details": [detail], "story": "s"}
    result = import_file("watsonx", write(tmp_path, "d.json", data))
    goal = only_assertion(result)["goal_details"][0]
    assert goal.get("args") == ours
    assert goal.get("arg_matching") == our_matching
    load_suite(result.suite)


def fuzzy_dataset(**extra: Any) -> dict[str, Any]:
    detail = {
        "type": "tool_call",
        "name": "search-1",
        "tool_name": "search_policies",
        "args": {"query": "time off schedule", "user": "nwaters", "day": "2025-01-05"},
        "arg_matching": {"query": "fuzzy", "day": "fuzzy"},
    }
    return {"agent": "a", "goals": {"search-1": []}, "goal_details": [detail], **extra}


@pytest.mark.parametrize(("extra", "threshold"), [({}, 0.8), ({"similarity_threshold": 0.6}, 0.6)])
def test_watsonx_fuzzy_text_is_judged_at_the_datasets_threshold(
    tmp_path: Path, extra: dict[str, Any], threshold: float
) -> None:
    result = import_file("watsonx", write(tmp_path, "d.json", fuzzy_dataset(**extra)))
    goals = only_assertion(result)
    assert goals["similarity_threshold"] == threshold
    assert goals["goal_details"][0]["arg_matching"] == {
        "query": {"strategy": "judged", "threshold": threshold},
        "day": {"strategy": "datetime", "window_seconds": 0},  # dates still compare by value
    }
    suite_notes = " ".join(result.notes)
    for phrase in ("/v1/embeddings", "all-minilm-l6-v2", "WRatio", "any score >= 1", "1.4.9"):
        assert phrase in suite_notes
    assert "fuzzy query judged" in notes(result)
    assert "all-minilm-l6-v2" in to_yaml(result)
    load_suite(result.suite)


def test_watsonx_without_fuzzy_text_has_no_judge_note() -> None:
    result = import_file("watsonx", DATASET)
    assert not any("judged" in n for n in result.notes)
    assert not load_suite(DATASET).uses_judge


def test_watsonx_bad_similarity_threshold(tmp_path: Path) -> None:
    path = write(tmp_path, "d.json", fuzzy_dataset(similarity_threshold=80))
    with pytest.raises(ImporterError, match="similarity_threshold: expected a number from 0 to 1"):
        import_file("watsonx", path)


@pytest.mark.parametrize(
    ("query", "passed"),
    [
        pytest.param("time off schedule information", True, id="same-meaning"),
        pytest.param("parking permit", False, id="different"),
    ],
)
def test_watsonx_fuzzy_argument_is_scored_by_the_judge(
    tmp_path: Path, judge_llm: ScriptedLLM, query: str, passed: bool
) -> None:
    result = import_file("watsonx", write(tmp_path, "d.json", fuzzy_dataset()))
    call = ToolCall(
        name="search_policies",
        arguments={"query": query, "user": "nwaters", "day": "2025-01-05T00:00:00"},
    )
    score = judged_scores(judge_llm, result, conversation("d", ([call], "Done.")))[
        ("d", "journey_success")
    ]
    assert score.error is None, score
    assert score.passed is passed, score
    decided = [n["decided_by"] for n in score.details["judge"]["arguments"]]
    assert decided
    assert set(decided) == {"llm"}


def test_watsonx_directory_gives_one_scenario_per_dataset(tmp_path: Path) -> None:
    base = json.loads(DATASET.read_text())
    write(tmp_path, "first.json", base)
    write(tmp_path, "second.json", base)
    result = import_file("auto", tmp_path)
    assert [s["id"] for s in result.suite["scenarios"]] == ["first", "second"]
    assert len(load_suite(tmp_path).suite.scenarios) == 2  # a directory works as a suite too


def test_watsonx_bad_dataset_names_the_problem(tmp_path: Path) -> None:
    data = {
        "goals": {"a": ["b"]},
        "goal_details": [{"type": "tool_call", "name": "a", "tool_name": "t"}],
    }
    with pytest.raises(ImporterError, match="no details for goals b"):
        import_file("watsonx", write(tmp_path, "d.json", data))


# --- tool-selection tester ----------------------------------------------------------------------


def test_tool_selection_function_call_and_no_function_call(tmp_path: Path) -> None:
    cases = [
        {
            "id": "A001",
            "user_query": "Weather in New York?",
            "ground_truth": {
                "function_call": {"name": "get_weather", "arguments": {"location": "New York"}}
            },
        },
        {
            "id": "B001",
            "user_query": "Capital of France?",
            "ground_truth": {"text": "The capital of France is Paris.", "no_function_call": True},
        },
    ]
    cases[0]["ground_truth"]["function_call"]["arguments"]["days"] = 3
    result = import_file("auto", write(tmp_path, "test_no_tool.json", cases))
    first, second = result.suite["scenarios"]
    assert first["id"] == "A001"
    assert first["description"] == "[direct response] Weather in New York?"
    [location_rubric] = [
        first["assertions"][0]["expected"][0]["rules"]["location"].pop("rubric", None)
    ]
    assert first["assertions"] == [
        {
            "type": "tool_calls",
            "mode": "strict",
            "normalize_names": True,
            "expected": [
                {
                    "name": "get_weather",
                    "arguments": {"location": "New York", "days": 3},
                    "match": "exact",
                    "rules": {
                        # text goes to the semantic judge; other values compare as lower text
                        "location": {"strategy": "judged"},
                        "days": {"strategy": "exact", "case_insensitive": True, "cast": True},
                    },
                }
            ],
        }
    ]
    assert '"Weather in New York?"' in location_rubric  # the tester's question
    assert "more specific" in location_rubric  # its tool_selection prompt, paraphrased
    no_tool_call, rubric = second["assertions"]
    assert no_tool_call == {
        "type": "tool_calls",
        "name": "no_tool_call",
        "mode": "strict",
        "expected": [],
    }
    assert rubric["type"] == "judged"
    assert rubric["name"] == "semantic_equivalence"
    assert list(rubric["labels"]) == ["equivalent", "different"]
    assert rubric["pass_labels"] == ["equivalent"]
    assert 'expected response: "The capital of France is Paris."' in rubric["criteria"]
    assert '"Capital of France?"' in rubric["criteria"]
    assert "needs the judge" not in to_yaml(result)
    assert "not imported" not in " ".join(result.notes)
    assert "semantic judge" in " ".join(result.notes)
    assert "location: judged" in notes(result)
    assert load_suite(result.suite).uses_judge


TOOL_SELECTION_CATEGORIES = [
    # (dataset file, the case's type, a phrase of that category's prompt in the criteria)
    ("test_clarifying.json", None, "same core information"),
    ("test_error.json", None, "problem with its input"),
    ("test_no_tool.json", None, "answer the question correctly"),
    ("test_not_supported.json", None, "cannot directly fulfil"),
    ("results.json", "not_supported", "cannot directly fulfil"),  # a result file: the case's type
    ("results.json", "text_response", "answer the question correctly"),  # default: no_tool
]


@pytest.mark.parametrize(
    ("file", "kind", "phrase"),
    TOOL_SELECTION_CATEGORIES,
    ids=["clarifying", "error", "no_tool", "not_supported", "by-type", "default"],
)
def test_tool_selection_text_criteria_follow_the_category(
    tmp_path: Path, file: str, kind: str | None, phrase: str
) -> None:
    case: dict[str, Any] = {
        "id": "X1",
        "user_query": "q",
        "ground_truth": {"text": "t", "no_function_call": True},
    }
    if kind:
        case["type"] = kind
    result = import_file("tool_selection", write(tmp_path, file, [case]))
    rubric = result.suite["scenarios"][0]["assertions"][1]
    assert phrase in rubric["criteria"]
    load_suite(result.suite)


@pytest.mark.parametrize(
    ("location", "answer", "passed"),
    [
        pytest.param("NYC", None, True, id="call-same-meaning"),
        pytest.param("Boston", None, False, id="call-different"),
        pytest.param(None, "What time would you like the reminder?", True, id="text-same-meaning"),
        pytest.param(None, "Paris is the capital of France.", False, id="text-different"),
    ],
)
def test_tool_selection_semantic_judge_decides(
    tmp_path: Path,
    judge_llm: ScriptedLLM,
    location: str | None,
    answer: str | None,
    passed: bool,
) -> None:
    cases = [
        {
            "id": "A001",
            "user_query": "Weather in New York for 3 days?",
            "ground_truth": {
                "function_call": {
                    "name": "get_weather",
                    "arguments": {"location": "New York", "days": 3},
                }
            },
        },
        {
            "id": "C001",
            "user_query": "Set a reminder for the dentist.",
            "ground_truth": {"text": "When should I remind you?", "no_function_call": True},
        },
    ]
    result = import_file("tool_selection", write(tmp_path, "test_clarifying.json", cases))
    if location is not None:
        call = ToolCall(name="Get_Weather", arguments={"location": location, "days": "3"})
        got = judged_scores(judge_llm, result, conversation("A001", ([call], "Sunny.")))
        score = got[("A001", "tool_calls")]
    else:
        got = judged_scores(judge_llm, result, conversation("C001", ([], answer)))
        assert got[("C001", "no_tool_call")].passed is True
        score = got[("C001", "semantic_equivalence")]
    assert score.error is None, score
    assert score.passed is passed, score


def test_tool_selection_result_file(tmp_path: Path) -> None:
    results = {
        "with_tools": {
            "test_results": [
                {
                    "id": "A001",
                    "user_query": "q",
                    "ground_truth": {"function_call": {"name": "f", "arguments": {}}},
                    "model_function_call": None,
                    "model_text": None,
                }
            ]
        }
    }
    result = import_file("tool_selection", write(tmp_path, "results.json", results))
    assert [s["id"] for s in result.suite["scenarios"]] == ["A001"]


# --- Google ADK -------------------------------------------------------------------------------


def evalset(*invocations: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    return {
        "eval_set_id": "set",
        "eval_cases": [
            {
                "eval_id": "case-1",
                "conversation": [
                    {
                        "invocation_id": f"i{n}",
                        "user_content": {"parts": [{"text": f"turn {n}"}], "role": "user"},
                        "final_response": {"parts": [{"text": "done"}], "role": "model"},
                        "intermediate_data": {
                            "tool_uses": [{"name": name, "args": args} for name, args in uses]
                        },
                    }
                    for n, uses in enumerate(invocations)
                ],
            }
        ],
    }


ADK_MODES = [
    # ADK's ANY_ORDER allows extra calls: spanscore `contains`, not `unordered`.
    ("EXACT", "strict"),
    ("IN_ORDER", "in_order"),
    ("ANY_ORDER", "contains"),
]


@pytest.mark.parametrize(("match_type", "ours"), ADK_MODES, ids=[m for m, _ in ADK_MODES])
def test_adk_match_types(tmp_path: Path, match_type: str, ours: str) -> None:
    write(
        tmp_path,
        "test_config.json",
        {"criteria": {"tool_trajectory_avg_score": {"threshold": 1.0, "match_type": match_type}}},
    )
    path = write(tmp_path, "x.evalset.json", evalset([("a", {"k": 1})], [("b", {})]))
    result = import_file("auto", path)
    assert only_assertion(result) == {
        "type": "tool_calls",
        "mode": ours,
        "expected": [
            {"name": "a", "arguments": {"k": 1}, "match": "exact"},
            {"name": "b", "arguments": {}, "match": "exact"},
        ],
    }
    assert "2 invocations" in notes(result)


def test_adk_defaults_and_old_test_files(tmp_path: Path) -> None:
    result = import_file("adk", write(tmp_path, "x.evalset.json", evalset([("a", {})])))
    tool_calls, response = result.suite["scenarios"][0]["assertions"]
    assert tool_calls["mode"] == "strict"  # EXACT, threshold 1.0
    assert response == {"type": "response", "expected": "done", "similarity_threshold": 0.8}
    old = [
        {
            "query": "hi",
            "expected_tool_use": [{"tool_name": "f", "tool_input": {"x": 1}}],
            "reference": "ok",
        }
    ]
    result = import_file("auto", write(tmp_path, "home.test.json", old))
    assert result.suite["scenarios"][0]["id"] == "home"
    assert result.suite["scenarios"][0]["assertions"][0]["expected"] == [
        {"name": "f", "arguments": {"x": 1}, "match": "exact"}
    ]


def test_adk_empty_expected_in_any_order_always_passes(tmp_path: Path) -> None:
    write(
        tmp_path,
        "test_config.json",
        {"criteria": {"tool_trajectory_avg_score": {"threshold": 1.0, "match_type": "ANY_ORDER"}}},
    )
    result = import_file("adk", write(tmp_path, "x.evalset.json", evalset([])))
    assert result.suite["scenarios"][0]["assertions"] == [NO_EXPECTATION]


# --- agentevals -------------------------------------------------------------------------------


def trajectory_messages(*steps: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What's the weather in SF?"}]
    for step in steps:
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"function": {"name": name, "arguments": json.dumps(args)}}
                    for name, args in step
                ],
            }
        )
        messages.append({"role": "tool", "content": "ok"})
    messages.append({"role": "assistant", "content": "Sunny."})
    return messages


AGENTEVALS = [
    # (trajectory mode, args mode, our mode, our argument mode)
    ("strict", "exact", "strict", "exact"),
    ("unordered", "exact", "unordered", "exact"),
    ("superset", "exact", "contains", "exact"),  # the agent's calls include the reference's
    ("subset", "exact", "subset", "exact"),  # the agent's calls are among the reference's
    ("strict", "superset", "strict", "partial"),  # the agent's arguments include the reference's
    ("strict", "subset", "strict", "superset"),  # the agent's arguments are among the reference's
]


@pytest.mark.parametrize(
    ("mode", "args_mode", "ours", "our_args"),
    AGENTEVALS,
    ids=[f"{a}-{b}" for a, b, _, _ in AGENTEVALS],
)
def test_agentevals_modes(
    tmp_path: Path, mode: str, args_mode: str, ours: str, our_args: str
) -> None:
    doc = {
        "reference_outputs": trajectory_messages([("get_weather", {"city": "SF"})]),
        "trajectory_match_mode": mode,
        "tool_args_match_mode": args_mode,
    }
    assertion = only_assertion(import_file("auto", write(tmp_path, "ref.json", doc)))
    assert assertion == {
        "type": "tool_calls",
        "mode": ours,
        "expected": [{"name": "get_weather", "arguments": {"city": "SF"}}],
        "arguments": our_args,
    }


def test_agentevals_parallel_steps_ignore_and_overrides(tmp_path: Path) -> None:
    # A bare message list: strict, exact. Calls asked for in one message form a parallel step.
    messages = trajectory_messages(
        [("a", {"x": 1}), ("b", {})], [("c", {"when": {"day": 1, "h": 2}})]
    )
    assertion = only_assertion(import_file("agentevals", write(tmp_path, "m.json", messages)))
    assert assertion["mode"] == "strict"
    assert assertion["expected"] == [
        [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}],
        {"name": "c", "arguments": {"when": {"day": 1, "h": 2}}},
    ]
    doc = {
        "messages": messages,
        "trajectory_match_mode": "unordered",
        "tool_args_match_mode": "ignore",
        "tool_args_match_overrides": {"a": "exact", "c": ["when.day"]},
    }
    assertion = only_assertion(import_file("agentevals", write(tmp_path, "o.json", doc)))
    assert assertion == {
        "type": "tool_calls",
        "mode": "unordered",
        "expected": [
            {"name": "a", "arguments": {"x": 1}},
            "b",
            {"name": "c", "arguments": {"when": {"day": 1}}, "match": "partial"},
        ],
        "tools": {"a": {"match": "exact"}},
    }


# --- detection, YAML, load_suite and the CLI ------------------------------------------------------


DETECT = [
    (json.loads(ARKSIM_FILE.read_text()), "arksim"),
    (json.loads(DATASET.read_text()), "watsonx"),
    ([{"id": "A1", "user_query": "q", "ground_truth": {"text": "t"}}], "tool_selection"),
    ({"eval_set_id": "s", "eval_cases": []}, "adk"),
    ([{"role": "user", "content": "hi"}], "agentevals"),
    ({"name": "suite", "scenarios": [{"id": "x"}]}, None),  # a spanscore suite
    ({"unrelated": 1}, None),
]
DETECT_IDS = ["arksim", "watsonx", "tool_selection", "adk", "agentevals", "suite", "other"]


@pytest.mark.parametrize(("data", "fmt"), DETECT, ids=DETECT_IDS)
def test_detect(data: Any, fmt: str | None) -> None:
    assert detect(data) == fmt


def test_to_yaml_is_a_commented_suite_that_loads(tmp_path: Path) -> None:
    result = import_file("arksim", ARKSIM_FILE)
    text = to_yaml(result)
    assert text.startswith("# Imported by `spanscore import arksim`")
    assert yaml.safe_load(text) == result.suite
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    assert [s.id for s in load_suite(path).suite.scenarios] == [
        s["scenario_id"] for s in json.loads(ARKSIM_FILE.read_text())["scenarios"]
    ]


def test_load_suite_reads_native_files_by_shape_or_by_format(tmp_path: Path) -> None:
    assert load_suite(ARKSIM_FILE).suite.name == "arksim-arksim_scenarios"
    assert load_suite(DATASET, format="watsonx").suite.scenarios[0].id == "timeoff_schedule"
    with pytest.raises(SuiteError, match=r"imported as arksim|not a watsonx"):
        load_suite(ARKSIM_FILE, format="watsonx")


def test_cli_import(tmp_path: Path) -> None:
    runner = CliRunner()
    printed = runner.invoke(main, ["import", "arksim", str(ARKSIM_FILE)])
    assert printed.exit_code == 0, printed.output
    assert "mode: strict" in printed.output
    out = tmp_path / "suite.yaml"
    written = runner.invoke(main, ["import", "watsonx", str(DATASET), "-o", str(out)])
    assert written.exit_code == 0, written.output
    assert load_suite(out).suite.scenarios[0].assertions[0].metric_name == "journey_success"


@pytest.mark.parametrize(
    ("fmt", "content", "message"),
    [
        ("arksim", "{not json", "invalid JSON"),
        (
            "watsonx",
            '{"goals": {}, "goal_details": [{"type": "video", "name": "x"}]}',
            "not in goals",
        ),
        ("auto", '{"something": "else"}', "not a file of any known format"),
        (
            "arksim",
            '{"scenarios": [{"scenario_id": "a", "assertions": [{"type": "tool_calls", '
            '"expected": [], "match_mode": "sometimes"}]}]}',
            "unknown match mode 'sometimes'",
        ),
    ],
    ids=["json", "watsonx-goal", "unknown-format", "arksim-mode"],
)
def test_cli_import_bad_file_exits_2(tmp_path: Path, fmt: str, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    result = CliRunner().invoke(main, ["import", fmt, str(path)])
    assert result.exit_code == 2
    assert message in result.output


def test_cli_schema_suite() -> None:
    result = CliRunner().invoke(main, ["schema", "suite"])
    assert result.exit_code == 0
    assert json.loads(result.output) == suite_json_schema()


# --- the worked examples: real trajectories through the collector ------------------------------


def run_plans(
    collector: Collector,
    lake: Path,
    plans: list[Conversation],
    make_agent: Callable[[TracerProvider], ScriptedAgent],
    attributes: list[str],
) -> dict[str, Trajectory]:
    provider = TracerProvider(resource=Resource.create({"service.name": "examples"}))
    provider.add_span_processor(
        SimpleSpanProcessor(
            OTLPSpanExporter(endpoint=f"http://127.0.0.1:{collector.http_port}/v1/traces")
        )
    )
    agent = make_agent(provider)
    for plan in plans:
        agent.run(plan)
    provider.shutdown()
    return {t.conversation_id: t for t in load_trajectories(open_lake(lake), attributes=attributes)}


def scores(suite: LoadedSuite, trajectory: Trajectory) -> dict[tuple[str | None, str], Any]:
    return {(row.scenario_id, row.metric): row.score for row in suite.score(trajectory)}


def test_arksim_scenarios_score_the_example_agent(collector: Collector, lake_dir: Path) -> None:
    suite = load_suite(ARKSIM_FILE)  # the native ArkSim file, used directly as a suite
    plans = conversations() + wrong_plans()
    assert {p.scenario_id for p in plans} == {s.id for s in suite.suite.scenarios}
    rebuilt = run_plans(
        collector,
        lake_dir,
        plans,
        lambda provider: ScriptedAgent(Store(), provider.get_tracer("t")),
        suite.attribute_keys(),
    )
    outcome = {}
    for plan in plans:
        got = scores(suite, rebuilt[plan.conversation_id])
        score = got[(plan.scenario_id, "tool_calls")]
        assert score.error is None, score
        outcome[plan.conversation_id] = score.passed
        assert set(got) == {(plan.scenario_id, "tool_calls")}  # selected by scenario.id only
    # The correct conversations pass; the deliberately wrong ones fail: cancel before verify
    # (strict), a call outside the allowed tools (within, twice), a missing verification
    # (unordered), the wrong order id (contains with partial arguments).
    assert outcome == {p.conversation_id: not p.breaks_policy for p in plans}
    assert {cid for cid, ok in outcome.items() if not ok} == {
        "cs-cancel-2",
        "cs-budget-search-2",
        "cs-account-2",
        "cs-check-order-2",
        "cs-order-status-2",
    }


def test_watsonx_hr_dataset_scores_the_hr_agent(collector: Collector, lake_dir: Path) -> None:
    suite = load_suite(DATASET)  # the native watsonx dataset, used directly as a suite
    plans = hr.conversations()
    rebuilt = run_plans(
        collector,
        lake_dir,
        plans,
        lambda provider: ScriptedAgent(
            hr.HRStore(),
            provider.get_tracer("t"),
            agent=hr.AGENT,
            tool_definitions=hr.TOOL_DEFINITIONS,
        ),
        suite.attribute_keys(),
    )
    journeys = {
        cid: scores(suite, t)[(hr.SCENARIO, "journey_success")] for cid, t in rebuilt.items()
    }
    assert journeys["hr-timeoff-1"].passed is True
    assert journeys["hr-timeoff-1"].details["tool_call_recall"] == 1.0
    failing = {
        # wrong end_date: the schedule goal is not met (and summarize depends on it)
        "hr-wrong-args": "get_timeoff_schedule_hr_agent-1",
        # the assignment id was never looked up
        "hr-missing-step": "get_assignment_id_hr_agent-1",
        # the schedule was asked for before the id it needs
        "hr-wrong-order": "get_timeoff_schedule_hr_agent-1",
        # the answer lacks the date
        "hr-wrong-summary": "summarize",
    }
    for cid, goal in failing.items():
        score = journeys[cid]
        assert score.passed is False, cid
        assert goal in score.details["failed"], (cid, score.details)
        assert goal in (score.explanation or "")
    keywords = {
        cid: scores(suite, t)[(hr.SCENARIO, "summary_keywords")].passed
        for cid, t in rebuilt.items()
    }
    assert keywords == {p.conversation_id: p.conversation_id != "hr-wrong-summary" for p in plans}


@pytest.mark.parametrize(("args_mode", "ours"), [("superset", "partial"), ("subset", "superset")])
def test_agentevals_top_level_only_key_modes_are_noted(
    tmp_path: Path, args_mode: str, ours: str
) -> None:
    nested = {"reference_outputs": trajectory_messages([("book", {"when": {"day": 1}})])}
    flat = {"reference_outputs": trajectory_messages([("book", {"day": 1})])}
    for doc in (nested, flat):
        doc["tool_args_match_mode"] = args_mode
    noted = notes(import_file("agentevals", write(tmp_path, "n.json", nested)))
    assert f"book: agentevals' {args_mode} compares top-level keys only" in noted
    assert f"spanscore's `{ours}` applies to nested objects too" in noted
    assert "top-level" not in notes(import_file("agentevals", write(tmp_path, "f.json", flat)))


# --- a scenario with nothing to check still records a row ----------------------------------------


def test_a_scenario_without_expectation_records_a_passing_row_only_where_it_ran(
    tmp_path: Path,
) -> None:
    result = import_file("arksim", write(tmp_path, "s.json", arksim([], "strict")))
    suite = load_suite(result.suite)
    [empty_id] = [s["id"] for s in result.suite["scenarios"]]
    ran = suite.score(conversation(empty_id, ([ToolCall(name="anything")], "done")))
    assert [(r.scenario_id, r.metric, r.score.passed) for r in ran] == [
        (empty_id, "no_expectation", True)
    ]
    never = suite.score(conversation("unrelated", ([], "done")))
    assert never == []  # not selected: no row at all
