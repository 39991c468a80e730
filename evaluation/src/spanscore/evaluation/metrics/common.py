"""What the deterministic metrics share: graded metrics (a value in [0, 1] against a threshold)
and counting metrics (a raw count within limits)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import (
    Field,
    model_validator,
)

from spanscore.evaluation.scoring.assertion import AssertionBase
from spanscore.evaluation.scoring.registry import EvalContext
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import ToolCall, Trajectory

# --- shared ------------------------------------------------------------------------------------


class Graded(AssertionBase):
    """A metric with a value in [0, 1] that passes at `threshold` (default: its system's)."""

    default_threshold: ClassVar[float] = 1.0
    threshold: float | None = Field(
        1.0, ge=0, le=1, description="pass when the value is at least this (Dokimos: 1.0)"
    )

    def effective_threshold(self) -> float:
        return self.threshold if self.threshold is not None else self.default_threshold

    def scored(self, value: float, explanation: str, details: Mapping[str, Any]) -> Score:
        value = min(1.0, max(0.0, value))
        threshold = self.effective_threshold()
        return Score(
            value=value,
            passed=value >= threshold,
            threshold=threshold,
            explanation=explanation,
            details=dict(details),
        )


class Counted(AssertionBase):
    """A metric whose value is a raw count or duration, checked against limits."""

    @model_validator(mode="after")
    def _no_threshold(self) -> Counted:
        if self.threshold is not None:
            raise ValueError(
                f"{self.type} stores a raw value, not a score in [0, 1]: give its limits "
                "(min_*/max_*) instead of threshold"
            )
        return self


def call_arguments(call: ToolCall) -> Any:
    return {} if call.arguments is None else call.arguments


def ratio(part: int, whole: int) -> float:
    return part / whole if whole else 1.0


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def no_tools_offered(trajectory: Trajectory, context: EvalContext) -> bool:
    """Neither the suite's catalog nor the recorded definitions say which tools exist."""
    return not context.tools and "gen_ai.tool.definitions" not in trajectory.attributes


NO_TOOLS = (
    "no tool definitions: give the suite a `tools` catalog, or record gen_ai.tool.definitions"
)
