"""Suite files: loading with located errors, the JSON Schema, custom metrics, scenario
selection, and the example suite scoring real trajectories of the example agent (exported over
OTLP to the real collector and rebuilt from the lake)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from spanscore.collector import Collector
from spanscore.evaluation import (
    Score,
    SuiteError,
    Trajectory,
    load_suite,
    load_trajectories,
    open_lake,
    suite_json_schema,
)
from spanscore.evaluation.llm.pool import JudgeRunner
from spanscore.evaluation.trajectory.model import ToolCall, Turn
from spanscore.examples.customer_service import Store
from spanscore.examples.customer_service.scripted import ScriptedAgent, conversations
from spanscore.examples.judge_policy import ScriptedJudge
from spanscore.examples.llm_server import ScriptedLLM

EXAMPLE_SUITE = Path(__file__).parents[2] / "examples" / "customer_service" / "suite.yaml"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def problems(source: Path | dict[str, Any]) -> list[str]:
    with pytest.raises(SuiteError) as caught:
        load_suite(source)
    return [str(p) for p in caught.value.problems]


# --- located errors ----------------------------------------------------------------------------


def test_wrong_mode_names_file_line_path_and_choices(tmp_path: Path):
    path = write(
        tmp_path,
        "suite.yaml",
        """\
        name: s
        scenarios:
          - id: a
            assertions:
              - type: tool_calls
                expected: [get_order]
              - type: tool_calls
                name: second
                mode: strictt
        """,
    )
    (problem,) = problems(path)
    assert problem.startswith(f"{path}:9: scenarios[0].assertions[1].mode: ")
    assert "'strict'" in problem
    assert "'unordered'" in problem
    assert '(got "strictt")' in problem


def test_yaml_and_json_syntax_errors_give_the_line(tmp_path: Path):
    bad_yaml = write(tmp_path, "s.yaml", "name: s\nscenarios:\n  - id: [unclosed\n")
    (problem,) = problems(bad_yaml)
    assert problem.startswith(f"{bad_yaml}:")
    assert "invalid YAML" in problem
    bad_json = write(tmp_path, "s.json", '{"name": "s",\n "scenarios": [,]}')
    (problem,) = problems(bad_json)
    assert problem.startswith(f"{bad_json}:2: invalid JSON")


def test_json_suites_get_lines_too(tmp_path: Path):
    path = write(
        tmp_path,
        "s.json",
        json.dumps(
            {"name": "s", "metrics": [{"type": "tool_calls", "expected": [{"nme": "x"}]}]},
            indent=2,
        ),
    )
    found = problems(path)
    assert any(p.startswith(f"{path}:") and "metrics[0].expected[0]" in p for p in found)


@pytest.mark.parametrize(
    ("assertion", "path", "message"),
    [
        ({"type": "tool_calls", "expected": ["a"], "mode": "all"}, "metrics[0].mode", "strict"),
        (
            {"type": "tool_calls", "expected": [{"name": "a", "rules": {"x": {"pattern": "("}}}]},
            "metrics[0].expected[0].rules.x",
            "invalid regular expression",
        ),
        ({"type": "tool_calls", "expectd": ["a"]}, "metrics[0].expectd", "unknown field"),
        (
            {"type": "tool_calls", "expected": [{"name": "a", "min": 3, "max": 2}]},
            "metrics[0].expected[0]",
            "min (3) is more than max (2)",
        ),
        (
            {"type": "tool_calls", "expected": [{"name": "a", "rules": {"t": "tolerance"}}]},
            "metrics[0].expected[0].rules.t",
            "needs `tolerance`",
        ),
        ({"type": "nope"}, "metrics[0]", "tool_calls"),
        ({"type": "metric", "metric": "no_such_metric"}, "metrics[0]", "unknown metric"),
        ({"type": "response", "pattern": "[a-"}, "metrics[0].pattern", "invalid regular"),
        (
            {"type": "judged", "name": "j", "criteria": "c", "labels": ["a", "b"], "scale": [0, 5]},
            "metrics[0]",
            "either labels",
        ),
        (
            {
                "type": "judged",
                "name": "j",
                "criteria": "c",
                "labels": ["ok", "bad"],
                "pass_labels": ["good"],
            },
            "metrics[0]",
            "not among the labels",
        ),
        ({"type": "forbidden"}, "metrics[0].calls", "required"),
    ],
)
def test_assertion_problems(assertion: dict[str, Any], path: str, message: str):
    found = problems({"name": "s", "metrics": [assertion]})
    assert any(f": {path}: " in p and message in p for p in found), found


def test_suite_level_problems():
    dup = {"name": "s", "scenarios": [{"id": "a"}, {"id": "a"}]}
    assert any("'a' is used twice" in p for p in problems(dup))
    twice = {"name": "s", "metrics": [{"type": "response"}, {"type": "response"}]}
    assert any("both named 'response'" in p for p in problems(twice))
    assert any("name" in p and "required" in p for p in problems({"scenarios": []}))
    assert any("needs one of min_pass_rate" in p for p in problems({"name": "s", "gates": [{}]}))


def test_missing_file_and_missing_metric_file(tmp_path: Path):
    assert problems(tmp_path / "absent.yaml") == [f"{tmp_path / 'absent.yaml'}: file not found"]
    path = write(tmp_path, "s.yaml", "name: s\ncustom_metrics: [nothere.py]\n")
    (problem,) = problems(path)
    assert problem.startswith(f"{path}:2: custom_metrics[0]: FileNotFoundError")


def test_json_schema_describes_the_suite():
    schema = suite_json_schema()
    text = json.dumps(schema)
    for word in ("tool_calls", "in_order", "superset", "goal_details", "scenarios", "gates"):
        assert word in text
    assert schema["title"] == "spanscore suite"


# --- custom metrics ----------------------------------------------------------------------------


METRICS_FILE = """\
from spanscore.evaluation import Score, metric

