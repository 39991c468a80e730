"""Post spans or log records to a collector over OTLP/HTTP (protobuf), each export on a fresh
connection, and fail the test unless the collector acknowledges it (200)."""

from __future__ import annotations

import http.client
from typing import Any

from opentelemetry.proto.trace.v1 import trace_pb2

from spanscore.collector import Collector

from . import otlp_factory as f


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
