"""`turn_count`, `latency`, `token_usage`: raw counts that pass within their limits."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
)

from spanscore.evaluation.metrics.common import Counted, plural
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import EvalContext
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import Trajectory

# --- counts: turns, latency, tokens ------------------------------------------------------------


def _limits(value: float, low: float | None, high: float | None) -> bool | None:
    if low is None and high is None:
        return None  # no limit: the value is informational
    return (low is None or value >= low) and (high is None or value <= high)


@assertion
class TurnCount(Counted):
    """The number of turns (user message -> steps -> answer, as the trajectory was rebuilt).
    Value: the count. Passes when within `min_turns`..`max_turns`; without limits it only
    records the count (passed is empty)."""

    type: Literal["turn_count"]
    min_turns: int | None = Field(None, ge=0, description="fewest turns allowed")
    max_turns: int | None = Field(None, ge=0, description="most turns allowed")

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        count = len(trajectory.turns)
        passed = _limits(count, self.min_turns, self.max_turns)
        bounds = _bounds_text(self.min_turns, self.max_turns, "")
        explanation = f"{plural(count, 'turn')}{bounds}."
        return Score(
            value=float(count),
            passed=passed,
            explanation=explanation,
            details={"turns": count, "min_turns": self.min_turns, "max_turns": self.max_turns},
        )


def _bounds_text(low: float | None, high: float | None, unit: str) -> str:
    if low is not None and high is not None:
        return f" (allowed {low:g}{unit} to {high:g}{unit})"
    if low is not None:
        return f" (at least {low:g}{unit})"
    if high is not None:
        return f" (at most {high:g}{unit})"
    return ""


@assertion
class Latency(Counted):
    """Time taken, in milliseconds. Value: the total, either `wall` (the conversation's first
    span start to last span end) or `steps` (the sum of model and tool call latencies, which
    counts parallel calls twice). Passes when the total is at most `max_total_ms`, every tool
    call at most `max_tool_ms`, and each named tool's calls at most their `per_tool_max_ms`;
    without limits it only records the value. Calls without a recorded latency are skipped."""

    type: Literal["latency"]
    measure: Literal["wall", "steps"] = Field(
        "wall", description="wall: conversation start to end; steps: sum of call latencies"
    )
    max_total_ms: float | None = Field(None, ge=0, description="limit on the total")
    max_tool_ms: float | None = Field(None, ge=0, description="limit on every tool call")
    per_tool_max_ms: dict[str, float] = Field(
        default_factory=dict, description="tool name -> limit on each call of that tool"
    )

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        tools = [c for c in trajectory.tool_calls if c.latency_ms is not None]
        models = [m for m in trajectory.model_calls if m.latency_ms is not None]
        steps_ms = sum(c.latency_ms or 0.0 for c in tools) + sum(
            m.latency_ms or 0.0 for m in models
        )
        wall_ms = None
        if trajectory.start_time is not None and trajectory.end_time is not None:
            wall_ms = (trajectory.end_time - trajectory.start_time).total_seconds() * 1000
        total = wall_ms if self.measure == "wall" else (steps_ms if tools or models else None)
        if total is None:
            return Score.failed_with(f"no timings recorded to measure {self.measure} latency")
        slowest: dict[str, float] = {}
        for call in tools:
            slowest[call.name] = max(slowest.get(call.name, 0.0), call.latency_ms or 0.0)
        over: list[str] = []
        if self.max_total_ms is not None and total > self.max_total_ms:
            over.append(f"total {total:.0f} ms > {self.max_total_ms:g} ms")
        for name, ms in slowest.items():
            limit = self.per_tool_max_ms.get(name, self.max_tool_ms)
            if limit is not None and ms > limit:
                over.append(f"{name} {ms:.0f} ms > {limit:g} ms")
        limited = self.max_total_ms is not None or self.max_tool_ms is not None
        passed = (not over) if limited or self.per_tool_max_ms else None
        explanation = f"{self.measure.capitalize()} latency {total:.0f} ms"
        explanation += f"; over the limit: {', '.join(over)}." if over else "."
        return Score(
            value=total,
            passed=passed,
            explanation=explanation,
            details={
                "measure": self.measure,
                "wall_ms": wall_ms,
                "steps_ms": steps_ms,
                "tool_ms": sum(c.latency_ms or 0.0 for c in tools),
                "model_ms": sum(m.latency_ms or 0.0 for m in models),
                "max_tool_ms_by_name": slowest,
                "over_limit": over,
            },
        )


@assertion
class TokenUsage(Counted):
    """Tokens used by the conversation's model calls (gen_ai.usage.* or OpenInference counts).
    Value: the `value` total (default `total` = input + output). Passes when the input, output
    and total sums are within their limits; without limits it only records the value. Model
    calls without counts are skipped and counted in the details."""

    type: Literal["token_usage"]
    value: Literal["total", "input", "output"] = Field(
        "total", description="which sum is stored as the value"
    )
    max_input_tokens: int | None = Field(None, ge=0, description="limit on input tokens")
    max_output_tokens: int | None = Field(None, ge=0, description="limit on output tokens")
    max_total_tokens: int | None = Field(None, ge=0, description="limit on input + output")

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        models = trajectory.model_calls
        counted = [m for m in models if m.input_tokens is not None or m.output_tokens is not None]
        if not counted:
            return Score.failed_with("no token counts recorded")
        sums = {
            "input": sum(m.input_tokens or 0 for m in counted),
            "output": sum(m.output_tokens or 0 for m in counted),
        }
        sums["total"] = sums["input"] + sums["output"]
        limits = {
            "input": self.max_input_tokens,
            "output": self.max_output_tokens,
            "total": self.max_total_tokens,
        }
        over = [
            f"{k} {sums[k]} > {lim}"
            for k, lim in limits.items()
            if lim is not None and sums[k] > lim
        ]
        passed = None if all(v is None for v in limits.values()) else not over
        explanation = (
            f"{sums['total']} tokens ({sums['input']} in, {sums['output']} out) over "
            f"{plural(len(counted), 'model call')}"
        )
        explanation += f"; over the limit: {', '.join(over)}." if over else "."
        return Score(
            value=float(sums[self.value]),
            passed=passed,
            explanation=explanation,
            details={
                **{f"{k}_tokens": v for k, v in sums.items()},
                "model_calls": len(models),
                "model_calls_without_counts": len(models) - len(counted),
                "over_limit": over,
            },
        )
