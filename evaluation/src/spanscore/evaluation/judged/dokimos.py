"""Dokimos' judged metrics: `task_completion`, `tool_argument_hallucination`, and the LLM checks
of tool names and descriptions (`tool_name_semantics`, `tool_description_semantics`, combined
with the rule-based checks of the `*_reliability` metrics)."""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from spanscore.evaluation.judged.common import (
    REASONING,
    Judged,
    canonical_json,
    clip,
    closed_schema,
    plural,
    unanswered_score,
    verdict_details,
)
from spanscore.evaluation.judged.rubrics import conversation_message, prompt
from spanscore.evaluation.metrics.common import NO_TOOLS, no_tools_offered
from spanscore.evaluation.metrics.tool_reliability import (
    ToolDescriptionReliability,
    ToolNameReliability,
)
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import EvalContext, ToolSpec
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import Trajectory

# --- Dokimos: task completion, tool argument hallucination -----------------------------------


@assertion
class TaskCompletion(Judged):
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
        item = closed_schema(
            {"task": {"type": "string"}, "reasoning": REASONING, "completed": {"type": "boolean"}}
        )
        schema = closed_schema({"reasoning": REASONING, "tasks": {"type": "array", "items": item}})
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
        explanation = f"{completed} of {plural(len(self.tasks), 'task')} completed."
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


@assertion
class ToolArgumentHallucination(Judged):
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
                lines.append(f"Turn {turn.index + 1}: {clip(turn.user_message, 4 * limit)}")
        lines += ["", "# Tool calls, in order"]
        number = 0
        for turn in trajectory.turns:
            for call in turn.tool_calls:
                number += 1
                arguments = clip(
                    canonical_json({} if call.arguments is None else call.arguments), limit
                )
                lines.append(f"{number}. {call.name}({arguments})  [turn {turn.index + 1}]")
                if call.error is not None:
                    lines.append(f"   Error: {clip(call.error, limit)}")
                else:
                    result = call.result
                    shown = result if isinstance(result, str) else canonical_json(result)
                    lines.append(f"   Result: {clip(shown, limit)}")
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
        item = closed_schema(
            {"index": {"type": "integer"}, "reasoning": REASONING, "grounded": {"type": "boolean"}}
        )
        schema = closed_schema({"reasoning": REASONING, "calls": {"type": "array", "items": item}})
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
        explanation = f"Grounded arguments in {grounded} of {plural(len(calls), 'tool call')}."
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


class _ToolSemantics(Judged):
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
        if no_tools_offered(trajectory, context):
            return Score.failed_with(NO_TOOLS)
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
        schema = closed_schema(
            {"reasoning": REASONING, **{k: {"type": "boolean"} for k in self.LLM_CHECKS}}
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
                return unanswered_score(f"tool {tool.name}", answer, tool=tool.name)
            verdict = verdict_details(answer)
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
            explanation = f"Every {what} check passed for {plural(len(per_tool), 'tool')}."
        else:
            explanation = (
                f"Average {what} quality {value:.0%} across {plural(len(per_tool), 'tool')}; "
                f"failing: {'; '.join(failing[:3])}{' ...' if len(failing) > 3 else ''}."
            )
        return Score(
            value=value,
            passed=value >= threshold,
            threshold=threshold,
            explanation=explanation,
            details={"tools": per_tool},
        )


@assertion
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


@assertion
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
