"""An OTLP receiver of metrics (and logs) on 127.0.0.1, for tests: the spanscore collector stores
no metrics. It is the real OTLP services (the `opentelemetry-proto` gRPC service stubs, and
OTLP/HTTP's protobuf bodies), keeping each request it answers; nothing of spanscore's in it."""

from __future__ import annotations

import contextlib
import gzip
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)


@dataclass
class Received:
    """What a receiver was sent: metrics and logs export requests, in order."""

    metrics: list[metrics_service_pb2.ExportMetricsServiceRequest] = field(default_factory=list)
    logs: list[logs_service_pb2.ExportLogsServiceRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def gauges(self) -> dict[tuple[str, frozenset[tuple[str, str]]], tuple[float, str]]:
        """Every gauge point: (metric name, attributes) -> (value, unit)."""
        points = {}
        with self.lock:
            requests = list(self.metrics)
        for request in requests:
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        assert metric.WhichOneof("data") == "gauge", metric.name
                        for point in metric.gauge.data_points:
                            attrs = frozenset(
                                (a.key, a.value.string_value) for a in point.attributes
                            )
                            points[(metric.name, attrs)] = (point.as_double, metric.unit)
        return points


class _Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, received: Received) -> None:
        self.received = received

    def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - the service's name
        with self.received.lock:
            self.received.metrics.append(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class _Logs(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self, received: Received) -> None:
        self.received = received

    def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - the service's name
        with self.received.lock:
            self.received.logs.append(request)
        return logs_service_pb2.ExportLogsServiceResponse()


@contextlib.contextmanager
def grpc_receiver() -> Iterator[tuple[int, Received]]:
    """A gRPC OTLP receiver: (its port, what it received); stopped on the way out."""
    received = Received()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_Metrics(received), server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_Logs(received), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port, received
    finally:
        server.stop(grace=None).wait(10)


@contextlib.contextmanager
def http_receiver() -> Iterator[tuple[int, Received]]:
    """An OTLP/HTTP (protobuf) receiver on /v1/metrics and /v1/logs: (port, what it got)."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            response: Any
            if self.path == "/v1/metrics":
                request: Any = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
                kept: list[Any] = received.metrics
                response = metrics_service_pb2.ExportMetricsServiceResponse()
            elif self.path == "/v1/logs":
                request = logs_service_pb2.ExportLogsServiceRequest.FromString(body)
                kept = received.logs
                response = logs_service_pb2.ExportLogsServiceResponse()
            else:
                self.send_error(404)
                return
            with received.lock:
                kept.append(request)
            data = response.SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
