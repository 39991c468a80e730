"""`tool_selection`: the tool-selection tester's semantic judge, after its exact check."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from spanscore.evaluation.judged.common import (
    EQUIVALENT,
    Judged,
    canonical_json,
    unanswered_score,
    verdict_details,
)
from spanscore.evaluation.judged.rubrics import prompt
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import EvalContext
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import Trajectory

# --- the tool-selection tester's semantic judge ----------------------------------------------


class CallSpec(BaseModel):
    """A tool call: its name and arguments."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(validation_alias=AliasChoices("name", "tool"), description="tool name")
    arguments: dict[str, Any] = Field(default_factory=dict, description="argument values")

    def shown(self) -> str:
        return f"{self.name}({canonical_json(self.arguments)})"


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


@assertion
class ToolSelection(Judged):
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
                + f"Expected: {canonical_json(expected.arguments[key])}\n"
                + f"Actual: {canonical_json(actual.arguments[key])}",
                EQUIVALENT,
                version,
            )
            for key in differing
        }
        answers = self.ask_each(requests)
        verdicts: dict[str, Any] = {}
        for key in differing:
            answer = answers[key]
            if not answer.ok:
                return unanswered_score(f"argument {key}", answer, argument=key)
            verdicts[key] = verdict_details(answer)
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
            EQUIVALENT,
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
