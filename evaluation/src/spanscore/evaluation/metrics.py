"""Deterministic metrics: scores computed from the trajectory alone, no LLM.

Each is an assertion type a suite can list (`type: tool_call_validity`, ...), or a registered
custom metric (`type: metric`, `metric: NAME`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .scoring import AssertionBase, EvalContext, MetricRegistry, Score
from .trajectory import Trajectory

METRIC_ASSERTIONS_DOC = "A spanscore evaluation suite (scenarios, policies, metrics, gates)."


class MetricAssertion(AssertionBase):
    """A registered metric by name: a custom `@metric` function, with parameters."""

    type: Literal["metric"]
    metric: str = Field(description="registered metric name (custom metrics by function name)")
    params: dict[str, Any] = Field(default_factory=dict, description="keyword arguments")

    @property
    def metric_name(self) -> str:
        return self.name or self.metric

    def check(self, registry: MetricRegistry) -> list[str]:
        spec = registry.get(self.metric)
        if spec is None:
            known = ", ".join(registry.names()) or "none registered"
            return [f"unknown metric {self.metric!r} (known: {known})"]
        unknown = set(self.params) - spec.parameters
        if unknown and not spec.accepts_any_parameter:
            return [f"metric {self.metric!r} takes no parameter {', '.join(sorted(unknown))}"]
        return []

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        spec = context.registry.get(self.metric)
        if spec is None:
            return Score.failed_with(f"unknown metric {self.metric!r}")
        score = spec(trajectory, **self.params)
        if self.threshold is not None and score.value is not None and score.error is None:
            return Score(
                value=score.value,
                label=score.label,
                passed=score.value >= self.threshold,
                threshold=self.threshold,
                explanation=score.explanation,
                details=score.details,
            )
        return score
