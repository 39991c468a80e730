"""OpenTelemetry GenAI messages: `gen_ai.input.messages` / `gen_ai.output.messages`, as span
attributes, span events or log records, and the deprecated per-message events
(`gen_ai.user.message`, `gen_ai.assistant.message`, `gen_ai.tool.message`, `gen_ai.choice`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from .messages import (
    Message,
    content_blocks,
    json_or_value,
    summarize_messages,
    tool_call,
    unwrap_result,
)

# The event carrying whole message lists (`gen_ai.input.messages` / `gen_ai.output.messages`),
# as a log record or a span event.
DETAILS_EVENT = "gen_ai.client.inference.operation.details"


def _genai_message(message: Any) -> Message | None:
    if not isinstance(message, dict):
        return None
    out: Message = {"role": message.get("role"), "text": None, "tool_calls": []}
    parts = message.get("parts")
    if parts is None and "content" in message:  # tolerate the older {"role", "content"} shape
        parts = [{"type": "text", "content": message["content"]}]
    texts = []
    for part in parts if isinstance(parts, list) else []:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("content"), str):
            texts.append(part["content"])
        elif kind == "tool_call":
            out["tool_calls"].append(
                tool_call(part.get("id"), part.get("name"), part.get("arguments"))
            )
        elif kind == "tool_call_response":
            # Producers send the tool's output as the text the model saw: parse it when it is
            # JSON, as the OpenInference and indexed readers do.
            result = unwrap_result(part.get("response", part.get("result")))
            out.setdefault("tool_results", []).append({"id": part.get("id"), "result": result})
    if texts:
        out["text"] = "\n".join(texts)
    return out


def genai_list(raw: Any) -> list[Message]:
    data = json_or_value(raw)
    if not isinstance(data, list):
        return []
    return [m for m in (_genai_message(x) for x in data) if m is not None]


# What some producers write in place of content they were told not to capture (Google ADK's
# legacy per-message log records): no content, not the text "<elided>".
ELIDED = "<elided>"


def event_payload(event: dict[str, Any]) -> dict[str, Any]:
    attrs = event.get("attributes") or {}
    content = attrs.get("gen_ai.event.content")
    if content is not None:
        parsed = json_or_value(content)
        if isinstance(parsed, dict):
            return parsed
    return dict(attrs)


def deprecated_event_message(name: str, payload: Mapping[str, Any]) -> tuple[str, Message] | None:
    """One deprecated GenAI event (span event or log record) as ("input"|"output", message)."""
    role = {
        "gen_ai.system.message": "system",
        "gen_ai.user.message": "user",
        "gen_ai.assistant.message": "assistant",
        "gen_ai.tool.message": "tool",
    }.get(name)
    source: Mapping[str, Any] = payload
    side = "input"
    message: Any = None
    if name == "gen_ai.choice":
        side, role = "output", "assistant"
        message = json_or_value(payload.get("message"))
        source = message if isinstance(message, dict) else payload
    elif role is None:
        return None
    content = json_or_value(source.get("content"))
    if content == ELIDED or message == ELIDED:
        return None
    if isinstance(message, list | str):
        content = message  # Strands: the choice's message is its content blocks, or the text
    out: Message = {
        "role": role,
        "text": content if isinstance(content, str) else None,
        "tool_calls": [],
    }
    if isinstance(content, list | dict):
        texts, calls_in_blocks, results_in_blocks = content_blocks(content)
        out["text"] = "\n".join(texts) if texts else None
        out["tool_calls"].extend(calls_in_blocks)
        if results_in_blocks:
            out["tool_results"] = results_in_blocks
            return side, out
    # OpenLLMetry's gen_ai.choice events carry `tool_calls` beside `message`, not inside it
    calls = json_or_value(source.get("tool_calls", payload.get("tool_calls")))
    for call in calls if isinstance(calls, list) else []:
        if isinstance(call, dict):
            function = call.get("function")
            if not isinstance(function, dict):
                function = {}
            out["tool_calls"].append(
                tool_call(call.get("id"), function.get("name"), function.get("arguments"))
            )
    if role == "tool":
        out["tool_results"] = [
            {"id": source.get("id") or source.get("tool_call_id"), "result": content}
        ]
        out["text"] = None
    return side, out


def genai_messages(
    attrs: Mapping[str, Any], events: list[dict[str, Any]]
) -> tuple[list[Message], list[Message]]:
    inputs = genai_list(attrs.get("gen_ai.input.messages"))
    outputs = genai_list(attrs.get("gen_ai.output.messages"))
    if not inputs and not outputs:
        for event in events:
            name = str(event.get("name"))
            if name == DETAILS_EVENT:  # the current form, as span events (Strands, say)
                details = event.get("attributes") or {}
                inputs.extend(genai_list(details.get("gen_ai.input.messages")))
                outputs.extend(genai_list(details.get("gen_ai.output.messages")))
                continue
            found = deprecated_event_message(name, event_payload(event))
            if found is not None:
                (inputs if found[0] == "input" else outputs).append(found[1])
    return inputs, outputs


def log_record_messages(
    event_name: str | None, attrs: Mapping[str, Any], body: Any
) -> tuple[str | None, bytes | None, bytes | None, str | None]:
    """What one GenAI log record says about its model call, as the `logs` columns
    (user_message, tool_calls_requested, tool_results, response_text).

    Two shapes: a record carrying whole message lists in `gen_ai.input.messages` /
    `gen_ai.output.messages` (the `gen_ai.client.inference.operation.details` event), or one
    deprecated per-message event (`gen_ai.user.message`, `gen_ai.choice`, ...) whose payload
    is the body (or the attributes).
    """
    if "gen_ai.input.messages" in attrs or "gen_ai.output.messages" in attrs:
        inputs = genai_list(attrs.get("gen_ai.input.messages"))
        outputs = genai_list(attrs.get("gen_ai.output.messages"))
    else:
        payload = body if isinstance(body, dict) else event_payload({"attributes": attrs})
        found = deprecated_event_message(str(event_name), payload)
        if found is None:
            return None, None, None, None
        inputs, outputs = ([found[1]], []) if found[0] == "input" else ([], [found[1]])
    user, requested, results, text = summarize_messages(inputs, outputs)
    return (
        user,
        orjson.dumps(requested) if requested else None,
        orjson.dumps(results, default=str) if results else None,
        text,
    )


def tool_span_events(events: Iterable[dict[str, Any]]) -> tuple[Any, Any]:
    """(arguments, result) a tool span's events carry, for producers that put them there
    rather than in attributes: Strands' `gen_ai.tool.message` (the input) and `gen_ai.choice`
    (the output), or the two `gen_ai.client.inference.operation.details` events."""
    arguments = result = None
    for event in events:
        name = event.get("name")
        attributes = event.get("attributes") or {}
        if name == "gen_ai.tool.message" and arguments is None:
            arguments = attributes.get("content")
        elif name == "gen_ai.choice" and result is None:
            result = attributes.get("message")
        elif name == DETAILS_EVENT:
            for message in genai_list(attributes.get("gen_ai.input.messages")):
                for call in message["tool_calls"]:
                    arguments = call["arguments"] if arguments is None else arguments
            for message in genai_list(attributes.get("gen_ai.output.messages")):
                for answer in message.get("tool_results", []):
                    result = answer["result"] if result is None else result
    return arguments, result
