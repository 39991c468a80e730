"""Deterministic metrics: scores computed from the trajectory alone, no LLM.

Each is an assertion type a suite can list (`type: tool_call_validity`, ...), or a registered
custom metric (`type: metric`, `metric: NAME`). `docs/assertions.md` gives every metric's rule
and formula; in short:

- `tool_call_validity`: fraction of calls valid against their tool's JSON Schema (Dokimos
  ToolCallValidityEvaluator); `tool_errors`: fraction of calls that succeeded (Dokimos
  ToolErrorEvaluator); `efficiency`: distinct calls / calls, loops reported (Dokimos
  ToolEfficiencyEvaluator); `correctness`: names F1, names-and-order LCS, or calls-with-
  arguments F1 (Dokimos ToolCorrectnessEvaluator);
- `tool_name_reliability`, `tool_description_reliability`: Dokimos' rule-based checks of the
  tools offered;
- `turn_count`, `latency`, `token_usage`: raw counts with limits;
- `tool_call_rubric`: Arcade's weighted critics and rubric (`EvalCase.evaluate`).

A graded metric's value is in [0, 1] and passes at `threshold` (each has the default of the
system it comes from); the counting metrics store the raw count and pass within their limits.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
)

from spanscore.evaluation.scoring.assertion import AssertionBase
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import EvalContext, MetricRegistry, PluginError
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import Trajectory

METRIC_ASSERTIONS_DOC = "A spanscore evaluation suite (scenarios, policies, metrics, gates)."


@assertion
class MetricAssertion(AssertionBase):
    """A registered metric by name: a custom `@metric` function, with parameters."""

    type: Literal["metric"]
    metric: str = Field(
        description="registered metric name: a custom metric file's function name, an "
        "installed plugin's `package/name`, or any importable function as `module:function`"
    )
    params: dict[str, Any] = Field(default_factory=dict, description="keyword arguments")

    @property
    def metric_name(self) -> str:
        return self.name or self.metric

    def check(self, registry: MetricRegistry) -> list[str]:
        try:
            spec = registry.find(self.metric)
        except PluginError as exc:
            return [str(exc)]
        if spec is None:
            known = ", ".join(registry.names()) or "none registered"
            return [f"unknown metric {self.metric!r} (known: {known})"]
        unknown = set(self.params) - spec.parameters
        if unknown and not spec.accepts_any_parameter:
            return [f"metric {self.metric!r} takes no parameter {', '.join(sorted(unknown))}"]
        return []

    def may_judge(self, registry: MetricRegistry) -> bool:
        spec = registry.get(self.metric)
        return spec is not None and spec.wants_context

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        spec = context.registry.get(self.metric)
        if spec is None:
            return Score.failed_with(f"unknown metric {self.metric!r}")
        score = spec(trajectory, context, **self.params)
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
