"""`tool_name_reliability`, `tool_description_reliability`: Dokimos' rule-based checks of the
tools the agent was offered."""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import (
    Field,
    PrivateAttr,
)

from spanscore.evaluation.metrics.common import (
    NO_TOOLS,
    Graded,
    no_tools_offered,
    plural,
    ratio,
)
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import EvalContext, ToolSpec
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import Trajectory

# --- tool name and description reliability -----------------------------------------------------

_SNAKE_CASE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")


IMPLEMENTATION_WORDS = (
    "_with_llm",
    "_via_api",
    "_from_s3",
    "_using_bq",
    "_using_sdk",
    "_with_gpt4",
)


class _ToolsReliability(Graded):
    default_threshold: ClassVar[float] = 0.8
    threshold: float | None = Field(
        0.8, ge=0, le=1, description="pass when the value is at least this (Dokimos: 0.8)"
    )
    tools: list[str] | None = Field(
        None, description="only these tools (default: every tool offered: catalog + recorded)"
    )

    def offered(self, trajectory: Trajectory, context: EvalContext) -> list[ToolSpec]:
        specs = context.tool_specs(trajectory)
        names = sorted(specs) if self.tools is None else [n for n in self.tools if n in specs]
        return [specs[n] for n in names]

    @abstractmethod
    def checks(self, tool: ToolSpec) -> dict[str, bool]:
        """The rule-based checks of one tool: name -> passed."""

    _memo: dict[int, tuple[dict[str, ToolSpec], Score]] = PrivateAttr(default_factory=dict)

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        if no_tools_offered(trajectory, context):
            return Score.failed_with(NO_TOOLS)
        # The score depends on the tools offered only: the same tool set, the same score.
        specs = context.tool_specs(trajectory)
        memo = self._memo.get(id(specs))
        if memo is not None and memo[0] is specs:
            return memo[1]
        score = self._evaluate(trajectory, context)
        if len(self._memo) >= 256:
            self._memo.clear()
        self._memo[id(specs)] = (specs, score)
        return score

    def _evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        tools = self.offered(trajectory, context)
        per_tool: list[dict[str, Any]] = []
        for tool in tools:
            checks = self.checks(tool)
            score = ratio(sum(checks.values()), len(checks))
            per_tool.append({"tool": tool.name, "score": score, "checks": checks})
        value = sum(t["score"] for t in per_tool) / len(per_tool) if per_tool else 1.0
        failing = [
            f"{t['tool']} ({', '.join(k for k, ok in t['checks'].items() if not ok)})"
            for t in per_tool
            if t["score"] < 1
        ]
        what = self.type.removeprefix("tool_").removesuffix("_reliability")
        if not tools:
            explanation = "No tools to evaluate."
        elif not failing:
            explanation = f"Every {what} check passed for {plural(len(tools), 'tool')}."
        else:
            explanation = (
                f"Average {what} quality {value:.0%} across {plural(len(tools), 'tool')}; "
                f"failing: {'; '.join(failing[:3])}{' ...' if len(failing) > 3 else ''}."
            )
        return self.scored(value, explanation, {"tools": per_tool})


@assertion
class ToolNameReliability(_ToolsReliability):
    """Dokimos ToolNameReliability's rule-based checks of each offered tool's name:
    `snakecase_format` (`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`), `conciseness` (at most
    `max_segments` underscore-separated segments) and `intent_over_implementation` (none of
    the implementation words, e.g. `_via_api`, in the lower-cased name). A tool scores the
    fraction of its checks passed; the value is the mean over tools (1.0 without tools).
    The LLM checks (clarity, name_order) are not run here."""

    type: Literal["tool_name_reliability"]
    max_segments: int = Field(7, ge=1, description="most underscore-separated segments")
    implementation_words: list[str] = Field(
        default_factory=lambda: list(IMPLEMENTATION_WORDS),
        description="substrings that reveal how instead of what (Dokimos' blocklist)",
    )

    def checks(self, tool: ToolSpec) -> dict[str, bool]:
        name = tool.name
        segments = name.split("_")
        while len(segments) > 1 and not segments[-1]:  # as Java's split drops trailing ""
            segments.pop()
        return {
            "snakecase_format": _SNAKE_CASE.match(name) is not None,
            "conciseness": len(segments) <= self.max_segments,
            "intent_over_implementation": not any(
                word.lower() in name.lower() for word in self.implementation_words
            ),
        }


def _typed(schema: Any) -> bool:
    """A parameter schema says its type: `type`, or a `$ref`, `enum` or `const`, or
    `anyOf`/`oneOf`/`allOf` whose every branch is typed (Optional[...] from pydantic)."""
    if not isinstance(schema, Mapping):
        return False
    if "type" in schema or "$ref" in schema or "enum" in schema or "const" in schema:
        return True
    for key in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches and all(_typed(b) for b in branches):
            return True
    return False


@assertion
class ToolDescriptionReliability(_ToolsReliability):
    """Dokimos ToolDescriptionReliability's rule-based checks of each offered tool's
    parameters: `input_arguments_clarity` (every parameter has a description),
    `input_arguments_types` (every parameter has a type), `max_num_input_arguments` (at most
    `max_input_arguments`), `max_optional_input_arguments` (at most `max_optional_arguments`
    not required). A tool scores the fraction of its checks passed; the value is the mean over
    tools (1.0 without tools). The nine LLM checks are not run here."""

    type: Literal["tool_description_reliability"]
    max_input_arguments: int = Field(5, ge=0, description="most parameters (Dokimos maxInputArgs)")
    max_optional_arguments: int = Field(
        3, ge=0, description="most optional parameters (Dokimos maxOptionalArgs)"
    )

    def checks(self, tool: ToolSpec) -> dict[str, bool]:
        schema = tool.parameters or {}
        properties = schema.get("properties")
        params: Mapping[str, Any] = properties if isinstance(properties, Mapping) else {}
        required = schema.get("required")
        required_names = (
            {r for r in required if r in params} if isinstance(required, list) else set()
        )
        return {
            "input_arguments_clarity": all(
                isinstance(p, Mapping) and "description" in p for p in params.values()
            ),
            "input_arguments_types": all(_typed(p) for p in params.values()),
            "max_num_input_arguments": len(params) <= self.max_input_arguments,
            "max_optional_input_arguments": len(params) - len(required_names)
            <= self.max_optional_arguments,
        }
