"""What the judge sees of a conversation and of the tools offered: the trajectory as text,
values clipped, results optional."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

from spanscore.evaluation.trajectory.model import Handoff, ModelCall, ToolCall, Trajectory

# --- what the judge sees of a conversation ---------------------------------------------------


def _clip(text: str, limit: int) -> str:
    return (
        text if len(text) <= limit else text[: limit - 20] + f"... [{len(text) - limit + 20} more]"
    )


def _value(value: Any, limit: int) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        text = value
    else:
        text = orjson.dumps(
            value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str
        ).decode()
    return _clip(text, limit)


def render_trajectory(
    trajectory: Trajectory, *, max_value_chars: int = 600, results: bool = True
) -> str:
    """A compact, stable transcript: turns, user messages, tool calls with arguments, results
    and errors (parallel calls marked), hand-offs and answers. Stable text matters: it is part
    of every cache key. Rendered once per trajectory and settings."""
    key = ("transcript", max_value_chars, results)
    known = trajectory.memo.get(key)
    if known is None:
        known = trajectory.memo[key] = _render(trajectory, max_value_chars, results)
    return str(known)


def _render(trajectory: Trajectory, max_value_chars: int, results: bool) -> str:
    lines: list[str] = []
    for turn in trajectory.turns:
        lines.append(f"## Turn {turn.index + 1}")
        if turn.user_message is not None:
            lines.append(f"USER: {_clip(turn.user_message, 4 * max_value_chars)}")
        number = 0
        for step in turn.steps:
            if isinstance(step, ToolCall):
                number += 1
                group = f" [parallel {step.parallel_group}]" if step.parallel_group else ""
                lines.append(
                    f"TOOL CALL {number}{group}: {step.name}"
                    f"({_value(step.arguments, max_value_chars)})"
                )
                if step.error is not None:
                    lines.append(f"  ERROR: {_clip(step.error, max_value_chars)}")
                if results and step.result is not None:
                    lines.append(f"  RESULT: {_value(step.result, max_value_chars)}")
            elif isinstance(step, Handoff):
                lines.append(f"HANDOFF: {step.from_agent or '?'} -> {step.to_agent or '?'}")
            elif isinstance(step, ModelCall) and step.error is not None:
                lines.append(f"MODEL ERROR: {_clip(step.error, max_value_chars)}")
        if turn.final_response is not None:
            lines.append(f"ASSISTANT: {_clip(turn.final_response, 4 * max_value_chars)}")
    return "\n".join(lines) if lines else "(the conversation is empty)"


def render_tools(tools: Mapping[str, Any]) -> str:
    """The tools offered, one line each: name, description, argument schema."""
    lines = []
    for name in sorted(tools):
        spec = tools[name]
        description = getattr(spec, "description", None) or ""
        parameters = getattr(spec, "parameters", None)
        schema = json.dumps(parameters, sort_keys=True) if parameters else "{}"
        lines.append(f"- {name}: {description} (arguments: {schema})")
    return "\n".join(lines) if lines else "(no tool definitions recorded)"
