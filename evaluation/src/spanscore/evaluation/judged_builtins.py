"""The built-in LLM-judged metrics: the judgements of ArkSim, Dokimos, the tool-selection
tester and agentevals, with those systems' documented semantics (`docs/judged-metrics.md`
gives every rule, formula, edge case and deliberate difference).

- per turn (one judge request per judged turn, all asked in the same round): `helpfulness`,
  `agent_behavior_failure`, `tool_call_behavior_failure` (ArkSim);
- per conversation: `task_completion`, `tool_argument_hallucination` (Dokimos),
  `tool_selection` (the tool-selection tester's semantic judge, after its exact check),
  `trajectory_judge` (agentevals' trajectory judge, scored 1-5);
- per tool offered: `tool_name_semantics`, `tool_description_semantics` (Dokimos' LLM checks,
  combined with the rule-based checks of `tool_name_reliability` /
  `tool_description_reliability`).

Every prompt is a package file (`prompts/*.txt`): its static part (the instructions) is the
system message, the conversation the user message. A metric that asks several questions fails
as a whole when one of them fails: its error names the turn, call or tool whose answer is
missing.
"""

from __future__ import annotations

import json
import math
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from .judge import JudgeAnswer, JudgeRequest
from .judged import JudgedAssertion, conversation_message, prompt
from .judging import JudgePending, current_session, render_tools
from .metrics import (
    _NO_TOOLS,
    ToolDescriptionReliability,
    ToolNameReliability,
    _no_tools_offered,
)
from .scoring import EvalContext, Score, ToolSpec
from .trajectory import ToolCall, Trajectory, Turn

K = TypeVar("K")

# --- shared machinery ------------------------------------------------------------------------


def _schema(properties: Mapping[str, Any]) -> dict[str, Any]:
    """A closed object schema whose every property is required (in the given order)."""
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(properties),
        "additionalProperties": False,
    }


_REASONING = {"type": "string"}
_EQUIVALENT = _schema({"reasoning": _REASONING, "equivalent": {"type": "boolean"}})


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 20] + f"... [{len(text) - limit} more]"


