"""A run's figures as OTLP metrics (`spanscore evaluate --export-otlp`): the gauges of
`run_metrics.run_figures`, the same figures the node-exporter textfile holds, sent once per
run (once per closed period with `--follow`).

The OpenTelemetry metrics SDK builds them (a meter, one synchronous gauge per figure, read
once by an in-memory reader) and the SDK's OTLP metric exporter sends them (HTTP/protobuf, or
gRPC), configured by the standard `OTEL_EXPORTER_OTLP_*` variables, the metrics signal's first
(`..._METRICS_ENDPOINT`, `..._METRICS_PROTOCOL`, `..._METRICS_HEADERS`, `..._METRICS_TIMEOUT`).
The exporter retries within its timeout; what it could not send is reported, never raised: an
export never fails the run.

An endpoint may take the export and keep none of it, saying so in the response's partial
success (a spanscore collector: "metrics are not stored"). The SDK's exporters read no response,
so this module reads it beside them (the HTTP exporter's session, the gRPC exporter's stub) and
reports it: once per endpoint in a process (a follower sends every period), as a note, not as
an endpoint that failed.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from spanscore.evaluation.runs.export_otlp import resource
from spanscore.evaluation.runs.options import installed_version
from spanscore.evaluation.runs.result import RunResult
from spanscore.evaluation.runs.run_metrics import Figure, run_figures

log = logging.getLogger("spanscore.export")

_SCOPE = "spanscore.evaluation"


@dataclass(slots=True)
class MetricsOutcome:
    """What sending a run's figures did: `points` sent (0 when it failed, with the `error`),
    of which the endpoint kept none of `rejected` (its partial success said so, and why:
    `rejected_because`); `noted`: this process said so already (to this endpoint)."""

    endpoint: str
    points: int = 0
    error: str | None = None
    rejected: int = 0
    rejected_because: str | None = None
    noted: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "points": self.points,
            "error": self.error,
            "rejected": self.rejected,
            "rejected_because": self.rejected_because,
            "noted": self.noted,
        }

    def describe(self) -> str:
        """One line for the run's summary ("" when it was said once already)."""
        if self.error:
            return f"the run's metrics could not be exported to {self.endpoint} ({self.error})"
        if self.rejected:
            if self.noted:
                return ""
            return (
                f"the run's metrics reached {self.endpoint}, which keeps none of them "
                f"({self.rejected} points: {self.rejected_because or 'no reason given'}); "
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT sends them elsewhere, "
                "OTEL_METRICS_EXPORTER=none not at all"
            )
        return f"exported the run's metrics ({self.points} points) to {self.endpoint}"


# Endpoints whose partial success this process reported already (see the module doc).
_NOTED: set[str] = set()


class _Rejections:
    """The partial successes of the responses to one export (see the module doc)."""

    def __init__(self) -> None:
        self.points = 0
        self.message: str | None = None

    def read(self, response: Any) -> None:
        partial = getattr(response, "partial_success", None)
        if partial is not None and partial.rejected_data_points:
            self.points += int(partial.rejected_data_points)
            self.message = self.message or partial.error_message or None

    def read_http(self, response: Any, *_: Any, **__: Any) -> Any:
        """A `requests` response hook: the body of a 200 is the protobuf response."""
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

        if response.status_code == 200 and response.content:
            try:
                self.read(
                    metrics_service_pb2.ExportMetricsServiceResponse.FromString(response.content)
                )
            except Exception:  # not the protobuf response: nothing to read
                log.debug("unreadable OTLP metrics response", exc_info=True)
        return response


def _exporter(endpoint: str, protocol: str, rejections: _Rejections) -> Any:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter(
            endpoint=endpoint, insecure=endpoint.startswith("http://") or None
        )
        stub = getattr(exporter, "_client", None)  # the SDK drops the stub's response
        if stub is not None and hasattr(stub, "Export"):
            exporter._client = _ReadingStub(stub, rejections)  # type: ignore[assignment]
        return exporter
    import requests
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetricExporter,
    )

    session = requests.Session()
    session.hooks["response"].append(rejections.read_http)
    return HttpMetricExporter(endpoint=endpoint, session=session)


class _ReadingStub:
    """The gRPC exporter's stub, whose `Export` responses `rejections` reads."""

    def __init__(self, stub: Any, rejections: _Rejections) -> None:
        self._stub = stub
        self._rejections = rejections

    def Export(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 (the stub's name)
        response = self._stub.Export(*args, **kwargs)
        self._rejections.read(response)
        return response


def metrics_data(figures: list[Figure]) -> Any:
    """The figures as the SDK's `MetricsData`: one gauge each, one point per sample."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(resource=resource(), metric_readers=[reader])
    try:
        meter = provider.get_meter(_SCOPE, installed_version())
        for figure in figures:
            gauge = meter.create_gauge(figure.otlp_name, unit=figure.unit, description=figure.help)
            for labels, value in figure.samples:
                attributes = {k: v for k, v in labels.items() if v}
                gauge.set(float(value), attributes)
        return reader.get_metrics_data()
    finally:
        provider.shutdown()


def send_run_metrics(
    result: RunResult,
    suite: str,
    endpoint: str,
    protocol: str = "http/protobuf",
    *,
    now: dt.datetime | None = None,
) -> MetricsOutcome:
    """Send the run's figures; never raises for the endpoint's sake (see the module doc)."""
    from opentelemetry.sdk.metrics.export import MetricExportResult

    figures = run_figures(result, suite, now)
    outcome = MetricsOutcome(endpoint)
    rejections = _Rejections()
    try:
        exporter = _exporter(endpoint, protocol, rejections)
    except Exception as exc:  # a malformed endpoint the exporter refuses
        outcome.error = _said(exc)
        return outcome
    try:
        done = exporter.export(metrics_data(figures)) == MetricExportResult.SUCCESS
        if done:
            outcome.points = sum(len(f.samples) for f in figures)
        else:
            outcome.error = "the endpoint refused or could not be reached"
    except Exception as exc:  # the exporter may raise on network errors
        outcome.error = _said(exc)
    finally:
        try:
            exporter.shutdown()
        except Exception:  # pragma: no cover - closing what failed to open
            log.debug("closing the OTLP metric exporter failed", exc_info=True)
    if outcome.error:
        log.warning("metrics of run %s: %s", result.run_id, outcome.describe())
    elif rejections.points:
        outcome.rejected, outcome.rejected_because = rejections.points, rejections.message
        outcome.noted = endpoint in _NOTED
        _NOTED.add(endpoint)
    return outcome


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]
