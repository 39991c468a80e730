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


_POSITION = {name: i for i, name in enumerate(FIELDS)}


class Extractor:
    """Fills the extracted columns of one span (runs once per span: kept lean).

    The conversation id comes from the convention, then `conversation_attribute`, then the trace.
    """

    def __init__(self, conversation_attribute: str | None = None) -> None:
        self.conventions = CONVENTIONS
        self.extra_conversation_keys: tuple[str, ...] = (
            (conversation_attribute,) if conversation_attribute else ()
        )
        self._compiled = [
            (
                c,
                frozenset(c.markers),
                tuple((_POSITION[name], keys) for name, keys in c.keys.items()),
            )
            for c in self.conventions
        ]

    def extract(
        self,
        attrs: Mapping[str, Any],
        span_name: str,
        is_error: bool,
        exception_type: str | None,
        trace_id: str,
    ) -> list[Any]:
        """The values of `FIELDS`, in order."""
        out: list[Any] = [None] * len(FIELDS)
        for convention, markers, lookups in self._compiled:
            if not markers.isdisjoint(attrs):
                get = attrs.get
                for position, keys in lookups:
                    for key in keys:
                        value = get(key)
                        if value is not None:
                            out[position] = value if type(value) is str else _as_text(value)
                            break
                if out[2] is None:  # operation, from the span name's first word
                    out[2] = convention.operation_from_name.get(span_name.split(" ", 1)[0])
                if convention.user_message is not None:
                    out[7] = convention.user_message(attrs)
                out[9] = convention.name
                break
        if out[0] is None:
            for key in self.extra_conversation_keys:
                value = attrs.get(key)
                if value is not None:
                    out[0] = value if type(value) is str else _as_text(value)
                    break
            else:
                out[0] = trace_id
        if out[5] is not None:  # tool arguments: JSON text, or a non-JSON value as a string
            out[5] = _json_text(out[5])
        if out[8] is None and is_error:
            out[8] = exception_type
        return out
