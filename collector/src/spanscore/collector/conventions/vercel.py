"""The Vercel AI SDK (ai <= 6 `experimental_telemetry`, ai 7 `LegacyOpenTelemetry`): its own
spans' `ai.prompt.messages` / `ai.prompt`, `ai.response.toolCalls` and `ai.response.text`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .messages import Message, content_blocks, json_or_value, tool_call


def _vercel_list(raw: Any) -> list[Message]:
    messages = []
    parsed = json_or_value(raw)
    for message in parsed if isinstance(parsed, list) else []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        out: Message = {"role": message.get("role"), "text": None, "tool_calls": []}
        if isinstance(content, str):
            out["text"] = content
        else:
            texts, calls, results = content_blocks(content)
            out["text"] = "\n".join(texts) or None
            out["tool_calls"] = calls
            if results:
                out["tool_results"] = results
        messages.append(out)
    return messages


def vercel_messages(
    attrs: Mapping[str, Any], events: list[dict[str, Any]]
) -> tuple[list[Message], list[Message]]:
    """A model call's `ai.prompt.messages`, and its answer: `ai.response.toolCalls` (input as
    a JSON string or an object) and `ai.response.text`. The whole call's span has its
    messages in `ai.prompt` (`{"messages": [...]}` or `{"prompt": "..."}`)."""
    inputs = _vercel_list(attrs.get("ai.prompt.messages"))
    if not inputs:
        prompt = json_or_value(attrs.get("ai.prompt"))
        if isinstance(prompt, dict):
            inputs = _vercel_list(prompt.get("messages"))
            if isinstance(prompt.get("prompt"), str):
                inputs.append({"role": "user", "text": prompt["prompt"], "tool_calls": []})
    calls = json_or_value(attrs.get("ai.response.toolCalls"))
    text = attrs.get("ai.response.text")
    requested = [
        tool_call(c.get("toolCallId"), c.get("toolName"), c.get("input", c.get("args")))
        for c in (calls if isinstance(calls, list) else [])
        if isinstance(c, dict)
    ]
    outputs: list[Message] = []
    if requested or isinstance(text, str):
        outputs.append(
            {
                "role": "assistant",
                "text": text if isinstance(text, str) and text else None,
                "tool_calls": requested,
            }
        )
    return inputs, outputs
