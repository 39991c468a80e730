"""`AssertionBase`: one entry of a scenario's `assertions` (or the suite's `metrics`), a typed,
validated configuration that scores one trajectory."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from spanscore.evaluation.scoring.registry import EvalContext, MetricRegistry
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import Trajectory


class AssertionBase(BaseModel):
    """One entry of a scenario's `assertions` (or the suite's `metrics`): a typed, validated
    configuration that scores one trajectory. Subclasses set `type` (a Literal) and
    implement `evaluate`; `check` reports problems found after loading (unknown metrics...)."""

    model_config = ConfigDict(extra="forbid")
    # Scored only on simulated conversations (it judges the simulated user).
    simulated_only: ClassVar[bool] = False

    type: str
    name: str | None = Field(None, description="metric name in the scores (default: the type)")
    description: str | None = None
    threshold: float | None = Field(
        None, description="pass when the score is at least this (overrides the mode's rule)"
    )

    @property
    def metric_name(self) -> str:
        return self.name or self.type

    @abstractmethod
    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        """Score one trajectory: every assertion type gives its rule here."""

    def check(self, registry: MetricRegistry) -> list[str]:
        return []

    def may_judge(self, registry: MetricRegistry) -> bool:
        """Whether scoring may ask the LLM judge (it then runs in a judge session)."""
        return False

    def graded(self, value: float, passed: bool, **fields: Any) -> Score:
        """A graded score; `threshold`, when set, decides pass/fail instead of the rule."""
        value = min(1.0, max(0.0, value))
        if self.threshold is not None:
            passed = value >= self.threshold
        return Score(value=value, passed=passed, threshold=self.threshold, **fields)
