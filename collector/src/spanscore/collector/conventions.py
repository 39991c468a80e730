"""Reading producer conventions into the lake's extracted columns: the one extraction point.

Each convention is data (which attributes mean what) plus, where data is not enough, a small
function. The collector calls `extract` once per span at ingest; the result fills `spans`'
columns `conversation_id`, `agent_name`, `operation`, `tool_name`, `tool_call_id`,
`tool_arguments`, `tool_result`, `user_message`, `error_type` and `convention`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

# Extracted fields, in the order `extract` returns them (the collector's row layout).
FIELDS = (
    "conversation_id",
    "agent_name",
    "operation",
    "tool_name",
    "tool_call_id",
    "tool_arguments",
    "tool_result",
    "user_message",
    "error_type",
    "convention",
)


@dataclass(frozen=True)
class Convention:
    """Attribute names a producer convention uses for each extracted field.

    `markers`: attribute keys whose presence says a span follows this convention.
    `keys`: extracted field -> attribute keys to try, first present wins.
    `user_message`: reads the latest user message from the attributes, if the convention has one.
    """

    name: str
    markers: tuple[str, ...]
    keys: Mapping[str, tuple[str, ...]]
    user_message: Callable[[Mapping[str, Any]], str | None] | None = None
    operation_from_name: Mapping[str, str] = field(default_factory=dict)


def _text_of_parts(parts: Any) -> str | None:
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return None
    texts: list[str] = [
        p["content"]
        for p in parts
        if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("content"), str)
    ]
    return "\n".join(texts) if texts else None


def genai_user_message(attrs: Mapping[str, Any]) -> str | None:
    """Latest user message of `gen_ai.input.messages` (a JSON string or an already-parsed list)."""
    raw = attrs.get("gen_ai.input.messages")
    if raw is None:
        return None
    messages = raw
    if isinstance(raw, str):
        try:
            messages = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return _text_of_parts(message.get("parts", message.get("content")))
    return None


GENAI = Convention(
    name="genai",
    markers=(
        "gen_ai.operation.name",
        "gen_ai.system",
        "gen_ai.provider.name",
        "gen_ai.tool.name",
        "gen_ai.agent.name",
        "gen_ai.conversation.id",
        "gen_ai.request.model",
    ),
    keys={
        "conversation_id": ("gen_ai.conversation.id",),
        "agent_name": ("gen_ai.agent.name",),
        "operation": ("gen_ai.operation.name",),
        "tool_name": ("gen_ai.tool.name",),
        "tool_call_id": ("gen_ai.tool.call.id",),
        "tool_arguments": ("gen_ai.tool.call.arguments",),
        "tool_result": ("gen_ai.tool.call.result",),
        "error_type": ("error.type",),
    },
    user_message=genai_user_message,
    operation_from_name={"execute_tool": "execute_tool", "invoke_agent": "invoke_agent"},
)

CONVENTIONS: tuple[Convention, ...] = (GENAI,)


def _json_text(value: Any) -> bytes | None:
    """Tool arguments as JSON text: JSON strings pass through (validated), values are encoded."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            orjson.loads(value)
        except orjson.JSONDecodeError:
            return orjson.dumps(value)  # not JSON (a Python repr, say): keep it as a string
        return value.encode()
    return orjson.dumps(value)


def _as_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


class Extractor:
    """Fills the extracted columns of one span.

    The conversation id comes from the convention, then `conversation_attribute`, then the trace.
    """

    def __init__(self, conversation_attribute: str | None = None) -> None:
        self.conventions = CONVENTIONS
        self.extra_conversation_keys: tuple[str, ...] = (
            (conversation_attribute,) if conversation_attribute else ()
        )

    def extract(
        self,
        attrs: Mapping[str, Any],
        span_name: str,
        is_error: bool,
        exception_type: str | None,
        trace_id: str,
    ) -> tuple[Any, ...]:
        found: Convention | None = None
        for convention in self.conventions:
            if any(marker in attrs for marker in convention.markers):
                found = convention
                break
        values: dict[str, Any] = {}
        if found is not None:
            for name, keys in found.keys.items():
                for key in keys:
                    value = attrs.get(key)
                    if value is not None:
                        values[name] = value
                        break
            if "operation" not in values:
                first_word = span_name.split(" ", 1)[0]
                if first_word in found.operation_from_name:
                    values["operation"] = found.operation_from_name[first_word]
        conversation = values.get("conversation_id")
        if conversation is None:
            for key in self.extra_conversation_keys:
                if attrs.get(key) is not None:
                    conversation = attrs[key]
                    break
        error_type = values.get("error_type")
        if error_type is None and is_error:
            error_type = exception_type
        user_message = found.user_message(attrs) if found and found.user_message else None
        return (
            _as_text(conversation) if conversation is not None else trace_id,
            _as_text(values.get("agent_name")),
            _as_text(values.get("operation")),
            _as_text(values.get("tool_name")),
            _as_text(values.get("tool_call_id")),
            _json_text(values.get("tool_arguments")),
            _as_text(values.get("tool_result")),
            user_message,
            _as_text(error_type),
            found.name if found else None,
        )
