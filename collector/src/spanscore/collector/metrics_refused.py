"""OTLP metrics, answered and not stored: `/v1/metrics` and the gRPC `MetricsService`.

The lake holds traces and log records. An exporter pointed at the collector with every signal
(`OTEL_EXPORTER_OTLP_ENDPOINT`, as `evaluate --export-otlp` is for a run's events and figures)
would otherwise get "not found" for its metrics, which reads as an outage. It gets a success
instead, whose partial success rejects every data point and says why: the exporter reports
that once per export, as OTLP means it to, and retries nothing.
"""

from __future__ import annotations

import json

from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

from . import otlp

NOT_STORED = (
    "metrics are not stored: spanscore stores traces and log records; send metrics to a "
    "metrics backend (OTEL_EXPORTER_OTLP_METRICS_ENDPOINT)"
)
METRICS_SERVICE = "opentelemetry.proto.collector.metrics.v1.MetricsService"


def data_points(request: metrics_service_pb2.ExportMetricsServiceRequest) -> int:
    """How many data points the request holds, of every kind of metric."""
    count = 0
    for resource in request.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                kind = metric.WhichOneof("data")
                if kind is not None:
                    count += len(getattr(metric, kind).data_points)
    return count


def answer(body: bytes, as_json: bool) -> bytes:
    """The response to an export of `body` (protobuf, or OTLP/JSON): every data point
    rejected, with `NOT_STORED`. otlp.BadRequest when the body is no metrics export."""
    request = metrics_service_pb2.ExportMetricsServiceRequest()
    try:
        if as_json:
            json_format.ParseDict(json.loads(body or b"{}"), request, ignore_unknown_fields=True)
        else:
            request.ParseFromString(body)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise otlp.BadRequest(f"not an OTLP metrics export: {otlp.clip(str(exc))}") from None
    except Exception as exc:  # protobuf's DecodeError
        raise otlp.BadRequest(f"not an OTLP metrics export: {otlp.clip(str(exc))}") from None
    response = metrics_service_pb2.ExportMetricsServiceResponse()
    response.partial_success.rejected_data_points = data_points(request)
    response.partial_success.error_message = NOT_STORED
    if as_json:
        return str(json_format.MessageToJson(response, indent=None)).encode()
    return bytes(response.SerializeToString())
