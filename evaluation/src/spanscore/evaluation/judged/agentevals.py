"""`trajectory_judge`: agentevals' trajectory judge, scored 1-5."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from spanscore.evaluation.judged.common import REASONING, Judged, closed_schema
from spanscore.evaluation.judged.render import render_tools
from spanscore.evaluation.judged.rubrics import conversation_message, prompt
from spanscore.evaluation.judged.tool_selection import CallSpec
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import EvalContext
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import Trajectory

# --- agentevals-like trajectory judge ----------------------------------------------------------


@assertion
class TrajectoryJudge(Judged):
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
        schema = closed_schema(
            {"reasoning": REASONING, "score": {"type": "integer", "enum": [1, 2, 3, 4, 5]}}
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
