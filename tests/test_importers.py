"""Importers: other tools' test files read as suites, with their documented semantics.

Table-driven mapping per format (pure: no lake), the suites they produce load, and the two
worked examples score real trajectories: the seven ArkSim customer-service scenarios and the
watsonx HR time-off dataset, loaded from their native files, against conversations run by the
example agents through the real collector into a lake."""

from __future__ import annotations

import json
from collections.abc import Callable
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
from spanscore.evaluation.importers import (
    ImporterError,
    ImportResult,
    detect,
    import_file,
    to_yaml,
)
from spanscore.evaluation.suite import LoadedSuite, SuiteError, load_suite, suite_json_schema
from spanscore.examples.customer_service import Store
from spanscore.examples.customer_service.scripted import (
    Conversation,
    ScriptedAgent,
    conversations,
    wrong_plans,
)
from spanscore.examples.hr import DATASET
from spanscore.examples.hr import agent as hr

ROOT = Path(__file__).resolve().parent.parent
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
    assert result.suite["scenarios"][0]["assertions"] == []
    assert "empty expected list" in notes(result)
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
    assert only_assertion(result)["mode"] == "unordered"  # only the first tool_calls counts
    text = notes(result)
    for phrase in ("first-fit", "top-level keys", "first tool_calls", "LLM judge"):
        assert phrase in text


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
    ({"u": "x", "q": "time off"}, {"q": "fuzzy"}, {"u": "x", "q": "time off"}, {"q": "fuzzy"}),
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
    result = import_file("auto", write(tmp_path, "test_no_tool.json", cases))
    first, second = result.suite["scenarios"]
    assert first["id"] == "A001"
    assert first["description"] == "[direct response] Weather in New York?"
    assert first["assertions"] == [
        {
            "type": "tool_calls",
            "mode": "strict",
            "normalize_names": True,
            "expected": [
                {
                    "name": "get_weather",
                    "arguments": {"location": "New York"},
                    "match": "exact",
                    "rules": {
                        "location": {"strategy": "exact", "case_insensitive": True, "cast": True}
                    },
                }
            ],
        }
    ]
    assert second["assertions"] == [
        {"type": "tool_calls", "name": "no_tool_call", "mode": "strict", "expected": []},
        {
            "type": "response",
            "expected": "The capital of France is Paris.",
            "similarity_threshold": 0.8,
        },
    ]
    load_suite(result.suite)


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
    assert result.suite["scenarios"][0]["assertions"] == []


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
