"""`simulator_fidelity`: a judged metric about the simulated user, not the agent.

A simulated user that invents facts, wanders off its goal or gives up early can fail a good
agent: this metric asks the judge, per simulated conversation, whether the user stayed within
its `user:` block. Its scores are named `simulator.*`, so they never count in whether the agent
passed a trial (pass^k), and the report shows them apart. It scores only simulated
conversations: production traffic has no simulated user to judge.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from spanscore.evaluation.judged.rubrics import JudgedAssertion, conversation_message, prompt
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import EvalContext
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import Trajectory

PREFIX = "simulator."  # as the lake's views leave these scores out of a trial's verdict
LABELS = ("faithful", "invented_facts", "off_goal", "gave_up_early")


@assertion
class SimulatorFidelity(JudgedAssertion):
    """Did the simulated user stay within its instructions (no invented facts, its goal
    pursued, not given up early)? Passes on `faithful`."""

    simulated_only: ClassVar[bool] = True

    type: Literal["simulator_fidelity"]
    name: str = Field(
        "simulator.fidelity",
        description="metric name in the scores; starts with `simulator.` (not the agent's score)",
    )

    @field_validator("name")
    @classmethod
    def _about_the_simulator(cls, name: str) -> str:
        if not name.startswith(PREFIX):
            raise ValueError(f"a simulator fidelity metric's name starts with {PREFIX!r}")
        return name

    @cached_property
    def _schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"reasoning": {"type": "string"}, "label": {"enum": list(LABELS)}},
            "required": ["reasoning", "label"],
            "additionalProperties": False,
        }

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        scenario = trajectory.attributes.get("scenario.id")
        user = context.users.get(str(scenario)) if scenario is not None else None
        if user is None:
            return Score.failed_with(
                f"scenario {scenario!r} has no user: block to judge the simulated user against"
            )
        template, version = prompt("simulator_fidelity")
        instructions = template.substitute(name=self.metric_name, user=_described(user))
        verdict = self.ask(
            self.metric_name,
            instructions,
            conversation_message(trajectory, self.max_value_chars),
            self._schema,
            version,
        )
        label = str(verdict["label"])
        return Score(
            label=label,
            passed=label == "faithful",
            explanation=str(verdict.get("reasoning") or ""),
            details={"verdict": verdict, "pass_labels": ["faithful"]},
        )


def _described(user: dict[str, Any]) -> str:
    """The user block as the judge reads it, one field a line."""
    lines = []
    for key, value in user.items():
        if value in (None, "", []):
            continue
        shown = "; ".join(map(str, value)) if isinstance(value, list) else str(value)
        lines.append(f"- {key}: {shown}")
    return "\n".join(lines)
