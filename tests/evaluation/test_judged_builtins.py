"""The built-in judged metrics (docs/judged-metrics.md), table-driven over hand-built
trajectories. A `ScriptedLLM` on loopback plays the judge with a small policy written here (it
reads the request the real `openai` client sent and answers the verdict a case wants); the
metrics are scored by `LoadedSuite.score` with a real `JudgeRunner`, so deferral, rounds and
the client's schema checks are the production ones."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import ValidationError

from spanscore.evaluation.judged.agentevals import TrajectoryJudge
from spanscore.evaluation.judged.arksim import (
    AgentBehaviorFailure,
    Helpfulness,
    ToolCallBehaviorFailure,
)
from spanscore.evaluation.judged.dokimos import (
    TaskCompletion,
    ToolArgumentHallucination,
    ToolDescriptionSemantics,
    ToolNameSemantics,
    combine_checks,
)
from spanscore.evaluation.judged.tool_selection import ToolSelection, same_value
from spanscore.evaluation.llm.pool import JudgeRunner
from spanscore.evaluation.llm.types import JudgeAnswer, JudgeConfig, JudgeRequest
from spanscore.evaluation.scoring.assertion import AssertionBase
from spanscore.evaluation.scoring.registry import REGISTRY, MetricRegistry, ToolSpec
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.suites.loaded import LoadedSuite
from spanscore.evaluation.suites.model import Suite
from spanscore.evaluation.trajectory.model import ToolCall, Trajectory, Turn
from spanscore.examples.llm_server import LLMRequest, ScriptedLLM

Verdict = Callable[[str, str], dict[str, Any]]  # (system message, user message) -> answer

# --- conversations --------------------------------------------------------------------------


def call(name: str, result: Any = None, **arguments: Any) -> ToolCall:
    return ToolCall(name=name, arguments=arguments, result=result)


def turn(index: int, user: str | None, answer: str | None, *calls: ToolCall) -> Turn:
    return Turn(index=index, user_message=user, steps=list(calls), final_response=answer)


def conversation(*turns: Turn, tools: list[dict[str, Any]] | None = None) -> Trajectory:
    attributes = {"gen_ai.tool.definitions": tools} if tools is not None else {}
    return Trajectory(conversation_id="c-1", attributes=attributes, turns=list(turns))


def chat(*pairs: tuple[str, str | None]) -> Trajectory:
    """A conversation of (user, answer) turns without tool calls."""
    return conversation(*(turn(i, u, a) for i, (u, a) in enumerate(pairs)))


# --- the judge ------------------------------------------------------------------------------


@dataclass
class Judged:
    score: Score
    rounds: list[int]  # questions asked per round
    requests: list[dict[str, Any]]  # request bodies the judge received
    errors: int = 0

    @property
    def systems(self) -> list[str]:
        return [r["messages"][0]["content"] for r in self.requests]

    @property
    def users(self) -> list[str]:
        return [r["messages"][-1]["content"] for r in self.requests]


@dataclass
class _Counting:
    """The runner, counting the questions of each round."""

    runner: JudgeRunner
    rounds: list[int] = field(default_factory=list)

    def answer(self, requests: Mapping[str, JudgeRequest]) -> dict[str, JudgeAnswer]:
        self.rounds.append(len(requests))
        return self.runner.answer(requests)


class Policy:
    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict

    def __call__(self, request: LLMRequest) -> str:
        system = request.messages[0].text
        user = request.messages[-1].text
        return json.dumps(self.verdict(system, user))


def loaded(assertion: AssertionBase, tools: list[dict[str, Any]] | None = None) -> LoadedSuite:
    """A suite of one assertion, built without the `Assertion` union (the lead adds the new
    types there): `model_construct` skips the union's validation, the assertion itself was
    validated by its own model."""
    metrics: list[Any] = [assertion]
    suite = Suite.model_construct(
        name="t", tools=[ToolSpec(**t) for t in tools or []], metrics=metrics
    )
    return LoadedSuite(
        suite=suite, path=None, content_hash="test", registry=MetricRegistry(parent=REGISTRY)
    )


def judge(
    doc: Mapping[str, Any],
    trajectory: Trajectory,
    verdict: Verdict,
    *,
    model: type[AssertionBase],
    tools: list[dict[str, Any]] | None = None,
    **config: Any,
) -> Judged:
    assertion = model.model_validate(dict(doc))
    suite = loaded(assertion, tools)
    with ScriptedLLM(Policy(verdict), record=True) as llm:
        settings = JudgeConfig(base_url=llm.base_url, max_attempts=1, **config)
        with JudgeRunner(settings) as runner:
            counting = _Counting(runner)
            (row,) = suite.score(trajectory, counting)
        bodies = [r["body"] for r in llm.recorded if r["path"].endswith("chat/completions")]
        return Judged(row.score, counting.rounds, bodies, len(llm.errors))


_LAST_ANSWER = re.compile(r"^ASSISTANT: (.*)$", re.MULTILINE)


def last_answer(user: str) -> str:
    """The answer of the turn to judge: the last ASSISTANT line of the transcript."""
    return str(_LAST_ANSWER.findall(user)[-1])


# --- helpfulness (ArkSim) -------------------------------------------------------------------

SCORES = {"great": 5, "good": 4, "partial": 3, "poor": 2, "useless": 1}


def by_answer(user: str) -> dict[str, Any]:
    answer = last_answer(user)
    if "BOOM" in answer:
        raise RuntimeError("the judge broke")
    return {"reasoning": f"the answer is {answer}", "score": SCORES[answer]}


@pytest.mark.parametrize(
    ("pairs", "value", "passed", "asked"),
    [
        ([("q1", "great")], 5.0, True, 1),
        ([("q1", "good"), ("q2", "useless")], 2.5, False, 2),
        ([("q1", "partial")], 3.0, True, 1),  # the threshold (3) passes
        ([("q1", "good"), ("q2", None), ("q3", "poor")], 3.0, True, 2),  # no answer: not judged
        ([("q1", "poor"), ("q2", "poor"), ("q3", "great")], 3.0, True, 3),
    ],
)
def test_helpfulness_is_the_mean_of_the_turns(
    pairs: list[tuple[str, str | None]], value: float, passed: bool, asked: int
) -> None:
    result = judge(
        {"type": "helpfulness"}, chat(*pairs), lambda s, u: by_answer(u), model=Helpfulness
    )
    score = result.score
    assert score.error is None, score
    assert score.value == value
    assert score.passed is passed
    assert score.threshold == 3.0
    assert result.rounds == [asked]  # every turn asked in the same round
    assert len(result.requests) == asked
    assert [t["turn"] for t in (score.details or {})["turns"]] == [
        i + 1 for i, (_, a) in enumerate(pairs) if a is not None
    ]
    assert "the answer is" in (score.explanation or "")


def test_helpfulness_judges_the_last_answer_with_the_history_before_it() -> None:
    result = judge(
        {"type": "helpfulness"},
        chat(("q1", "great"), ("q2", "poor")),
        lambda s, u: by_answer(u),
        model=Helpfulness,
    )
    first, second = sorted(result.users, key=len)
    assert "## Turn 2" not in first
    assert "ASSISTANT: great" in first
    assert "ASSISTANT: great" in second
    assert second.rstrip().endswith("Turn 2: the last ASSISTANT answer above.")
    assert result.score.value == 3.5


def test_helpfulness_threshold_and_no_answer() -> None:
    strict = judge(
        {"type": "helpfulness", "threshold": 4.5},
        chat(("q", "good")),
        lambda s, u: by_answer(u),
        model=Helpfulness,
    )
    assert strict.score.passed is False
    assert strict.score.threshold == 4.5
    none = judge(
        {"type": "helpfulness"},
        chat(("q1", None), ("q2", None)),
        lambda s, u: by_answer(u),
        model=Helpfulness,
    )
    assert none.score.error == "no assistant answer to judge: helpfulness needs one"
    assert none.requests == []
    assert none.rounds == []


def test_a_failed_turn_fails_the_metric_naming_the_turn() -> None:
    result = judge(
        {"type": "helpfulness"},
        chat(("q1", "great"), ("q2", "BOOM"), ("q3", "good")),
        lambda s, u: by_answer(u),
        model=Helpfulness,
    )
    assert result.score.error is not None
    assert result.score.error.startswith("the judge failed on turn 2:"), result.score.error
    assert result.score.value is None
    assert result.score.passed is None
    assert result.rounds == [3]
    assert result.errors == 1


def test_a_budget_skip_is_the_score_error() -> None:
    result = judge(
        {"type": "helpfulness"},
        chat(("q1", "great"), ("q2", "good")),
        lambda s, u: by_answer(u),
        model=Helpfulness,
        max_calls=0,
    )
    assert result.score.error is not None
    assert result.score.error.startswith("turn 1: ")
    assert "skipped" in (result.score.details or {})
    assert result.requests == []


def test_the_static_instructions_come_first() -> None:
    """Two different conversations send the same first (system) message: prefix caching."""
    results = [
        judge({"type": "helpfulness"}, chat(p), lambda s, u: by_answer(u), model=Helpfulness)
        for p in [("What is my order status?", "good"), ("Cancel it", "poor")]
    ]
    (one,), (two,) = (r.requests for r in results)
    assert one["messages"][0]["role"] == "system"
    assert one["messages"][0] == two["messages"][0]
    assert one["messages"][1] != two["messages"][1]
    assert "# Metric: helpfulness" in one["messages"][0]["content"]
    assert "What is my order status?" in one["messages"][1]["content"]


# --- behaviour failures (ArkSim) --------------------------------------------------------------


def by_label(user: str) -> dict[str, Any]:
    return {"reasoning": f"scripted: {last_answer(user)}", "label": last_answer(user)}


@pytest.mark.parametrize(
    ("labels", "label", "value", "passed"),
    [
        (["no failure"], "no failure", 1.0, True),
        (["no failure", "no failure"], "no failure", 1.0, True),
        (["no failure", "repetition", "false information"], "false information", 1 / 3, False),
        (["repetition", "disobey user request"], "disobey user request", 0.0, False),
        # equal severity (medium): the earliest turn's label
        (
            ["lack of specific information", "failure to ask for clarification"],
            "lack of specific information",
            0.0,
            False,
        ),
        (
            ["failure to ask for clarification", "repetition"],
            "failure to ask for clarification",
            0.0,
            False,
        ),
        (["repetition", "no failure", "no failure", "no failure"], "repetition", 0.75, False),
    ],
)
def test_agent_behavior_failure_takes_the_most_severe_label(
    labels: list[str], label: str, value: float, passed: bool
) -> None:
    t = chat(*((f"q{i}", answer) for i, answer in enumerate(labels)))
    result = judge(
        {"type": "agent_behavior_failure"}, t, lambda s, u: by_label(u), model=AgentBehaviorFailure
    )
    score = result.score
    assert score.error is None, score
    assert (score.label, score.passed) == (label, passed)
    assert score.value == pytest.approx(value)
    assert result.rounds == [len(labels)]
    assert [r["label"] for r in (score.details or {})["turns"]] == labels


def test_agent_behavior_failure_threshold_edge_cases() -> None:
    t = chat(("q1", "repetition"), ("q2", "no failure"), ("q3", None))
    lenient = judge(
        {"type": "agent_behavior_failure", "threshold": 0.5},
        t,
        lambda s, u: by_label(u),
        model=AgentBehaviorFailure,
    )
    assert lenient.score.value == 0.5
    assert lenient.score.passed is True
    assert lenient.score.label == "repetition"
    assert lenient.rounds == [2]  # the turn without an answer is not judged
    none = judge(
        {"type": "agent_behavior_failure"},
        chat(("q1", None)),
        lambda s, u: by_label(u),
        model=AgentBehaviorFailure,
    )
    assert none.score.error is not None
    assert "no assistant answer" in none.score.error


TOOL_LABELS = {"verify_customer": "no failure", "cancel_order": "unsafe action"}  # else: false


def by_tool(user: str) -> dict[str, Any]:
    calls = json.loads(user.split("# Tool calls of turn ", 1)[1].split("\n", 1)[1])
    names = [c["name"] for c in calls]
    labels = [TOOL_LABELS.get(n, "false information") for n in names]
    label = next((x for x in labels if x != "no failure"), "no failure")
    return {"reasoning": f"calls {names}", "label": label}


@pytest.mark.parametrize(
    ("turns", "label", "value", "asked"),
    [
        ([turn(0, "hi", "hello")], "no failure", 1.0, 0),  # no tool call: not judged
        (
            [
                turn(0, "hi", "hello"),
                turn(1, "cancel", "done", call("verify_customer"), call("cancel_order")),
            ],
            "unsafe action",
            0.5,
            1,
        ),
        (
            [
                turn(0, "a", "x", call("invent")),
                turn(1, "b", "y", call("cancel_order")),
                turn(2, "c", "z", call("verify_customer")),
            ],
            "false information",  # critical like unsafe action: the earliest turn's
            1 / 3,
            3,
        ),
        ([], "no failure", 1.0, 0),
    ],
)
def test_tool_call_behavior_failure_judges_turns_with_tool_calls(
    turns: list[Turn], label: str, value: float, asked: int
) -> None:
    result = judge(
        {"type": "tool_call_behavior_failure"},
        conversation(*turns),
        lambda s, u: by_tool(u),
        model=ToolCallBehaviorFailure,
    )
    score = result.score
    assert score.error is None, score
    assert score.label == label
    assert score.value == pytest.approx(value)
    assert score.passed is (label == "no failure")
    assert len(result.requests) == asked
    assert result.rounds == ([asked] if asked else [])
    if not turns:
        assert score.explanation == "No tool calls to evaluate."


def test_tool_call_behavior_failure_shows_the_calls_as_indented_json() -> None:
    result = judge(
        {"type": "tool_call_behavior_failure"},
        conversation(turn(0, "cancel A1", "done", call("cancel_order", {"ok": True}, id="A1"))),
        lambda s, u: by_tool(u),
        model=ToolCallBehaviorFailure,
    )
    (user,) = result.users
    assert '\n  {\n    "arguments": {\n      "id": "A1"\n    },' in user
    assert "# Metric: tool_call_behavior_failure" in result.systems[0]
    assert "unsafe state" in result.systems[0]


# --- task completion (Dokimos) --------------------------------------------------------------


def tasks_verdict(done: list[bool]) -> Verdict:
    def verdict(system: str, user: str) -> dict[str, Any]:
        tasks = re.findall(r"^\d+\. (.*)$", user.split("# Tasks\n", 1)[1], re.MULTILINE)
        return {
            "reasoning": "scripted",
            "tasks": [
                {"task": t, "reasoning": "scripted", "completed": d}
                for t, d in zip(tasks, done, strict=False)
            ],
        }

    return verdict


@pytest.mark.parametrize(
    ("tasks", "done", "value", "passed"),
    [
        (["Search flights", "Book hotel"], [True, True], 1.0, True),
        (["Search flights", "Book hotel"], [True, False], 0.5, True),  # Dokimos: 0.5 passes
        (["Search flights", "Book hotel", "Rent a car"], [True, False, False], 1 / 3, False),
        (["Search flights"], [False], 0.0, False),
    ],
)
def test_task_completion_is_the_share_of_completed_tasks(
    tasks: list[str], done: list[bool], value: float, passed: bool
) -> None:
    t = conversation(turn(0, "Plan my trip", "Booked.", call("search_flights", ["F1"])))
    result = judge(
        {"type": "task_completion", "tasks": tasks}, t, tasks_verdict(done), model=TaskCompletion
    )
    assert result.score.error is None, result.score
    assert result.score.value == pytest.approx(value)
    assert result.score.passed is passed
    assert result.score.threshold == 0.5
    assert len(result.requests) == 1


def test_task_completion_edge_cases() -> None:
    t = chat(("Plan my trip", "Done."))
    empty = judge(
        {"type": "task_completion", "tasks": []}, t, tasks_verdict([]), model=TaskCompletion
    )
    assert (empty.score.value, empty.score.passed, empty.requests) == (1.0, True, [])

    def too_many(system: str, user: str) -> dict[str, Any]:
        entries = [{"task": f"t{i}", "reasoning": "r", "completed": True} for i in range(3)]
        return {"reasoning": "scripted", "tasks": entries}

    capped = judge(
        {"type": "task_completion", "tasks": ["a", "b"], "constraints": "Budget under $500"},
        t,
        too_many,
        model=TaskCompletion,
    )
    assert capped.score.value == 1.0  # min(1, 3 / 2)
    (user,) = capped.users
    assert "# Tasks\n1. a\n2. b" in user
    assert "# Constraints\nBudget under $500" in user


# --- tool argument hallucination (Dokimos) ---------------------------------------------------


def grounding(grounded: Mapping[int, bool], extra: list[dict[str, Any]] | None = None) -> Verdict:
    def verdict(system: str, user: str) -> dict[str, Any]:
        entries = [
            {"index": i, "reasoning": f"call {i}", "grounded": g} for i, g in grounded.items()
        ]
        return {"reasoning": "scripted", "calls": entries + (extra or [])}

    return verdict


TWO_CALLS = conversation(
    turn(
        0,
        "Weather in Paris?",
        "Sunny.",
        call("geocode", {"lat": 48.8}, city="Paris"),
        call("forecast", "sunny", lat=48.8),
    )
)


@pytest.mark.parametrize(
    ("verdicts", "extra", "value", "passed", "missing"),
    [
        ({1: True, 2: True}, None, 1.0, True, []),
        ({1: True, 2: False}, None, 0.5, False, []),
        ({1: True}, None, 0.5, False, [2]),  # no verdict for call 2: not grounded
        ({}, None, 0.0, False, [1, 2]),
        # a duplicate verdict does not count twice; an unknown index is ignored
        ({1: True, 2: True}, [{"index": 2, "reasoning": "x", "grounded": False}], 1.0, True, []),
        ({1: True}, [{"index": 7, "reasoning": "x", "grounded": True}], 0.5, False, [2]),
    ],
)
def test_tool_argument_hallucination_per_call(
    verdicts: dict[int, bool],
    extra: list[dict[str, Any]] | None,
    value: float,
    passed: bool,
    missing: list[int],
) -> None:
    result = judge(
        {"type": "tool_argument_hallucination"},
        TWO_CALLS,
        grounding(verdicts, extra),
        model=ToolArgumentHallucination,
    )
    score = result.score
    assert score.error is None, score
    assert (score.value, score.passed, score.threshold) == (value, passed, 0.8)
    assert (score.details or {})["missing_verdicts"] == missing
    if missing:
        assert "counted as not grounded" in (score.explanation or "")


def test_tool_argument_hallucination_lists_calls_and_results() -> None:
    result = judge(
        {"type": "tool_argument_hallucination"},
        TWO_CALLS,
        grounding({1: True, 2: True}),
        model=ToolArgumentHallucination,
    )
    (user,) = result.users
    assert "# User input\nTurn 1: Weather in Paris?" in user
    assert '1. geocode({"city": "Paris"})  [turn 1]\n   Result: {"lat": 48.8}' in user
    assert '2. forecast({"lat": 48.8})  [turn 1]\n   Result: sunny' in user
    none = judge(
        {"type": "tool_argument_hallucination"},
        chat(("hi", "hello")),
        grounding({}),
        model=ToolArgumentHallucination,
    )
    assert none.score.value == 1.0
    assert none.score.explanation == "No tool calls to evaluate."
    assert none.requests == []


# --- tool selection (the tool-selection tester) ------------------------------------------------

EQUIVALENT = {("location", '"New York"', '"NYC"'), ("units", '"celsius"', '"metric"')}


def equivalence(system: str, user: str) -> dict[str, Any]:
    fields = dict(re.findall(r"^(Parameter to judge|Expected|Actual): (.*)$", user, re.M))
    if "Parameter to judge" in fields:
        key = (fields["Parameter to judge"], fields["Expected"], fields["Actual"])
        return {"reasoning": f"scripted {key[0]}", "equivalent": key in EQUIVALENT}
    expected = re.search(r"^Expected: (.*)$", user, re.M)
    actual = re.search(r"^Actual: (.*)$", user, re.M)
    assert expected
    assert actual
    same = set(expected.group(1).lower().split()) & set(actual.group(1).lower().split())
    return {"reasoning": "scripted text", "equivalent": "cannot" in same}


WEATHER = {"name": "get_weather", "arguments": {"location": "New York", "days": 100}}


@pytest.mark.parametrize(
    ("made", "passed", "asked", "decided_by"),
    [
        (call("get_weather", location="New York", days=100), True, 0, "exact"),
        (call("GET_WEATHER", location=" new york ", days="100.0"), True, 0, "exact"),
        (call("get_forecast", location="New York", days=100), False, 0, "exact"),
        (call("get_weather", location="New York"), False, 0, "exact"),  # missing: fails
        (call("get_weather", location="New York", days=100, units="c"), False, 0, "exact"),
        (call("get_weather", location="NYC", days=100), True, 1, "judge"),
        (call("get_weather", location="Boston", days=100), False, 1, "judge"),
        (call("get_weather", location="NYC", days=101), False, 2, "judge"),  # numbers judged too
    ],
)
def test_tool_selection_call(made: ToolCall, passed: bool, asked: int, decided_by: str) -> None:
    result = judge(
        {"type": "tool_selection", "category": "tool_selection", "expected_call": WEATHER},
        conversation(turn(0, "Weather in New York for 100 days?", None, made)),
        equivalence,
        model=ToolSelection,
    )
    score = result.score
    assert score.error is None, score
    assert (score.passed, score.value) == (passed, float(passed))
    assert (score.details or {})["decided_by"] == decided_by
    assert len(result.requests) == asked
    assert result.rounds == ([asked] if asked else [])
    if asked:
        assert "(function call)" in result.systems[0]


def test_tool_selection_call_without_a_call() -> None:
    result = judge(
        {"type": "tool_selection", "category": "tool_selection", "expected_call": WEATHER},
        chat(("Weather?", "It is sunny.")),
        equivalence,
        model=ToolSelection,
    )
    assert result.score.passed is False
    assert result.requests == []


@pytest.mark.parametrize(
    ("category", "answer", "calls", "passed", "asked"),
    [
        ("not_supported", "I cannot turn on your lights.", [], True, 1),
        ("not_supported", "Lights are on!", [], False, 1),
        ("not_supported", "  sorry, i CANNOT do that. ", [], True, 0),  # exact, any case
        ("no_tool", "Paris.", [call("search")], False, 0),  # any tool call fails
        ("clarifying", "Which city? I cannot guess.", [], True, 1),
        ("error", "That date cannot exist.", [], True, 1),
        ("no_tool", None, [], False, 0),
    ],
)
def test_tool_selection_text(
    category: str, answer: str | None, calls: list[ToolCall], passed: bool, asked: int
) -> None:
    result = judge(
        {
            "type": "tool_selection",
            "category": category,
            "expected_response": "Sorry, I cannot do that.",
        },
        conversation(turn(0, "Turn on the lights", answer, *calls)),
        equivalence,
        model=ToolSelection,
    )
    assert result.score.error is None, result.score
    assert result.score.passed is passed
    assert len(result.requests) == asked
    if asked:
        title = category.replace("_", " ")
        assert f"# Metric: tool_selection ({title})" in result.systems[0]


def test_tool_selection_validation_and_exact_values() -> None:
    with pytest.raises(ValidationError, match="needs expected_call"):
        ToolSelection.model_validate({"type": "tool_selection", "category": "tool_selection"})
    with pytest.raises(ValidationError, match="needs expected_response"):
        ToolSelection.model_validate({"type": "tool_selection", "category": "error"})
    with pytest.raises(ValidationError, match="no expected_call"):
        ToolSelection.model_validate(
            {
                "type": "tool_selection",
                "category": "no_tool",
                "expected_response": "x",
                "expected_call": WEATHER,
            }
        )
    assert same_value(100, "100.0")
    assert same_value(0.1 + 0.2, 0.3)
    assert same_value(" Paris ", "paris")
    assert not same_value(1, 1.001)
    assert not same_value("Paris", "Paris, France")


# --- trajectory judge -----------------------------------------------------------------------


def by_reference(system: str, user: str) -> dict[str, Any]:
    has_reference = "# Reference trajectory" in user
    score = 4 if "get_order" in user.split("# Transcript", 1)[1] else 2
    return {"reasoning": f"reference shown: {has_reference}", "score": score}


@pytest.mark.parametrize("reference", [None, [{"name": "get_order", "arguments": {"id": "A1"}}]])
@pytest.mark.parametrize(("made", "value"), [("get_order", 4.0), ("cancel_order", 2.0)])
def test_trajectory_judge(reference: list[dict[str, Any]] | None, made: str, value: float) -> None:
    doc: dict[str, Any] = {"type": "trajectory_judge"}
    if reference is not None:
        doc["reference"] = reference
    result = judge(
        doc,
        conversation(turn(0, "Where is A1?", "On its way.", call(made, "ok", id="A1"))),
        by_reference,
        model=TrajectoryJudge,
    )
    score = result.score
    assert (score.value, score.passed, score.threshold) == (value, value >= 3, 3.0)
    assert score.explanation == f"reference shown: {reference is not None}"
    (system,), (user,) = result.systems, result.users
    assert ("reference trajectory" in system) is (reference is not None)
    if reference is not None:
        assert '# Reference trajectory\n1. get_order({"id": "A1"})' in user


# --- tool name and description semantics (Dokimos) --------------------------------------------

PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name"}},
    "required": ["city"],
}
TOOLS = [
    {"name": "get_weather", "description": "Get the weather.", "parameters": PARAMS},
    {"name": "fetch_data_via_api", "description": "Fetch.", "parameters": PARAMS},
]


def name_checks(system: str, user: str) -> dict[str, Any]:
    tool = json.loads(user.split("# Tool\n", 1)[1])
    if tool["name"] == "BOOM_tool":
        raise RuntimeError("the judge broke")
    good = tool["name"] == "get_weather"
    return {
        "reasoning": f"scripted {tool['name']}",
        "clarity": good,
        "name_order": True,
        "intent_over_implementation": True,  # the blocklist still fails `_via_api`
    }


def test_tool_name_semantics_combines_rules_and_llm() -> None:
    result = judge(
        {"type": "tool_name_semantics"},
        chat(("hi", "hello")),
        name_checks,
        model=ToolNameSemantics,
        tools=TOOLS,
    )
    score = result.score
    assert score.error is None, score
    per_tool = {t["tool"]: t for t in (score.details or {})["tools"]}
    assert per_tool["get_weather"]["score"] == 1.0
    assert per_tool["fetch_data_via_api"]["checks"] == {
        "snakecase_format": True,
        "conciseness": True,
        "intent_over_implementation": False,  # blocklist AND LLM
        "clarity": False,
        "name_order": True,
    }
    assert per_tool["fetch_data_via_api"]["score"] == 0.6
    assert (score.value, score.passed, score.threshold) == (0.8, True, 0.8)
    assert result.rounds == [2]  # one question per tool, one round


@pytest.mark.parametrize(
    ("fails", "value"), [((), 1.0), (("has_examples", "has_usage_notes", "redundancy"), 10 / 13)]
)
def test_tool_description_semantics_thirteen_checks(fails: tuple[str, ...], value: float) -> None:
    def verdict(system: str, user: str) -> dict[str, Any]:
        checks = {k: k not in fails for k in DESCRIPTION_KEYS}
        return {"reasoning": "scripted", **checks}

    result = judge(
        {"type": "tool_description_semantics"},
        chat(("hi", "hello")),
        verdict,
        model=ToolDescriptionSemantics,
        tools=TOOLS[:1],
    )
    score = result.score
    assert score.error is None, score
    (tool,) = (score.details or {})["tools"]
    assert len(tool["checks"]) == 13
    assert score.value == pytest.approx(value)
    assert score.passed is (value >= 0.8)


DESCRIPTION_KEYS = (
    "general_structure",
    "has_examples",
    "has_usage_notes",
    "intent_over_implementation",
    "clarity",
    "redundancy",
    "input_arguments_enum",
    "input_arguments_format",
    "return_statement_quality",
)


def test_tool_semantics_edge_cases() -> None:
    # no tools offered (an empty definition list): 1.0 without asking
    empty = judge(
        {"type": "tool_name_semantics"},
        conversation(turn(0, "hi", "hello"), tools=[]),
        name_checks,
        model=ToolNameSemantics,
    )
    assert (empty.score.value, empty.score.passed, empty.requests) == (1.0, True, [])
    # no definitions at all: an error, as tool_name_reliability
    unknown = judge(
        {"type": "tool_name_semantics"}, chat(("hi", "hello")), name_checks, model=ToolNameSemantics
    )
    assert unknown.score.error is not None
    assert "no tool definitions" in unknown.score.error
    # one tool's question failed: the metric fails, naming the tool
    broken = judge(
        {"type": "tool_name_semantics"},
        chat(("hi", "hello")),
        name_checks,
        model=ToolNameSemantics,
        tools=[*TOOLS, {"name": "BOOM_tool", "description": "x"}],
    )
    assert broken.score.error is not None
    assert broken.score.error.startswith("the judge failed on tool BOOM_tool:")
    assert broken.rounds == [3]
    # a missing key in the answer fails that check
    checks = combine_checks(
        {"snakecase_format": True, "intent_over_implementation": True},
        {"clarity": True, "intent_over_implementation": "yes"},
        ("clarity", "name_order", "intent_over_implementation"),
    )
    assert checks == {
        "snakecase_format": True,
        "intent_over_implementation": False,
        "clarity": True,
        "name_order": False,
    }