def _upto(trajectory: Trajectory, index: int) -> Trajectory:
    """The conversation up to and including turn `index` (the judge's chat history)."""
    return Trajectory(
        conversation_id=trajectory.conversation_id,
        agent_name=trajectory.agent_name,
        turns=trajectory.turns[: index + 1],
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _failed(what: str, answer: JudgeAnswer, **details: Any) -> Score:
    """The score of a metric one of whose questions the judge could not answer."""
    if answer.skipped is not None:
        return Score(
            error=f"{what}: {answer.skipped}", details={"skipped": answer.skipped, **details}
        )
    return Score.failed_with(f"the judge failed on {what}: {answer.error}", **details)


class _Judged(JudgedAssertion):
    """A judged metric that may ask several questions in one evaluation."""

    def request(
        self,
        purpose: str,
        instructions: str,
        message: str,
        schema: Mapping[str, Any],
        version: str,
    ) -> JudgeRequest:
        """The question `JudgedAssertion.ask` would send (the same digest, so the same cache
        entry)."""
        return JudgeRequest(
            kind="chat",
            purpose=purpose,
            messages=(("system", instructions), ("user", message)),
            schema_name=purpose.replace("-", "_")[:60] or "verdict",
            schema=schema,
            prompt_version=version,
        )

    def ask_each(self, requests: Mapping[K, JudgeRequest]) -> dict[K, JudgeAnswer]:
        """The answers (failed ones included) of every question. Each question the session
        cannot answer yet is recorded before `JudgePending` is raised, so that all of them are
        asked in the same round."""
        session = current_session()
        if session is None:
            raise RuntimeError("a judged metric is scored outside a judge session")
        answers = {key: session.lookup(request) for key, request in requests.items()}
        if any(answer is None for answer in answers.values()):
            raise JudgePending()
        return {key: answer for key, answer in answers.items() if answer is not None}


def _verdict(answer: JudgeAnswer) -> dict[str, Any]:
    value = answer.value
    return value if isinstance(value, dict) else {}


# --- ArkSim: helpfulness, per turn ---------------------------------------------------------


def _focus(turn: Turn) -> str:
    return f"\n\n# Turn to judge\nTurn {turn.index + 1}: the last ASSISTANT answer above."


class Helpfulness(_Judged):
    """ArkSim's helpfulness: each turn's assistant answer scored 1-5 by the judge given the
    chat history up to it; the value is the mean over the turns with an answer (1-5 scale)."""

    type: Literal["helpfulness"]
    threshold: float | None = Field(
        3.0, ge=1, le=5, description="pass when the mean is at least this (ArkSim: 0.6 x 5 = 3)"
    )

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        turns = [t for t in trajectory.turns if t.final_response is not None]
        if not turns:
            return Score.failed_with("no assistant answer to judge: helpfulness needs one")
        template, version = prompt("helpfulness")
        schema = _schema(
            {"reasoning": _REASONING, "score": {"type": "integer", "enum": [1, 2, 3, 4, 5]}}
        )
        instructions = template.substitute()
        requests = {
            turn.index: self.request(
                self.metric_name,
                instructions,
                conversation_message(_upto(trajectory, turn.index), self.max_value_chars)
                + _focus(turn),
                schema,
                version,
            )
            for turn in turns
        }
        answers = self.ask_each(requests)
        per_turn: list[dict[str, Any]] = []
        for turn in turns:
            answer = answers[turn.index]
            if not answer.ok:
                return _failed(f"turn {turn.index + 1}", answer, turn=turn.index + 1)
            verdict = _verdict(answer)
            per_turn.append(
                {
                    "turn": turn.index + 1,
                    "score": int(verdict["score"]),
                    "reasoning": str(verdict.get("reasoning") or ""),
                }
            )
        value = sum(t["score"] for t in per_turn) / len(per_turn)
        threshold = self.threshold if self.threshold is not None else 3.0
        explanation = f"Mean helpfulness {value:.2f}/5 over {_plural(len(per_turn), 'turn')}. "
        explanation += " ".join(
            f"Turn {t['turn']} ({t['score']}/5): {t['reasoning']}" for t in per_turn
        )
        return Score(
            value=value,
            passed=value >= threshold,
            threshold=threshold,
            explanation=explanation.strip(),
            details={"turns": per_turn, "scale": [1, 5]},
        )


# --- ArkSim: behaviour failures, per turn --------------------------------------------------

NO_FAILURE = "no failure"


class _BehaviorFailure(_Judged):
    """A label per judged turn; the conversation's label is the most severe one, its value the
    share of labelled turns without failure."""

    PROMPT: ClassVar[str]
    SEVERITY: ClassVar[dict[str, int]]  # label -> severity (higher: worse; no failure: 0)

    threshold: float | None = Field(
        None,
        ge=0,
        le=1,
        description="pass when the share of turns without failure is at least this "
        "(default: every turn without failure)",
    )

    def labels(self) -> list[str]:
        return list(self.SEVERITY)

    @abstractmethod
    def judged_turns(self, trajectory: Trajectory) -> list[Turn]:
        """The turns the judge is asked about."""

    def unjudged(self, trajectory: Trajectory) -> list[Turn]:
        """Turns that get `no failure` without asking."""
        return []

    def message(self, trajectory: Trajectory, turn: Turn) -> str:
        return conversation_message(_upto(trajectory, turn.index), self.max_value_chars) + _focus(
            turn
        )

    @abstractmethod
    def nothing_to_judge(self) -> Score:
        """The score of a conversation with no turn to judge."""

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        turns = self.judged_turns(trajectory)
        free = self.unjudged(trajectory)
        if not turns and not free:
            return self.nothing_to_judge()
        template, version = prompt(self.PROMPT)
        schema = _schema(
            {"reasoning": _REASONING, "label": {"type": "string", "enum": self.labels()}}
        )
        instructions = template.substitute()
        requests = {
            turn.index: self.request(
                self.metric_name, instructions, self.message(trajectory, turn), schema, version
            )
            for turn in turns
        }
        answers = self.ask_each(requests)
        per_turn: dict[int, dict[str, Any]] = {
            t.index: {"turn": t.index + 1, "label": NO_FAILURE, "judged": False} for t in free
        }
        for turn in turns:
            answer = answers[turn.index]
            if not answer.ok:
                return _failed(f"turn {turn.index + 1}", answer, turn=turn.index + 1)
            verdict = _verdict(answer)
            per_turn[turn.index] = {
                "turn": turn.index + 1,
                "label": str(verdict["label"]),
                "reasoning": str(verdict.get("reasoning") or ""),
                "judged": True,
            }
        rows = [per_turn[i] for i in sorted(per_turn)]
        failures = [r for r in rows if r["label"] != NO_FAILURE]
        worst = NO_FAILURE
        for row in failures:  # the first turn of the highest severity
            if self.SEVERITY.get(row["label"], 0) > self.SEVERITY[worst]:
                worst = row["label"]
        value = (len(rows) - len(failures)) / len(rows)
        passed = not failures if self.threshold is None else value >= self.threshold
        if failures:
            explanation = (
                f"{_plural(len(failures), 'turn')} of {len(rows)} failed; most severe: {worst}. "
                + " ".join(
                    f"Turn {r['turn']} ({r['label']}): {r.get('reasoning', '')}".strip()
                    for r in failures
                )
            )
        else:
            explanation = f"No failure in {_plural(len(rows), 'turn')}."
            judged = [r for r in rows if r["judged"]]
            if judged:
                explanation += " " + " ".join(
                    f"Turn {r['turn']}: {r['reasoning']}" for r in judged if r["reasoning"]
                )
        return Score(
            value=value,
            label=worst,
            passed=passed,
            threshold=self.threshold,
            explanation=explanation.strip(),
            details={"turns": rows, "severity": self.SEVERITY},
        )


class AgentBehaviorFailure(_BehaviorFailure):
    """ArkSim's agent behaviour failure: each turn's assistant answer labelled (no failure,
    failure to ask for clarification, repetition, disobey user request, lack of specific
    information, false information). Every turn with an answer is judged."""

    type: Literal["agent_behavior_failure"]
    PROMPT: ClassVar[str] = "agent_behavior_failure"
    SEVERITY: ClassVar[dict[str, int]] = {
        NO_FAILURE: 0,
        "failure to ask for clarification": 2,
        "repetition": 1,
        "disobey user request": 3,
        "lack of specific information": 2,
        "false information": 4,
    }

    def judged_turns(self, trajectory: Trajectory) -> list[Turn]:
        return [t for t in trajectory.turns if t.final_response is not None]

    def nothing_to_judge(self) -> Score:
        return Score.failed_with("no assistant answer to judge: agent_behavior_failure needs one")


def _calls_json(calls: Sequence[ToolCall], limit: int) -> str:
    def clipped(value: Any) -> Any:
        if value is None or isinstance(value, bool | int | float):
            return value
        text = value if isinstance(value, str) else _json(value)
        return value if len(text) <= limit else _clip(text, limit)

    return json.dumps(
        [
            {
                "name": c.name,
                "arguments": clipped(c.arguments),
                "result": clipped(c.result),
                "error": c.error,
                **({"parallel_group": c.parallel_group} if c.parallel_group else {}),
            }
            for c in calls
        ],
        indent=2,
        sort_keys=True,
        default=str,
        ensure_ascii=False,
    )


class ToolCallBehaviorFailure(_BehaviorFailure):
    """ArkSim's tool-call behaviour failure: each turn with tool calls labelled over six
    dimensions (selection, parameters, necessity, result usage, safety, response integrity);
    a turn without tool calls is `no failure` without asking."""

    type: Literal["tool_call_behavior_failure"]
    PROMPT: ClassVar[str] = "tool_call_behavior_failure"
    SEVERITY: ClassVar[dict[str, int]] = {
        NO_FAILURE: 0,
        "disobey user request": 3,
        "lack of specific information": 2,
        "failure to ask for clarification": 2,
        "false information": 4,
        "repetition": 1,
        "unsafe action": 4,
        "unsafe state": 4,
    }

    def judged_turns(self, trajectory: Trajectory) -> list[Turn]:
        return [t for t in trajectory.turns if t.tool_calls]

    def unjudged(self, trajectory: Trajectory) -> list[Turn]:
        return [t for t in trajectory.turns if not t.tool_calls]

    def message(self, trajectory: Trajectory, turn: Turn) -> str:
        return (
            conversation_message(_upto(trajectory, turn.index), self.max_value_chars)
            + f"\n\n# Turn to judge\nTurn {turn.index + 1}: its tool calls, listed below."
            + f"\n\n# Tool calls of turn {turn.index + 1}\n"
            + _calls_json(turn.tool_calls, self.max_value_chars)
        )

    def nothing_to_judge(self) -> Score:
        return Score(
            value=1.0,
            label=NO_FAILURE,
            passed=True,
            threshold=self.threshold,
            explanation="No tool calls to evaluate.",
            details={"turns": [], "severity": self.SEVERITY},
        )


# --- Dokimos: task completion, tool argument hallucination -----------------------------------


class TaskCompletion(_Judged):
    """Dokimos TaskCompletionEvaluator: the judge reads the dialog and the numbered task list
    (and the constraints) and says which tasks were completed; value = completed / tasks."""

    type: Literal["task_completion"]
    tasks: list[str] = Field(description="what the agent had to do, one task an entry")
    constraints: str | None = Field(None, description="conditions the tasks must respect")
    threshold: float | None = Field(
        0.5, ge=0, le=1, description="pass when the value is at least this (Dokimos: 0.5)"
    )

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        threshold = self.threshold if self.threshold is not None else 0.5
        if not self.tasks:
            return Score(
                value=1.0,
                passed=True,
                threshold=threshold,
                explanation="No tasks to evaluate.",
                details={"tasks": []},
            )
        template, version = prompt("task_completion")
        item = _schema(
            {"task": {"type": "string"}, "reasoning": _REASONING, "completed": {"type": "boolean"}}
        )
        schema = _schema({"reasoning": _REASONING, "tasks": {"type": "array", "items": item}})
        extra = "# Tasks\n" + "\n".join(f"{i}. {t}" for i, t in enumerate(self.tasks, start=1))
        if self.constraints:
            extra += f"\n\n# Constraints\n{self.constraints}"
        verdict = self.ask(
            self.metric_name,
            template.substitute(),
            conversation_message(trajectory, self.max_value_chars, extra=extra),
            schema,
            version,
        )
        entries = [e for e in verdict.get("tasks") or [] if isinstance(e, dict)]
        completed = sum(1 for e in entries if e.get("completed") is True)
        value = min(1.0, completed / len(self.tasks))
        missed = [e for e in entries if e.get("completed") is not True]
        explanation = f"{completed} of {_plural(len(self.tasks), 'task')} completed."
        if missed:
            explanation += " Not completed: " + "; ".join(
                f"{e.get('task')}: {e.get('reasoning', '')}" for e in missed
            )
        return Score(
            value=value,
            passed=value >= threshold,
            threshold=threshold,
            explanation=explanation,
            details={"verdict": verdict, "completed": completed, "tasks": len(self.tasks)},
        )


class ToolArgumentHallucination(_Judged):
    """Dokimos ToolArgumentHallucinationEvaluator: each tool call's argument values must be
    derivable from the user's input or the results of the calls before it; value = grounded
    calls / calls (1.0 without calls)."""

    type: Literal["tool_argument_hallucination"]
    threshold: float | None = Field(
        0.8, ge=0, le=1, description="pass when the value is at least this (Dokimos: 0.8)"
    )

    def message(self, trajectory: Trajectory) -> str:
        limit = self.max_value_chars
        lines = ["# User input"]
        for turn in trajectory.turns:
            if turn.user_message is not None:
                lines.append(f"Turn {turn.index + 1}: {_clip(turn.user_message, 4 * limit)}")
        lines += ["", "# Tool calls, in order"]
        number = 0
        for turn in trajectory.turns:
            for call in turn.tool_calls:
                number += 1
                arguments = _clip(_json({} if call.arguments is None else call.arguments), limit)
                lines.append(f"{number}. {call.name}({arguments})  [turn {turn.index + 1}]")
                if call.error is not None:
                    lines.append(f"   Error: {_clip(call.error, limit)}")
                else:
                    result = call.result
                    shown = result if isinstance(result, str) else _json(result)
                    lines.append(f"   Result: {_clip(shown, limit)}")
        return "\n".join(lines)

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        threshold = self.threshold if self.threshold is not None else 0.8
        calls = trajectory.tool_calls
        if not calls:
            return Score(
                value=1.0,
                passed=True,
                threshold=threshold,
                explanation="No tool calls to evaluate.",
                details={"calls": []},
            )
        template, version = prompt("tool_argument_hallucination")
        item = _schema(
            {"index": {"type": "integer"}, "reasoning": _REASONING, "grounded": {"type": "boolean"}}
        )
        schema = _schema({"reasoning": _REASONING, "calls": {"type": "array", "items": item}})
        verdict = self.ask(
            self.metric_name, template.substitute(), self.message(trajectory), schema, version
        )
        by_index: dict[int, dict[str, Any]] = {}
        for entry in verdict.get("calls") or []:
            if isinstance(entry, dict) and isinstance(entry.get("index"), int):
                by_index.setdefault(entry["index"], entry)  # the first verdict of a call counts
        rows: list[dict[str, Any]] = []
        for number, call in enumerate(calls, start=1):
            entry = by_index.get(number)
            rows.append(
                {
                    "index": number,
                    "name": call.name,
                    "grounded": bool(entry is not None and entry.get("grounded") is True),
                    "reasoning": str(entry.get("reasoning") or "") if entry else "",
                    **({"missing_verdict": True} if entry is None else {}),
                }
            )
        grounded = sum(1 for r in rows if r["grounded"])
        value = grounded / len(calls)
        missing = [r["index"] for r in rows if r.get("missing_verdict")]
        bad = [r for r in rows if not r["grounded"] and not r.get("missing_verdict")]
        explanation = f"Grounded arguments in {grounded} of {_plural(len(calls), 'tool call')}."
        if bad:
            explanation += " Hallucinated: " + "; ".join(
                f"{r['index']}. {r['name']}: {r['reasoning']}" for r in bad
            )
        if missing:
            explanation += (
                f" The judge gave no verdict for call(s) {', '.join(map(str, missing))}: "
                "counted as not grounded."
            )
        return Score(
            value=value,
            passed=value >= threshold,
            threshold=threshold,
            explanation=explanation,
            details={"calls": rows, "missing_verdicts": missing, "verdict": verdict},
        )


# --- the tool-selection tester's semantic judge ----------------------------------------------


class CallSpec(BaseModel):
    """A tool call: its name and arguments."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(validation_alias=AliasChoices("name", "tool"), description="tool name")
    arguments: dict[str, Any] = Field(default_factory=dict, description="argument values")

    def shown(self) -> str:
        return f"{self.name}({_json(self.arguments)})"


def same_value(expected: Any, actual: Any) -> bool:
    """The tester's exact check of one value: equal as floats (within 1e-10), else equal as
    stripped, lower-cased text."""
    try:
        return math.isclose(float(expected), float(actual), rel_tol=0.0, abs_tol=1e-10)
    except (TypeError, ValueError, OverflowError):
        pass
    return str(expected).strip().lower() == str(actual).strip().lower()


TOOL_SELECTION_PROMPTS = {
    "tool_selection": "tool_selection_call",
    "clarifying": "tool_selection_clarifying",
    "error": "tool_selection_error",
    "no_tool": "tool_selection_no_tool",
    "not_supported": "tool_selection_not_supported",
}


class ToolSelection(_Judged):
    """The tool-selection tester: the model's function call (category `tool_selection`) or
    text answer (the other categories) against the expected one, exact check first, then the
    category's semantic judge. Value 1 or 0."""

    type: Literal["tool_selection"]
    category: Literal["tool_selection", "clarifying", "error", "no_tool", "not_supported"] = Field(
        description="tool_selection: an expected call; clarifying, error, no_tool, "
        "not_supported: an expected text answer and no tool call"
    )
    expected_call: CallSpec | None = Field(None, description="category tool_selection")
    expected_response: str | None = Field(None, description="the other categories")

    @model_validator(mode="after")
    def _expected(self) -> ToolSelection:
        if self.category == "tool_selection":
            if self.expected_call is None:
                raise ValueError("category tool_selection needs expected_call")
            if self.expected_response is not None:
                raise ValueError("category tool_selection compares a call: no expected_response")
        else:
            if self.expected_response is None:
                raise ValueError(f"category {self.category} needs expected_response")
            if self.expected_call is not None:
                raise ValueError(f"category {self.category} expects no tool call: no expected_call")
        return self

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        if self.expected_call is not None:
            return self._call(trajectory, self.expected_call)
        return self._text(trajectory, self.expected_response or "")

    def _result(self, passed: bool, explanation: str, **details: Any) -> Score:
        return Score(
            value=1.0 if passed else 0.0,
            passed=passed,
            explanation=explanation,
            details={"category": self.category, **details},
        )

    def _query(self, trajectory: Trajectory) -> str:
        return f"User query: {trajectory.first_user_message or '(none recorded)'}"

    def _call(self, trajectory: Trajectory, expected: CallSpec) -> Score:
        calls = trajectory.tool_calls
        if not calls:
            return self._result(
                False, f"No tool call; expected {expected.shown()}.", decided_by="exact"
            )
        made = calls[0]
        actual = CallSpec(
            name=made.name, arguments=made.arguments if isinstance(made.arguments, dict) else {}
        )
        details: dict[str, Any] = {"expected": expected.shown(), "actual": actual.shown()}
        if len(calls) > 1:
            details["not_judged"] = [c.name for c in calls[1:]]
        if made.name.lower() != expected.name.lower():
            return self._result(
                False,
                f"Called {made.name}, expected {expected.name}.",
                decided_by="exact",
                **details,
            )
        missing = sorted(set(expected.arguments) - set(actual.arguments))
        unexpected = sorted(set(actual.arguments) - set(expected.arguments))
        if missing or unexpected:
            parts = []
            if missing:
                parts.append(f"missing {', '.join(missing)}")
            if unexpected:
                parts.append(f"unexpected {', '.join(unexpected)}")
            return self._result(
                False,
                f"{made.name}: {'; '.join(parts)}.",
                decided_by="exact",
                missing=missing,
                unexpected=unexpected,
                **details,
            )
        differing = [
            k
            for k in expected.arguments
            if not same_value(expected.arguments[k], actual.arguments[k])
        ]
        if not differing:
            return self._result(
                True, f"{made.name} matches exactly.", decided_by="exact", **details
            )
        template, version = prompt(TOOL_SELECTION_PROMPTS["tool_selection"])
        instructions = template.substitute()
        head = (
            f"{self._query(trajectory)}\nExpected call: {expected.shown()}\n"
            f"Actual call: {actual.shown()}\n"
        )
        requests = {
            key: self.request(
                self.metric_name,
                instructions,
                head
                + f"Parameter to judge: {key}\n"
                + f"Expected: {_json(expected.arguments[key])}\n"
                + f"Actual: {_json(actual.arguments[key])}",
                _EQUIVALENT,
                version,
            )
            for key in differing
        }
        answers = self.ask_each(requests)
        verdicts: dict[str, Any] = {}
        for key in differing:
            answer = answers[key]
            if not answer.ok:
                return _failed(f"argument {key}", answer, argument=key)
            verdicts[key] = _verdict(answer)
        different = [k for k in differing if verdicts[k].get("equivalent") is not True]
        passed = not different
        reasons = " ".join(
            f"{k}: {verdicts[k].get('reasoning', '')}" for k in (different or differing)
        )
        explanation = (
            f"{made.name}: the judge found {', '.join(differing)} equivalent. {reasons}"
            if passed
            else f"{made.name}: the judge found {', '.join(different)} different. {reasons}"
        )
        return self._result(
            passed, explanation.strip(), decided_by="judge", verdicts=verdicts, **details
        )

    def _text(self, trajectory: Trajectory, expected: str) -> Score:
        calls = trajectory.tool_calls
        if calls:
            return self._result(
                False,
                f"Called {calls[0].name}; category {self.category} expects no tool call.",
                decided_by="exact",
                calls=[c.name for c in calls],
            )
        actual = trajectory.final_response
        if actual is None:
            return self._result(False, "No answer to compare.", decided_by="exact")
        details = {"expected": expected, "actual": actual}
        if actual.strip().lower() == expected.strip().lower():
            return self._result(True, "The answer matches exactly.", decided_by="exact", **details)
        template, version = prompt(TOOL_SELECTION_PROMPTS[self.category])
        verdict = self.ask(
            self.metric_name,
            template.substitute(),
            f"{self._query(trajectory)}\nExpected: {expected}\nActual: {actual}",
            _EQUIVALENT,
            version,
        )
        passed = verdict.get("equivalent") is True
        return self._result(
            passed,
            str(verdict.get("reasoning") or ""),
            decided_by="judge",
            verdict=verdict,
            **details,
        )


# --- agentevals-like trajectory judge ----------------------------------------------------------


class TrajectoryJudge(_Judged):
    """The judge rates the whole trajectory's tool use for the user's goal, 1-5, against a
    reference trajectory when one is given."""

    type: Literal["trajectory_judge"]
    reference: list[CallSpec] | None = Field(
        None, description="a known-good sequence of calls (order may differ when independent)"
    )
    threshold: float | None = Field(
        3.0, ge=1, le=5, description="pass when the score is at least this"
    )

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        with_reference = self.reference is not None
        template, version = prompt(
            "trajectory_judge_reference" if with_reference else "trajectory_judge"
        )
        schema = _schema(
            {"reasoning": _REASONING, "score": {"type": "integer", "enum": [1, 2, 3, 4, 5]}}
        )
        extra = ""
        tools = context.tool_specs(trajectory)
        if tools:
            extra += "# Tools offered\n" + render_tools(tools) + "\n\n"
        if self.reference is not None:
            extra += "# Reference trajectory\n" + (
                "\n".join(f"{i}. {c.shown()}" for i, c in enumerate(self.reference, start=1))
                or "(no tool calls)"
            )
        verdict = self.ask(
            self.metric_name,
            template.substitute(),
            conversation_message(trajectory, self.max_value_chars, extra=extra),
            schema,
            version,
        )
        value = float(verdict["score"])
        threshold = self.threshold if self.threshold is not None else 3.0
        return Score(
            value=value,
            passed=value >= threshold,
            threshold=threshold,
            explanation=str(verdict.get("reasoning") or ""),
            details={"verdict": verdict, "scale": [1, 5], "reference": with_reference},
        )


# --- Dokimos: tool name and description LLM checks, per tool ---------------------------------

NAME_CHECKS = ("clarity", "name_order", "intent_over_implementation")
DESCRIPTION_CHECKS = (
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


def combine_checks(
    rules: Mapping[str, bool], verdict: Mapping[str, Any], llm: Sequence[str]
) -> dict[str, bool]:
    """Dokimos' combination of one tool's checks: the rule-based ones, then the LLM ones (a
    missing or non-true answer fails); a check both run (intent_over_implementation for names)
    passes when both pass."""
    checks = dict(rules)
    for key in llm:
        passed = verdict.get(key) is True
        checks[key] = checks[key] and passed if key in checks else passed
    return checks


class _ToolSemantics(_Judged):
    PROMPT: ClassVar[str]
    LLM_CHECKS: ClassVar[tuple[str, ...]]

    threshold: float | None = Field(
        0.8, ge=0, le=1, description="pass when the value is at least this (Dokimos: 0.8)"
    )
    tools: list[str] | None = Field(
        None, description="only these tools (default: every tool offered: catalog + recorded)"
    )

    @abstractmethod
    def rules(self) -> ToolNameReliability | ToolDescriptionReliability:
        """The rule-based checks this metric completes."""

    def message(self, tool: ToolSpec) -> str:
        shown = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
        return "# Tool\n" + json.dumps(shown, indent=2, sort_keys=True, ensure_ascii=False)

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        rules = self.rules()
        if _no_tools_offered(trajectory, context):
            return Score.failed_with(_NO_TOOLS)
        offered = rules.offered(trajectory, context)
        threshold = self.threshold if self.threshold is not None else 0.8
        if not offered:
            return Score(
                value=1.0,
                passed=True,
                threshold=threshold,
                explanation="No tools to evaluate.",
                details={"tools": []},
            )
        template, version = prompt(self.PROMPT)
        schema = _schema(
            {"reasoning": _REASONING, **{k: {"type": "boolean"} for k in self.LLM_CHECKS}}
        )
        instructions = template.substitute()
        requests = {
            tool.name: self.request(
                self.metric_name, instructions, self.message(tool), schema, version
            )
            for tool in offered
        }
        answers = self.ask_each(requests)
        per_tool: list[dict[str, Any]] = []
        for tool in offered:
            answer = answers[tool.name]
            if not answer.ok:
                return _failed(f"tool {tool.name}", answer, tool=tool.name)
            verdict = _verdict(answer)
            checks = combine_checks(rules.checks(tool), verdict, self.LLM_CHECKS)
            per_tool.append(
                {
                    "tool": tool.name,
                    "score": sum(checks.values()) / len(checks),
                    "checks": checks,
                    "reasoning": str(verdict.get("reasoning") or ""),
                }
            )
        value = sum(t["score"] for t in per_tool) / len(per_tool)
        failing = [
            f"{t['tool']} ({', '.join(k for k, ok in t['checks'].items() if not ok)})"
            for t in per_tool
            if t["score"] < 1
        ]
        what = "name" if self.type == "tool_name_semantics" else "description"
        if not failing:
            explanation = f"Every {what} check passed for {_plural(len(per_tool), 'tool')}."
        else:
            explanation = (
                f"Average {what} quality {value:.0%} across {_plural(len(per_tool), 'tool')}; "
                f"failing: {'; '.join(failing[:3])}{' ...' if len(failing) > 3 else ''}."
            )
        return Score(
            value=value,
            passed=value >= threshold,
            threshold=threshold,
            explanation=explanation,
            details={"tools": per_tool},
        )


class ToolNameSemantics(_ToolSemantics):
    """Dokimos ToolNameReliability with a judge: the three rule-based checks of
    `tool_name_reliability` plus the LLM's clarity, name_order and intent_over_implementation
    (combined with the blocklist check): five checks a tool."""

    type: Literal["tool_name_semantics"]
    PROMPT: ClassVar[str] = "tool_name_semantics"
    LLM_CHECKS: ClassVar[tuple[str, ...]] = NAME_CHECKS
    max_segments: int = Field(7, ge=1, description="most underscore-separated segments")
    implementation_words: list[str] | None = Field(
        None, description="the blocklist of implementation words (default: Dokimos')"
    )

    def rules(self) -> ToolNameReliability:
        options: dict[str, Any] = {"max_segments": self.max_segments, "tools": self.tools}
        if self.implementation_words is not None:
            options["implementation_words"] = self.implementation_words
        return ToolNameReliability(type="tool_name_reliability", **options)


class ToolDescriptionSemantics(_ToolSemantics):
    """Dokimos ToolDescriptionReliability with a judge: the four rule-based checks of
    `tool_description_reliability` plus nine LLM checks: thirteen checks a tool."""

    type: Literal["tool_description_semantics"]
    PROMPT: ClassVar[str] = "tool_description_semantics"
    LLM_CHECKS: ClassVar[tuple[str, ...]] = DESCRIPTION_CHECKS
    max_input_arguments: int = Field(5, ge=0, description="most parameters (Dokimos maxInputArgs)")
    max_optional_arguments: int = Field(
        3, ge=0, description="most optional parameters (Dokimos maxOptionalArgs)"
    )

    def rules(self) -> ToolDescriptionReliability:
        return ToolDescriptionReliability(
            type="tool_description_reliability",
            max_input_arguments=self.max_input_arguments,
            max_optional_arguments=self.max_optional_arguments,
            tools=self.tools,
        )


JUDGED_BUILTINS = (
    Helpfulness,
    AgentBehaviorFailure,
    ToolCallBehaviorFailure,
    TaskCompletion,
    ToolArgumentHallucination,
    ToolSelection,
    TrajectoryJudge,
    ToolNameSemantics,
    ToolDescriptionSemantics,
)