@metric(threshold=0.5)
def calls_per_turn(trajectory, per_turn_limit=3):
    turns = max(1, len(trajectory.turns))
    return min(1.0, per_turn_limit * turns / max(1, len(trajectory.tool_calls)))

@metric
def answered(trajectory):
    return trajectory.final_response is not None

@metric(labels=["polite", "rude"], pass_labels=["polite"])
def tone(trajectory):
    return "rude" if "stupid" in (trajectory.final_response or "") else "polite"

@metric
def explodes(trajectory):
    raise RuntimeError("boom on " + trajectory.conversation_id)

@metric
def bad_label(trajectory):
    return 3 + 4j
"""


def one_turn(answer: str | None, *names: str) -> Trajectory:
    steps = [ToolCall(name=n) for n in names]
    return Trajectory(
        conversation_id="c-7", turns=[Turn(index=0, steps=steps, final_response=answer)]
    )


def test_custom_metrics_by_path(tmp_path: Path):
    write(tmp_path, "my_metrics.py", METRICS_FILE)
    suite_path = write(
        tmp_path,
        "s.yaml",
        """\
        name: s
        custom_metrics: [my_metrics.py]
        metrics:
          - {type: metric, metric: calls_per_turn, params: {per_turn_limit: 1}}
          - {type: metric, metric: answered}
          - {type: metric, metric: tone}
          - {type: metric, metric: explodes}
          - {type: metric, metric: bad_label}
          - {type: metric, name: strict_calls, metric: calls_per_turn, threshold: 0.9,
             params: {per_turn_limit: 1}}
        """,
    )
    suite = load_suite(suite_path)
    rows = {r.metric: r.score for r in suite.score(one_turn("you stupid", "a", "b"))}
    assert rows["calls_per_turn"] == Score(value=0.5, passed=True, threshold=0.5)
    assert rows["answered"].passed is True
    assert rows["tone"].label == "rude"
    assert rows["tone"].passed is False
    assert rows["explodes"].error == "RuntimeError: boom on c-7"
    assert rows["bad_label"].error is not None
    assert "expected Score" in rows["bad_label"].error
    assert rows["strict_calls"].passed is False
    assert rows["strict_calls"].threshold == 0.9


def test_unknown_metric_parameter_fails_at_load(tmp_path: Path):
    write(tmp_path, "my_metrics.py", METRICS_FILE)
    path = write(
        tmp_path,
        "s.yaml",
        "name: s\ncustom_metrics: [my_metrics.py]\n"
        "metrics:\n  - {type: metric, metric: answered, params: {x: 1}}\n",
    )
    (problem,) = problems(path)
    assert "takes no parameter x" in problem


def test_content_hash_follows_suite_and_metric_file(tmp_path: Path):
    metrics = write(tmp_path, "my_metrics.py", METRICS_FILE)
    path = write(tmp_path, "s.yaml", "name: s\ncustom_metrics: [my_metrics.py]\n")
    first = load_suite(path).content_hash
    assert load_suite(path).content_hash == first
    metrics.write_text(METRICS_FILE + "\n# changed\n")
    assert load_suite(path).content_hash != first


# --- selection ---------------------------------------------------------------------------------


def test_scenarios_select_by_attribute_agent_service_and_first_message():
    suite = load_suite(
        {
            "name": "s",
            "policies": [{"id": "everyone", "assertions": [{"type": "response"}]}],
            "scenarios": [
                {"id": "refund", "assertions": [{"type": "response"}]},
                {
                    "id": "by-agent",
                    "select": {"agent": ["billing", "support"]},
                    "assertions": [{"type": "response"}],
                },
                {
                    "id": "by-message",
                    "select": {"first_user_message": "(?i)where is my order"},
                    "assertions": [{"type": "response"}],
                },
                {
                    "id": "by-tier",
                    "select": {"attributes": {"tier": ["gold", 1]}},
                    "assertions": [{"type": "response"}],
                },
            ],
        }
    )
    assert suite.attribute_keys() == ["scenario.id", "tier"]
    t = Trajectory(
        conversation_id="c",
        agent_name="support",
        attributes={"scenario.id": "refund", "tier": 1},
        turns=[Turn(index=0, user_message="Where is my order?")],
    )
    assert [r.scenario_id for r in suite.score(t)] == [
        "everyone",
        "refund",
        "by-agent",
        "by-message",
        "by-tier",
    ]
    other = Trajectory(conversation_id="d", turns=[])
    assert [r.scenario_id for r in suite.score(other)] == ["everyone"]


# --- the example suite over real trajectories ---------------------------------------------------


@pytest.fixture
def judge_llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM(ScriptedJudge()) as llm:
        yield llm


def test_example_suite_scores_the_example_agent(
    collector: Collector, lake_dir: Path, judge_llm: ScriptedLLM
):
    provider = TracerProvider(resource=Resource.create({"service.name": "customer-service"}))
    provider.add_span_processor(
        SimpleSpanProcessor(
            OTLPSpanExporter(endpoint=f"http://127.0.0.1:{collector.http_port}/v1/traces")
        )
    )
    agent = ScriptedAgent(Store(), provider.get_tracer("t"))
    plans = conversations()
    for plan in plans:
        agent.run(plan)
    provider.shutdown()
    suite = load_suite(EXAMPLE_SUITE)
    con = open_lake(lake_dir)
    # The example's judged rubrics are answered by the scripted judge on loopback.
    config = suite.judge_config().model_copy(update={"base_url": judge_llm.base_url})
    with JudgeRunner(config) as judge:
        scored = {
            t.conversation_id: suite.score(t, judge)
            for t in load_trajectories(con, attributes=suite.attribute_keys())
        }
    assert set(scored) == {p.conversation_id for p in plans}
    for plan in plans:
        rows = scored[plan.conversation_id]
        assert all(r.score.error is None for r in rows), rows
        scenario_rows = [r for r in rows if r.scenario_id == plan.scenario_id]
        assert scenario_rows, f"{plan.conversation_id} selected by no scenario"
        policy_rows = [
            r
            for r in rows
            if r.scenario_id in ("verify_before_cancel", "cancel_needs_confirmation")
        ]
        failed = [
            (r.scenario_id, r.metric)
            for r in scenario_rows + policy_rows
            if r.score.passed is False
        ]
        if plan.breaks_policy:
            assert failed, f"{plan.conversation_id} ({plan.note}) passed everything"
        else:
            assert not failed, (
                plan.conversation_id,
                failed,
                [r.score.explanation for r in rows if r.score.passed is False],
            )
    cancel_first = {(r.scenario_id, r.metric): r.score for r in scored["cs-cancel-2"]}
    assert cancel_first[("verify_before_cancel", "order")].passed is False
    assert cancel_first[("auth_cancel_order", "tool_calls")].passed is False
    assert cancel_first[(None, "verification_compliance")].value == 0.0
    budget = {(r.scenario_id, r.metric): r.score for r in scored["cs-budget-search-2"]}
    assert "lookup_customer" in (
        budget[("product_search_with_budget", "tool_calls")].explanation or ""
    )


# --- hostile files -----------------------------------------------------------------------------


def test_a_yaml_alias_bomb_is_refused_before_it_grows(tmp_path: Path):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    lines.append("name: *a9")
    path = write(tmp_path, "bomb.yaml", "\n".join(lines) + "\n")
    assert path.stat().st_size < 2000
    [problem] = problems(path)
    assert "expands to more than 1,000,000 values" in problem


def test_a_few_aliases_still_work(tmp_path: Path):
    path = write(
        tmp_path,
        "s.yaml",
        "name: s\nmetrics:\n  - &calls {type: tool_calls, expected: [a]}\n"
        "scenarios:\n  - id: x\n    assertions: [*calls]\n",
    )
    suite = load_suite(path)
    assert suite.suite.scenarios[0].assertions[0].type == "tool_calls"


def test_an_unknown_key_is_reported_on_its_own_line_when_its_value_is_a_block(tmp_path: Path):
    path = write(
        tmp_path,
        "s.yaml",
        """\
        name: s
        scenarios:
          - id: a
            assertions:
              - type: tool_calls
                mode: strict
                expectd:
                  - get_order
        """,
    )
    (problem,) = problems(path)
    assert problem.startswith(f"{path}:7: scenarios[0].assertions[0].expectd: unknown field")
