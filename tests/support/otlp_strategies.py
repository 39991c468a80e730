"""Hypothesis strategies for structure-aware fuzzing of the OTLP decoders and the convention
mappers: requests that are valid protobuf but hostile in content (ids of every length, times
past 2262, attributes named like every convention's keys holding JSON of any shape), and the
same requests as OTLP/JSON and as mutated bytes.

Shared by `test_fuzz_decoders.py` (Hypothesis, in CI) and `fuzz_atheris.py` (longer runs).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

# Keys the convention mappers read, with the index slots the flattened ones use.
CONVENTION_KEYS = (
    "gen_ai.operation.name",
    "gen_ai.tool.name",
    "gen_ai.tool.call.id",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.conversation.id",
    "gen_ai.agent.name",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.event.content",
    "gen_ai.system",
    "session.id",
    "openinference.span.kind",
    "tool.name",
    "input.value",
    "output.value",
    "llm.input_messages.{i}.message.role",
    "llm.input_messages.{i}.message.content",
    "llm.input_messages.{i}.message.contents.{j}.message_content.text",
    "llm.output_messages.{i}.message.tool_calls.{j}.tool_call.function.name",
    "llm.output_messages.{i}.message.tool_calls.{j}.tool_call.function.arguments",
    "llm.output_messages.{i}.message.tool_calls.{j}.tool_call.id",
    "llm.input_messages.{i}.message.tool_call_id",
    "traceloop.span.kind",
    "traceloop.entity.name",
    "gen_ai.prompt.{i}.role",
    "gen_ai.prompt.{i}.content",
    "gen_ai.completion.{i}.tool_calls.{j}.name",
    "gen_ai.completion.{i}.tool_calls.{j}.arguments",
    "event.name",
    "exception.type",
    "message",
    "tool_calls",
    "content",
    "id",
)
EVENT_NAMES = (
    "gen_ai.system.message",
    "gen_ai.user.message",
    "gen_ai.assistant.message",
    "gen_ai.tool.message",
    "gen_ai.choice",
    "gen_ai.client.inference.operation.details",
    "exception",
    "",
)
# Index slots: ASCII digits, other Unicode digits ("²", "٣"), and things that are not digits.
INDEXES = st.sampled_from(["0", "1", "10", "²", "٣", "-1", "", "x", "0" * 30])

# JSON of any shape, with the words the message readers look for as keys and values.
WORDS = st.sampled_from(
    [
        "role",
        "parts",
        "type",
        "content",
        "tool_calls",
        "function",
        "name",
        "arguments",
        "id",
        "message",
        "response",
        "result",
        "text",
        "tool_call",
        "tool_call_response",
        "user",
        "assistant",
        "tool",
    ]
)
# Values as attributes can hold them (AnyValue integers are 64-bit).
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | WORDS
    | st.text(max_size=20)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(WORDS | st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=25,
)


# JSON text in a string attribute can hold more: integers past 64 bits (valid JSON that
# orjson refuses), NaN (Python's json writes it, JSON has none).
JSON_TEXT = JSON_VALUES.map(json.dumps) | st.builds(
    lambda n, word: json.dumps([{word: 0}]).replace("0", str(n)),
    st.integers(min_value=2**64, max_value=2**80) | st.just(float("nan")),
    WORDS,
)


@st.composite
def keys(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        return draw(st.text(max_size=30))
    template = draw(st.sampled_from(CONVENTION_KEYS))
    return template.format(i=draw(INDEXES), j=draw(INDEXES))


def _any_value(draw: st.DrawFn, depth: int = 0) -> AnyValue:
    kind = draw(
        st.sampled_from(
            ["string", "json", "int", "double", "bool", "bytes", "array", "kvlist", "empty"]
        )
    )
    if kind == "string":
        return AnyValue(string_value=draw(st.text(max_size=40) | WORDS))
    if kind == "json":
        return AnyValue(string_value=draw(JSON_TEXT))
    if kind == "int":
        return AnyValue(int_value=draw(st.integers(min_value=-(2**63), max_value=2**63 - 1)))
    if kind == "double":
        return AnyValue(double_value=draw(st.floats()))
    if kind == "bool":
        return AnyValue(bool_value=draw(st.booleans()))
    if kind == "bytes":
        return AnyValue(bytes_value=draw(st.binary(max_size=40)))
    if kind in ("array", "kvlist") and depth < 4:
        n = draw(st.integers(min_value=0, max_value=3))
        if kind == "array":
            return AnyValue(array_value={"values": [_any_value(draw, depth + 1) for _ in range(n)]})
        return AnyValue(
            kvlist_value={
                "values": [
                    KeyValue(key=draw(keys()), value=_any_value(draw, depth + 1)) for _ in range(n)
                ]
            }
        )
    return AnyValue()


@st.composite
def any_values(draw: st.DrawFn) -> AnyValue:
    return _any_value(draw)


@st.composite
def attributes(draw: st.DrawFn, max_size: int = 8) -> list[KeyValue]:
    n = draw(st.integers(min_value=0, max_value=max_size))
    return [KeyValue(key=draw(keys()), value=draw(any_values())) for _ in range(n)]


IDS_16 = st.one_of(st.binary(min_size=16, max_size=16), st.binary(max_size=17))
IDS_8 = st.one_of(st.binary(min_size=8, max_size=8), st.binary(max_size=9))
TIMES = st.integers(min_value=0, max_value=2**64 - 1)


@st.composite
def spans(draw: st.DrawFn) -> Span:
    span = Span(
        trace_id=draw(IDS_16),
        span_id=draw(IDS_8),
        parent_span_id=draw(st.just(b"") | IDS_8),
        name=draw(st.text(max_size=30) | st.sampled_from(["chat x", "execute_tool t"])),
        kind=draw(st.integers(min_value=0, max_value=5)),
        start_time_unix_nano=draw(TIMES),
        end_time_unix_nano=draw(TIMES),
        attributes=draw(attributes()),
        dropped_attributes_count=draw(st.integers(min_value=0, max_value=2**32 - 1)),
    )
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        span.events.add(
            name=draw(st.sampled_from(EVENT_NAMES) | st.text(max_size=10)),
            time_unix_nano=draw(TIMES),
            attributes=draw(attributes(max_size=4)),
        )
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        span.links.add(
            trace_id=draw(IDS_16), span_id=draw(IDS_8), attributes=draw(attributes(max_size=2))
        )
    span.status.code = draw(st.integers(min_value=0, max_value=2))
    span.status.message = draw(st.text(max_size=10))
    return span


@st.composite
def log_records(draw: st.DrawFn) -> LogRecord:
    record = LogRecord(
        time_unix_nano=draw(TIMES),
        observed_time_unix_nano=draw(TIMES),
        trace_id=draw(st.just(b"") | IDS_16),
        span_id=draw(st.just(b"") | IDS_8),
        severity_number=draw(st.integers(min_value=0, max_value=24)),
        event_name=draw(st.sampled_from(EVENT_NAMES) | st.text(max_size=10)),
        attributes=draw(attributes()),
    )
    if draw(st.booleans()):
        record.body.CopyFrom(draw(any_values()))
    return record


@st.composite
def trace_requests(draw: st.DrawFn) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        group = request.resource_spans.add()
        group.resource.attributes.extend(draw(attributes(max_size=3)))
        for _ in range(draw(st.integers(min_value=0, max_value=2))):
            scope = group.scope_spans.add()
            scope.scope.name = draw(st.text(max_size=10))
            scope.spans.extend(draw(st.lists(spans(), max_size=4)))
    return request


@st.composite
def logs_requests(draw: st.DrawFn) -> ExportLogsServiceRequest:
    request = ExportLogsServiceRequest()
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        group = request.resource_logs.add()
        group.resource.attributes.extend(draw(attributes(max_size=3)))
        for _ in range(draw(st.integers(min_value=0, max_value=2))):
            scope = group.scope_logs.add()
            scope.log_records.extend(draw(st.lists(log_records(), max_size=4)))
    return request


@st.composite
def mutated(draw: st.DrawFn, body: bytes) -> bytes:
    """`body` with a few byte-level edits: flips, cuts, insertions, duplications."""
    data = bytearray(body)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "duplicate"]))
        at = draw(st.integers(min_value=0, max_value=len(data)))
        if op == "flip" and data:
            at = min(at, len(data) - 1)
            data[at] ^= draw(st.integers(min_value=1, max_value=255))
        elif op == "cut":
            del data[at : at + draw(st.integers(min_value=1, max_value=8))]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            data[at:at] = data[at : at + draw(st.integers(min_value=1, max_value=16))]
    return bytes(data)


def otlp_json(message: Any) -> dict[str, Any]:
    """OTLP/JSON: protobuf's JSON mapping with ids as hex (as the OTLP spec says)."""
    import base64

    from google.protobuf import json_format

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: base64.b64decode(v).hex()
                if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str)
                else fix(v)
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [fix(v) for v in node]
        return node

    out: dict[str, Any] = fix(json_format.MessageToDict(message))
    return out


@st.composite
def json_junk(draw: st.DrawFn, shape_keys: tuple[str, str, str]) -> Any:
    """Documents with OTLP/JSON's nesting keys holding values of any type."""
    groups_key, scopes_key, items_key = shape_keys
    item = JSON_VALUES | st.dictionaries(
        st.sampled_from(
            [
                "traceId",
                "spanId",
                "parentSpanId",
                "name",
                "attributes",
                "events",
                "links",
                "startTimeUnixNano",
                "timeUnixNano",
                "body",
                "status",
                "kind",
            ]
        ),
        JSON_VALUES,
        max_size=6,
    )
    scope = JSON_VALUES | st.fixed_dictionaries(
        {items_key: JSON_VALUES | st.lists(item, max_size=3)},
        optional={"scope": JSON_VALUES},
    )
    group = JSON_VALUES | st.fixed_dictionaries(
        {scopes_key: JSON_VALUES | st.lists(scope, max_size=2)},
        optional={"resource": JSON_VALUES},
    )
    return draw(JSON_VALUES | st.fixed_dictionaries({groups_key: st.lists(group, max_size=2)}))
