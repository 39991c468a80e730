"""Reading one span: `Extractor.extract` fills the lake's extracted columns (`FIELDS`).

Runs once per span at ingest, so it is kept lean: each convention's markers are tested against
the span's attribute keys, and the first convention that matches is read (see `producers`).
The conversation id comes from `CONVERSATION_KEYS`, then the configured attribute, then the
trace id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from spanscore.lake.schema import AGENT_OPERATIONS

from .genai import tool_span_events
from .messages import (
    ANSWER_TOOLS,
    arguments_json,
    as_text,
    json_or_value,
    summarize_messages,
    unwrap_result,
    unwrap_tool_output,
)
from .producers import CONVENTIONS, CONVERSATION_KEYS, FIELDS

_POSITION = {name: i for i, name in enumerate(FIELDS)}


# Tool spans that are no tool call: Google ADK wraps the calls of one model response in an
# `execute_tool (merged)` span named so, beside each call's own span.
NOT_TOOL_CALLS = frozenset({"(merged tools)"})
# A hand-off span named for the agent it hands to (OpenInference's Agents SDK instrumentation
# writes `handoff to <agent>` as a TOOL span; spanscore's shim `handoff <agent>`).
HANDOFF_PREFIX = "handoff to "
# Model-call spans that call no model: LlamaIndex's instrumentation records every method of an
# LLM class as an LLM span, including the one that only prepares the request (`OpenAI.
# _prepare_chat_with_tools`, beside the `OpenAI.astream_chat` that sends it). By method name.
NOT_MODEL_CALLS = frozenset({"_prepare_chat_with_tools"})


class Extractor:
    """Fills the extracted columns of one span (runs once per span: kept lean).

    The conversation id comes from `CONVERSATION_KEYS`, then `conversation_attribute`, then the
    trace id.
    """

    def __init__(self, conversation_attribute: str | None = None) -> None:
        self.conventions = CONVENTIONS
        self.extra_conversation_keys: tuple[str, ...] = (
            (conversation_attribute,) if conversation_attribute else ()
        )
        self.conversation_keys = CONVERSATION_KEYS + self.extra_conversation_keys
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
        events: Iterable[dict[str, Any]] = (),
    ) -> list[Any]:
        """The values of `FIELDS`, in order."""
        out: list[Any] = [None] * len(FIELDS)
        get = attrs.get
        for key in self.conversation_keys:
            value = get(key)
            if value is not None:
                out[0] = value if type(value) is str else as_text(value)
                break
        else:
            out[0] = trace_id
        names = attrs.keys()  # a keys view tests the few markers, not every attribute
        for convention, markers, lookups in self._compiled:
            if names.isdisjoint(markers):
                continue
            for position, keys in lookups:
                for key in keys:
                    value = get(key)
                    if value is not None:
                        out[position] = value if type(value) is str else as_text(value)
                        break
            if convention.operations is not None:
                kind_key, mapping = convention.operations
                kind = get(kind_key)
                if isinstance(kind, str) and kind in mapping:
                    out[2] = mapping[kind]
            if out[2] is None:  # operation, from the span name's first word
                out[2] = convention.operation_from_name.get(span_name.split(" ", 1)[0])
            if out[2] is None and out[3] is not None:
                out[2] = "execute_tool"  # a span naming the tool it runs is a tool call
            if convention.messages is not None and out[2] != "execute_tool":
                inputs, outputs = convention.messages(attrs, list(events))
                if inputs or outputs:
                    user, requested, results, text = summarize_messages(inputs, outputs)
                    out[7] = user
                    out[8] = orjson.dumps(requested) if requested else None
                    out[9] = orjson.dumps(results, default=str) if results else None
                    out[10] = text
            out[12] = convention.name
            break
        operation = out[2]
        if operation == "execute_tool":
            tool = out[3]
            if tool is None and span_name.startswith(HANDOFF_PREFIX):
                # OpenInference's Agents SDK instrumentation: a hand-off recorded as a tool
                # span, `handoff to <agent>`, the agent handing off in `input.value`
                operation = out[2] = "handoff"
                handing = get("input.value")
                out[1] = handing if isinstance(handing, str) and handing else out[1]
            elif tool in ANSWER_TOOLS or tool in NOT_TOOL_CALLS:
                # the answer, read from the model call that asked for it; or no call at all
                operation = out[2] = None
        elif operation == "chat" and span_name.rsplit(".", 1)[-1] in NOT_MODEL_CALLS:
            operation = out[2] = out[7] = out[8] = out[9] = out[10] = None
        if operation != "execute_tool":
            out[3] = out[4] = out[5] = out[6] = None  # tool fields only describe tool spans
            if operation in AGENT_OPERATIONS:
                # An agent's span repeats its model calls' messages: it never adds requested
                # calls or results (its user message and answer stay, for the turn).
                out[8] = out[9] = None
        else:
            if (out[5] is None or out[6] is None) and events:
                arguments, result = tool_span_events(events)
                out[5] = out[5] if out[5] is not None else as_text(arguments)
                out[6] = out[6] if out[6] is not None else as_text(result)
            result_text = out[6]
            if result_text is not None and result_text[:1] == "[":  # a provider's wrapping
                out[6] = as_text(unwrap_result(result_text))
            elif (
                result_text is not None and result_text[:1] == "{" and '"raw_output"' in result_text
            ):
                out[6] = unwrap_tool_output(result_text)
            elif result_text is not None and result_text[:1] == '"':
                # a returned string serialized again (traceloop-sdk's `@tool` output is
                # `json.dumps` of what the function returned): the string is the result
                text = json_or_value(result_text)
                out[6] = text if isinstance(text, str) else result_text
            if out[5] is not None:  # tool arguments: JSON text, or a non-JSON value as text
                out[5] = arguments_json(out[5])
        if out[11] is None and is_error:
            out[11] = exception_type
        return out
