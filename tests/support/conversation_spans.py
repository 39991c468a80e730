"""The spans and log records of an agent's conversation, built by hand: model calls (`chat_span`)
with their messages and tool calls, tool executions (`tool_span`), an MCP server's side of one
(`server_tool_span`), a model call's messages moved to a log record (`as_log_record`), a log
record about a span (`log_record`); times from `T0`."""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.proto.trace.v1 import trace_pb2

from . import otlp_factory as f

T0 = 1_700_000_000_000_000_000


def chat_span(
    conversation: str | None,
    *,
    user: str | None,
    calls: list[dict[str, Any]] = (),  # type: ignore[assignment]
    results: list[tuple[str, Any]] = (),  # type: ignore[assignment]
    answer: str | None = None,
    at: int,
    trace_id: bytes | None = None,
) -> trace_pb2.Span:
    inputs: list[dict[str, Any]] = []
    if user is not None:
        inputs.append({"role": "user", "parts": [{"type": "text", "content": user}]})
    if results:
        inputs.append(
            {
                "role": "tool",
                "parts": [
                    {"type": "tool_call_response", "id": i, "response": r} for i, r in results
                ],
            }
        )
    parts: list[dict[str, Any]] = [{"type": "tool_call", **c} for c in calls]
    if answer is not None:
        parts.append({"type": "text", "content": answer})
    attributes: dict[str, object] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": json.dumps(inputs),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": parts}]),
    }
    if conversation is not None:
        attributes["gen_ai.conversation.id"] = conversation
    span = f.span("chat gpt", trace_id=trace_id, attributes=attributes)
    span.start_time_unix_nano = at
    span.end_time_unix_nano = at + 100
    return span


def tool_span(
    conversation: str | None,
    name: str,
    *,
    at: int,
    call_id: str | None = None,
    arguments: Any = None,
    result: Any = None,
    trace_id: bytes | None = None,
    parent: bytes | None = None,
) -> trace_pb2.Span:
    attributes: dict[str, object] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
    }
    if conversation is not None:
        attributes["gen_ai.conversation.id"] = conversation
    if call_id is not None:
        attributes["gen_ai.tool.call.id"] = call_id
    if arguments is not None:
        attributes["gen_ai.tool.call.arguments"] = json.dumps(arguments)
    if result is not None:
        attributes["gen_ai.tool.call.result"] = json.dumps(result)
    span = f.span(f"execute_tool {name}", trace_id=trace_id, attributes=attributes)
    if parent is not None:
        span.parent_span_id = parent
    span.start_time_unix_nano = at
    span.end_time_unix_nano = at + 100
    return span


def server_tool_span(
    name: str, *, at: int, end: int, trace_id: bytes, parent: bytes | None = None
) -> trace_pb2.Span:
    """An MCP server's span of a `tools/call` (as the MCP SDK records it): kind SERVER,
    `execute_tool`, the tool's name, neither arguments nor result, no conversation id (it
    shares its caller's trace, which carries one)."""
    attributes: dict[str, object] = {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
    }
    span = f.span(f"tools/call {name}", trace_id=trace_id, attributes=attributes)
    span.kind = trace_pb2.Span.SPAN_KIND_SERVER
    if parent is not None:
        span.parent_span_id = parent
    span.start_time_unix_nano = at
    span.end_time_unix_nano = end
    return span


# Where a model call's messages are on its span (moved to a log record by `as_log_record`).
MESSAGES = ("gen_ai.input.messages", "gen_ai.output.messages")


def as_log_record(span: trace_pb2.Span) -> Any:
    """Move a model call's messages from its span to a log record of it (the
    `gen_ai.client.inference.operation.details` event)."""
    from opentelemetry.proto.logs.v1 import logs_pb2

    moved = [a for a in span.attributes if a.key in MESSAGES]
    kept = [a for a in span.attributes if a.key not in MESSAGES]
    del span.attributes[:]
    span.attributes.extend(kept)
    return logs_pb2.LogRecord(
        time_unix_nano=span.end_time_unix_nano,
        event_name="gen_ai.client.inference.operation.details",
        trace_id=span.trace_id,
        span_id=span.span_id,
        attributes=moved,
    )


def log_record(span: trace_pb2.Span, event: str, body: dict[str, Any] | None, **attrs: Any) -> Any:
    from opentelemetry.proto.logs.v1 import logs_pb2

    record = logs_pb2.LogRecord(
        trace_id=span.trace_id,
        span_id=span.span_id,
        time_unix_nano=span.start_time_unix_nano,
        event_name=event,
        attributes=[f.attr(k, v) for k, v in attrs.items()],
    )
    if body is not None:
        for key, value in body.items():
            kv = record.body.kvlist_value.values.add(key=key)
            kv.value.string_value = value if isinstance(value, str) else json.dumps(value)
    return record
