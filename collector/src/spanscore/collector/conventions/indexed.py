"""Flattened (indexed) message attributes: OpenInference's `llm.input_messages.N.message...`
and older OpenLLMetry releases' `gen_ai.prompt.N.*` / `gen_ai.completion.N.*`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .genai import genai_messages
from .messages import Message, json_or_value, tool_call


def _indexed(attrs: Mapping[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """`prefix.N.rest = v` keys as {N: {rest: v}}."""
    out: dict[int, dict[str, Any]] = {}
    size = len(prefix)
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        index, _, rest = key[size:].partition(".")
        if index.isascii() and index.isdigit() and rest:  # "²".isdigit(), but int("²") fails
            out.setdefault(int(index), {})[rest] = value
    return out


def _indexed_message(
    role: Any,
    text: str | None,
    calls: dict[int, dict[str, Any]],
    tool_call_id: Any,
    keys: tuple[str, str],
) -> Message:
    """A canonical message from flattened fields; `keys` name a call's name and arguments."""
    message: Message = {
        "role": role,
        "text": text,
        "tool_calls": [
            tool_call(c.get("id"), c.get(keys[0]), c.get(keys[1])) for _, c in sorted(calls.items())
        ],
    }
    if role == "tool":  # a tool message's text is the result the model saw
        message["tool_results"] = [{"id": tool_call_id, "result": json_or_value(text)}]
        message["text"] = None
    return message


_OI_CALL = re.compile(
    r"^message\.tool_calls\.(\d+)\.tool_call\.(id|function\.name|function\.arguments)$"
)
_OI_TEXT = re.compile(r"^message\.contents\.(\d+)\.message_content\.text$")


def _openinference_list(attrs: Mapping[str, Any], prefix: str) -> list[Message]:
    messages = []
    for _, fields in sorted(_indexed(attrs, prefix).items()):
        calls: dict[int, dict[str, Any]] = {}
        texts: dict[int, str] = {}
        for rest, value in fields.items():
            if m := _OI_CALL.match(rest):
                calls.setdefault(int(m.group(1)), {})[m.group(2)] = value
            elif (t := _OI_TEXT.match(rest)) and isinstance(value, str):
                texts[int(t.group(1))] = value
        text = fields.get("message.content")
        if not isinstance(text, str):
            text = "\n".join(v for _, v in sorted(texts.items())) or None
        messages.append(
            _indexed_message(
                fields.get("message.role"),
                text,
                calls,
                fields.get("message.tool_call_id"),
                ("function.name", "function.arguments"),
            )
        )
    return messages


def openinference_messages(
    attrs: Mapping[str, Any], events: list[dict[str, Any]]
) -> tuple[list[Message], list[Message]]:
    outputs = _openinference_list(attrs, "llm.output_messages.")
    if any(c["arguments"] is None for m in outputs for c in m["tool_calls"]):
        _arguments_from_output(outputs, attrs.get("output.value"))
    return _openinference_list(attrs, "llm.input_messages."), outputs


def _arguments_from_output(outputs: list[Message], value: Any) -> None:
    """Fills the arguments of requested calls that have none from `output.value`, the model's
    output message as JSON. OpenInference records a call's arguments in
    `tool_call.function.arguments` only when they are text; smolagents' `ChatMessage` holds
    them as a dict when its model is a Python function (a scripted `Model.generate`), and then
    only its `output.value` (the message's JSON) has them: the answer of a `final_answer`
    call, the arguments of every other. Matched by call id, else by position."""
    parsed = json_or_value(value) if isinstance(value, str) and '"tool_calls"' in value else None
    recorded = parsed.get("tool_calls") if isinstance(parsed, dict) else None
    if not isinstance(recorded, list):
        return
    by_id: dict[Any, Any] = {}
    in_order: list[Any] = []
    for call in recorded:
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        in_order.append(arguments)
        if isinstance(call, dict) and call.get("id") is not None:
            by_id[call["id"]] = arguments
    calls = [c for m in outputs for c in m["tool_calls"]]
    for position, call in enumerate(calls):
        if call["arguments"] is not None:
            continue
        if call["id"] is not None:
            found = by_id.get(call["id"])
        else:
            found = in_order[position] if len(in_order) == len(calls) else None
        call["arguments"] = json_or_value(found)


_TL_CALL = re.compile(r"^tool_calls\.(\d+)\.(id|name|arguments)$")


def _traceloop_list(attrs: Mapping[str, Any], prefix: str) -> list[Message]:
    messages = []
    for _, fields in sorted(_indexed(attrs, prefix).items()):
        calls: dict[int, dict[str, Any]] = {}
        for rest, value in fields.items():
            if m := _TL_CALL.match(rest):
                calls.setdefault(int(m.group(1)), {})[m.group(2)] = value
        content = fields.get("content")
        messages.append(
            _indexed_message(
                fields.get("role"),
                content if isinstance(content, str) else None,
                calls,
                fields.get("tool_call_id"),
                ("name", "arguments"),
            )
        )
    return messages


def traceloop_messages(
    attrs: Mapping[str, Any], events: list[dict[str, Any]]
) -> tuple[list[Message], list[Message]]:
    inputs = _traceloop_list(attrs, "gen_ai.prompt.")
    outputs = _traceloop_list(attrs, "gen_ai.completion.")
    if inputs or outputs:
        return inputs, outputs
    return genai_messages(attrs, events)  # current OpenLLMetry releases write the GenAI form
