"""Raw OTLP exports over OTLP/HTTP (protobuf or JSON) and OTLP/gRPC, for tests that need
control of every byte: build requests by hand (`make_span`, `trace_request`, `make_log`,
`logs_request`, `otlp_json`), send them over either transport (`export`, `post`, `post_raw`,
`grpc_export`), and read the answer the same way whichever carried it (`Reply`), then check it
(`assert_refused`, `assert_partial`, `assert_clean_success`, `still_serving`).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from spanscore.collector import Collector

from .lake import query

TRACE_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
LOGS_METHOD = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
TRANSPORTS = ("http", "grpc")  # OTLP/HTTP with protobuf bodies, OTLP/gRPC

# --- building requests -----------------------------------------------------------------------


def new_trace_id() -> bytes:
    return b"\x01" + os.urandom(15)  # never all zero


def new_span_id() -> bytes:
    return b"\x02" + os.urandom(7)


def attr(key: str, value: Any) -> KeyValue:
    if isinstance(value, bool):
        any_value = AnyValue(bool_value=value)
    elif isinstance(value, int):
        any_value = AnyValue(int_value=value)
    elif isinstance(value, float):
        any_value = AnyValue(double_value=value)
    else:
        any_value = AnyValue(string_value=value)
    return KeyValue(key=key, value=any_value)


def make_span(name: str, *, attributes: dict[str, Any] | None = None, **fields: Any) -> Span:
    span = Span(
        trace_id=fields.pop("trace_id", None) or new_trace_id(),
        span_id=fields.pop("span_id", None) or new_span_id(),
        name=name,
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=1_700_000_000_000_000_000,
        end_time_unix_nano=1_700_000_000_250_000_000,
        **fields,
    )
    span.attributes.extend(attr(k, v) for k, v in (attributes or {}).items())
    return span


def trace_request(*groups: Iterable[Span], service: str = "bad-input") -> ExportTraceServiceRequest:
    """One ResourceSpans per group of spans."""
    request = ExportTraceServiceRequest()
    for spans in groups:
        request.resource_spans.append(
            ResourceSpans(
                resource=Resource(attributes=[attr("service.name", service)]),
                scope_spans=[
                    ScopeSpans(scope=InstrumentationScope(name="tests.bad_input"), spans=spans)
                ],
            )
        )
    return request


def make_log(**fields: Any) -> LogRecord:
    record = LogRecord(
        time_unix_nano=1_700_000_000_500_000_000,
        severity_number=9,
        severity_text="INFO",
        event_name="gen_ai.user.message",
        body=AnyValue(string_value="where is ORD-1?"),
        attributes=[attr("gen_ai.conversation.id", "conv-logs")],
        **fields,
    )
    return record


def logs_request(*records: LogRecord) -> ExportLogsServiceRequest:
    return ExportLogsServiceRequest(
        resource_logs=[
            ResourceLogs(
                resource=Resource(attributes=[attr("service.name", "bad-input-logs")]),
                scope_logs=[
                    ScopeLogs(
                        scope=InstrumentationScope(name="tests.bad_input"), log_records=records
                    )
                ],
            )
        ]
    )


_ID_KEYS = {"traceId", "spanId", "parentSpanId"}


def otlp_json(message: Message) -> bytes:
    """OTLP/JSON: protobuf's JSON mapping (64-bit ints as strings), but ids as hex, not base64."""

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: base64.b64decode(v).hex() if k in _ID_KEYS else fix(v) for k, v in node.items()
            }
        if isinstance(node, list):
            return [fix(v) for v in node]
        return node

    return json.dumps(fix(json_format.MessageToDict(message))).encode()


# --- sending ---------------------------------------------------------------------------------


@dataclass
class Reply:
    """An export's answer, whichever transport carried it."""

    transport: str
    status: int | grpc.StatusCode  # HTTP status, or the gRPC status code
    message: str = ""  # the error's message, or partial_success.error_message on success
    rejected: int = 0  # partial_success.rejected_spans / rejected_log_records
    rpc_code: int | None = None  # google.rpc.Code in the error body / status details
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    @property
    def ok(self) -> bool:
        return self.status in (200, grpc.StatusCode.OK)


