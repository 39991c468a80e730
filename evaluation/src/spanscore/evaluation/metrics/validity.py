"""`tool_call_validity`: the fraction of calls valid against their tool's JSON Schema (Dokimos
ToolCallValidityEvaluator)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    Field,
)

from spanscore.evaluation.matching.schema_check import check_arguments, surely_valid
from spanscore.evaluation.metrics.common import (
    NO_TOOLS,
    Graded,
    call_arguments,
    no_tools_offered,
    plural,
    ratio,
)
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import EvalContext, ToolSpec
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import ToolCall, Trajectory

# --- tool-call validity ------------------------------------------------------------------------


@assertion
class ToolCallValidity(Graded):
    """Each tool call checked against its tool's JSON Schema (Dokimos ToolCallValidity).

    A call is invalid when its tool is unknown, or its arguments miss a required one, have the
    wrong JSON type, leave an enum or const, break a bound, or carry an argument the schema
    forbids (`additionalProperties: false`, or any undeclared one with `strict`). Nested
    objects and arrays are checked too. Value: valid calls / calls (1.0 without calls)."""

    type: Literal["tool_call_validity"]
    strict: bool = Field(
        False,
        description="an argument the schema does not declare is a problem even when "
        "additionalProperties is not false (Dokimos strictMode)",
    )

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        calls = trajectory.tool_calls
        specs = context.tool_specs(trajectory)
        if calls and no_tools_offered(trajectory, context):
            return Score.failed_with(NO_TOOLS)
        results: list[dict[str, Any]] = []
        for index, call in enumerate(calls):
            problems = self.problems(call, specs.get(call.name))
            results.append(
                {"index": index, "name": call.name, "call_id": call.call_id, "problems": problems}
            )
        valid = sum(1 for r in results if not r["problems"])
        invalid = [r for r in results if r["problems"]]
        if not calls:
            explanation = "No tool calls to validate."
        elif not invalid:
            explanation = f"All {plural(len(calls), 'tool call')} are valid."
        else:
            first = invalid[0]
            explanation = (
                f"{valid}/{len(calls)} tool calls are valid; e.g. {first['name']}: "
                f"{first['problems'][0]}."
            )
        return self.scored(
            ratio(valid, len(calls)),
            explanation,
            {"valid": valid, "total": len(calls), "calls": results},
        )

    def problems(self, call: ToolCall, spec: ToolSpec | None) -> list[str]:
        if spec is None:
            return [f"unknown tool '{call.name}'"]
        arguments = call_arguments(call)
        if not isinstance(arguments, Mapping):
            return [f"the arguments are not a JSON object: {str(arguments)[:60]!r}"]
        if not spec.parameters:
            return []  # a tool without a schema accepts any arguments
        if surely_valid(arguments, spec.parameters, strict=self.strict):
            return []  # the common case, without walking the schema
        return check_arguments(arguments, spec.parameters, strict=self.strict)
