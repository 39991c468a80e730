"""Post spans or log records to a collector over OTLP/HTTP (protobuf), each export on a fresh
connection, and fail the test unless the collector acknowledges it (200)."""

from __future__ import annotations

import datetime as dt
import http.client
from typing import Any

from opentelemetry.proto.trace.v1 import trace_pb2

from spanscore.collector import Collector

from . import otlp_factory as f
from .conversation_spans import as_log_record, chat_span, tool_span


def post(collector: Collector, spans: list[trace_pb2.Span]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", collector.http_port, timeout=30)
    conn.request("POST", "/v1/traces", f.request(spans), {"Content-Type": "application/x-protobuf"})
    response = conn.getresponse()
    assert response.status == 200, response.read()


def post_logs(collector: Collector, records: list[Any]) -> None:
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

    request = logs_service_pb2.ExportLogsServiceRequest()
    request.resource_logs.add().scope_logs.add().log_records.extend(records)
    conn = http.client.HTTPConnection("127.0.0.1", collector.http_port, timeout=30)
    conn.request(
        "POST", "/v1/logs", request.SerializeToString(), {"Content-Type": "application/x-protobuf"}
    )
    response = conn.getresponse()
    assert response.status == 200, response.read()


def post_lookup_conversation(
    collector: Collector, conversation: str, text: str, at: dt.datetime
) -> None:
    """A model call asking for a tool, the tool's span, and the answer; the first model call's
    messages sent as a log record, as newer GenAI instrumentations do."""
    start = int(at.timestamp() * 1e9)
    call: dict[str, Any] = {
        "id": f"{conversation}-1",
        "name": "lookup",
        "arguments": {"address": text},
    }
    asking = chat_span(conversation, user=f"ship it to {text}", calls=[call], at=start)
    record = as_log_record(asking)
    post(
        collector,
        [
            asking,
            tool_span(
                conversation,
                "lookup",
                call_id=call["id"],
                arguments={"address": text},
                result={"found": text},
                at=start + 10,
            ),
            chat_span(
                conversation,
                user=f"ship it to {text}",
                results=[(call["id"], {"found": text})],
                answer="done",
                at=start + 20,
            ),
        ],
    )
    post_logs(collector, [record])