def http_request(
    collector: Collector,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection: (status, headers with lower-case names, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", collector.http_port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data
    finally:
        conn.close()


def post_raw(collector: Collector, request: bytes) -> Reply:
    """Write a hand-made HTTP request in one go, then read the answer (keeps the client out of
    the server's way: the whole request is in the socket before the server reads any of it)."""
    with socket.create_connection(("127.0.0.1", collector.http_port), timeout=30) as sock:
        sock.sendall(request)
        response = http.client.HTTPResponse(sock)
        response.begin()
        data = response.read()
        return http_reply(response.status, {k.lower(): v for k, v in response.getheaders()}, data)


def post(
    collector: Collector,
    body: bytes,
    *,
    signal: str = "traces",
    content_type: str | None = PROTOBUF,
    headers: dict[str, str] | None = None,
) -> Reply:
    all_headers = dict(headers or {})
    if content_type is not None:
        all_headers["Content-Type"] = content_type
    status, got, data = http_request(collector, "POST", f"/v1/{signal}", body, all_headers)
    return http_reply(status, got, data, signal)


def http_reply(status: int, got: dict[str, str], data: bytes, signal: str = "traces") -> Reply:
    """Read an OTLP/HTTP answer: the Export*ServiceResponse, or the error's Status."""
    reply = Reply("http", status, headers=got, body=data)
    as_json = got.get("content-type", "").startswith(JSON)
    if status == 200 and as_json:
        partial = json.loads(data).get("partialSuccess", {})
        reply.rejected = int(partial.get("rejectedSpans", partial.get("rejectedLogRecords", 0)))
        reply.message = partial.get("errorMessage", "")
    elif status == 200:
        assert got.get("content-type") == PROTOBUF
        response_type = (
            ExportTraceServiceResponse if signal == "traces" else ExportLogsServiceResponse
        )
        partial_pb = response_type.FromString(data).partial_success
        reply.rejected = (
            partial_pb.rejected_spans if signal == "traces" else partial_pb.rejected_log_records
        )
        reply.message = partial_pb.error_message
    elif as_json:
        doc = json.loads(data)
        reply.rpc_code, reply.message = doc["code"], doc["message"]
    else:
        assert got.get("content-type") == PROTOBUF, got
        status_pb = status_pb2.Status.FromString(data)
        reply.rpc_code, reply.message = status_pb.code, status_pb.message
    return reply


def grpc_export(
    collector: Collector,
    body: bytes,
    *,
    signal: str = "traces",
    authorization: str | None = None,
    compression: grpc.Compression | None = None,
) -> Reply:
    """Send raw bytes as the request message, so that broken protobuf reaches the collector."""
    method, response_type = (
        (TRACE_METHOD, ExportTraceServiceResponse)
        if signal == "traces"
        else (LOGS_METHOD, ExportLogsServiceResponse)
    )
    metadata = (("authorization", authorization),) if authorization is not None else None
    address = f"127.0.0.1:{collector.grpc_port}"
    with grpc.insecure_channel(address, compression=compression) as channel:
        export = channel.unary_unary(
            method,
            request_serializer=lambda b: b,
            response_deserializer=response_type.FromString,
        )
        try:
            response = export(body, metadata=metadata, timeout=30)
        except grpc.RpcError as exc:
            reply = Reply("grpc", exc.code(), message=exc.details() or "")
            for key, value in exc.trailing_metadata() or ():
                if key == "grpc-status-details-bin":
                    details = status_pb2.Status.FromString(value)
                    assert details.message == reply.message
                    reply.rpc_code = details.code
            return reply
    partial = response.partial_success
    rejected = partial.rejected_spans if signal == "traces" else partial.rejected_log_records
    return Reply("grpc", grpc.StatusCode.OK, partial.error_message, rejected)


def export(
    collector: Collector,
    transport: str,
    request: Message | bytes,
    *,
    signal: str = "traces",
    token: str | None = None,
) -> Reply:
    """Export over `transport`: "http" (protobuf), "http-json" or "grpc"."""
    authorization = f"Bearer {token}" if token else None
    if transport == "grpc":
        body = request if isinstance(request, bytes) else request.SerializeToString()
        return grpc_export(collector, body, signal=signal, authorization=authorization)
    headers = {"Authorization": authorization} if authorization else {}
    if transport == "http-json":
        body = request if isinstance(request, bytes) else otlp_json(request)
        return post(collector, body, signal=signal, content_type=JSON, headers=headers)
    assert transport == "http", transport
    body = request if isinstance(request, bytes) else request.SerializeToString()
    return post(collector, body, signal=signal, headers=headers)


# --- checking --------------------------------------------------------------------------------

EXPECTED_CODES = {  # HTTP status and gRPC code for each refusal
    "invalid": (400, grpc.StatusCode.INVALID_ARGUMENT),
    "unauthenticated": (401, grpc.StatusCode.UNAUTHENTICATED),
}


def assert_refused(reply: Reply, kind: str, *fragments: str) -> None:
    http_status, grpc_code = EXPECTED_CODES[kind]
    expected = grpc_code if reply.transport == "grpc" else http_status
    assert reply.status == expected, reply
    if reply.transport != "grpc" or reply.rpc_code is not None:
        assert reply.rpc_code == grpc_code.value[0], reply
    assert_mentions(reply.message, *fragments)


def assert_mentions(message: str | None, *fragments: str) -> None:
    assert message, "the client was told nothing"
    for fragment in fragments:
        assert fragment.lower() in message.lower(), f"{fragment!r} not in {message!r}"


def assert_partial(reply: Reply, rejected: int, *fragments: str) -> None:
    assert reply.ok, reply
    assert reply.rejected == rejected, reply
    assert_mentions(reply.message, *fragments)


def assert_clean_success(reply: Reply) -> None:
    assert reply.ok, reply
    assert (reply.rejected, reply.message) == (0, ""), reply


def span_ids(lake_dir: Path) -> set[str]:
    return {row[0] for row in query(lake_dir, "SELECT span_id FROM spans")}


def still_serving(collector: Collector, token: str | None = None) -> set[str]:
    """A valid export over each transport right after the bad one succeeds. Returns the span
    ids sent, which the test then finds in the lake (one lake read per test keeps them fast)."""
    sent = set()
    for transport in TRANSPORTS:
        span = make_span(f"still serving over {transport}")
        assert_clean_success(export(collector, transport, trace_request([span]), token=token))
        sent.add(span.span_id.hex())
    return sent


def hexes(spans: Iterable[Span]) -> set[str]:
    return {s.span_id.hex() for s in spans}
