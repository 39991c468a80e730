"""The drill-down of one conversation: its trajectory (turns, calls, timings) with its scores
marked on the calls they judge, values clipped to the report's limit."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import orjson

from spanscore.evaluation.report.marks import score_marks
from spanscore.evaluation.report.schema import (
    ConversationDetailDoc,
    HandoffStepDoc,
    MarkDoc,
    MissingDoc,
    ModelStepDoc,
    ScoreDoc,
    ToolStepDoc,
    TurnDoc,
)
from spanscore.evaluation.report.values import OPTIONS, iso, json, round_to
from spanscore.evaluation.runs.store import ScoreRecord
from spanscore.evaluation.trajectory.model import Handoff, ModelCall, ToolCall, Trajectory

# --- conversations and their trajectories -----------------------------------------------------


def clip(value: Any, limit: int) -> Any:
    """The value, or its JSON text cut at `limit` characters when longer."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        text = value
    else:
        text = orjson.dumps(value, default=str, option=OPTIONS).decode()
        if len(text) <= limit:
            return value
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def _offset(moment: dt.datetime | None, start: dt.datetime | None) -> float | None:
    if moment is None or start is None:
        return None
    return round((moment - start).total_seconds() * 1000, 3)


def conversation_detail(
    t: Trajectory, scores: Sequence[ScoreRecord], limit: int
) -> ConversationDetailDoc:
    """The conversation as the report and the review app draw it (one renderer reads it):
    turns and steps, values cut at `limit` characters, `scores` marked on the calls they judge."""
    start = t.start_time
    turns: list[TurnDoc] = []
    index = 0
    for turn in t.turns:
        steps: list[ModelStepDoc | ToolStepDoc | HandoffStepDoc] = []
        for step in turn.steps:
            if isinstance(step, ToolCall):
                steps.append(
                    {
                        "kind": "tool_call",
                        "index": index,
                        "name": step.name,
                        "arguments": clip(step.arguments, limit),
                        "result": clip(step.result, limit),
                        "error": clip(step.error, limit),
                        "call_id": step.call_id,
                        "offset_ms": _offset(step.start_time, start),
                        "latency_ms": round_to(step.latency_ms, 3),
                        "parallel_group": step.parallel_group,
                        "source": step.source,
                        "trace_id": step.trace_id,
                        "span_id": step.span_id,
                    }
                )
                index += 1
            elif isinstance(step, ModelCall):
                steps.append(
                    {
                        "kind": "model_call",
                        "name": step.name,
                        "offset_ms": _offset(step.start_time, start),
                        "latency_ms": round_to(step.latency_ms, 3),
                        "requested": list(step.requested),
                        "response": clip(step.response_text, limit),
                        "error": clip(step.error, limit),
                        "input_tokens": step.input_tokens,
                        "output_tokens": step.output_tokens,
                        "trace_id": step.trace_id,
                        "span_id": step.span_id,
                    }
                )
            elif isinstance(step, Handoff):
                steps.append(
                    {
                        "kind": "handoff",
                        "from_agent": step.from_agent,
                        "to_agent": step.to_agent,
                        "offset_ms": _offset(step.start_time, start),
                    }
                )
        turns.append(
            {
                "index": turn.index,
                "user_message": clip(turn.user_message, limit),
                "final_response": clip(turn.final_response, limit),
                "steps": steps,
            }
        )
    score_docs: list[ScoreDoc] = []
    marks: list[MarkDoc] = []
    missing: list[MissingDoc] = []
    for i, s in enumerate(scores):
        details = json(s.details)
        found_marks, found_missing = score_marks(t.tool_calls, i, details)
        marks += found_marks
        missing += found_missing
        score_docs.append(
            {
                "scenario_id": s.scenario_id,
                "metric": s.metric,
                "value": s.value,
                "label": s.label,
                "passed": s.passed,
                "threshold": s.threshold,
                "explanation": clip(s.explanation, limit),
                "error": clip(s.error, limit),
                "details": clip(details, limit),
            }
        )
    attributes = {
        k: clip(v, 200) for k, v in t.attributes.items() if k != "gen_ai.tool.definitions"
    }
    duration = (
        round_to((t.end_time - t.start_time).total_seconds() * 1000, 3)
        if t.start_time and t.end_time
        else None
    )
    return {
        "conversation_id": t.conversation_id,
        "agent": t.agent_name,
        "service": t.service_name,
        "start": iso(t.start_time),
        "duration_ms": duration,
        "attributes": attributes,
        "warnings": list(t.warnings),
        "turns": turns,
        "scores": score_docs,
        "marks": marks,
        "missing": missing,
    }


def first_trace(t: Trajectory) -> str | None:
    for turn in t.turns:
        for step in turn.steps:
            trace = getattr(step, "trace_id", None)
            if trace:
                return str(trace)
    return None
