"""Hand-built OTLP requests for tests that need raw control (ids, sizes, bytes on the wire)."""

from __future__ import annotations

import itertools
import json
import os
import threading
import time

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

_counter = itertools.count(1)
_lock = threading.Lock()


def attr(key: str, value: object) -> common_pb2.KeyValue:
    kv = common_pb2.KeyValue(key=key)
    if isinstance(value, bool):
        kv.value.bool_value = value
    elif isinstance(value, int):
        kv.value.int_value = value
    elif isinstance(value, float):
        kv.value.double_value = value
    else:
        kv.value.string_value = str(value)
    return kv


def span(
    name: str = "execute_tool lookup",
    *,
    trace_id: bytes | None = None,
    span_id: bytes | None = None,
    attributes: dict[str, object] | None = None,
) -> trace_pb2.Span:
    with _lock:
        n = next(_counter)
    now = time.time_ns()
    return trace_pb2.Span(
        trace_id=trace_id if trace_id is not None else os.urandom(8) + n.to_bytes(8, "big"),
        span_id=span_id if span_id is not None else os.urandom(4) + n.to_bytes(4, "big"),
        name=name,
        kind=trace_pb2.Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=now,
        end_time_unix_nano=now + 1000,
        attributes=[attr(k, v) for k, v in (attributes or {}).items()],
    )


def request(spans: list[trace_pb2.Span], service: str = "test") -> bytes:
    req = trace_service_pb2.ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.append(attr("service.name", service))
    ss = rs.scope_spans.add()
    ss.scope.name = "tests"
    ss.spans.extend(spans)
    return bytes(req.SerializeToString())


def tool_spans(count: int, conversation: str = "conv") -> list[trace_pb2.Span]:
    return [
        span(
            "execute_tool get_order",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "get_order",
                "gen_ai.conversation.id": conversation,
                "gen_ai.tool.call.arguments": json.dumps({"order_id": f"ORD-{i}"}),
            },
        )
        for i in range(count)
    ]


def span_keys(spans: list[trace_pb2.Span]) -> set[tuple[str, str]]:
    return {(s.trace_id.hex(), s.span_id.hex()) for s in spans}
