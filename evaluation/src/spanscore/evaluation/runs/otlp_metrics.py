"""A run's figures as OTLP metrics (`spanscore evaluate --export-otlp`): the gauges of
`run_metrics.run_figures`, the same figures the node-exporter textfile holds, sent once per
run (once per closed period with `--follow`).

The OpenTelemetry metrics SDK builds them (a meter, one synchronous gauge per figure, read
once by an in-memory reader) and the SDK's OTLP metric exporter sends them (HTTP/protobuf, or
gRPC), configured by the standard `OTEL_EXPORTER_OTLP_*` variables, the metrics signal's first
(`..._METRICS_ENDPOINT`, `..._METRICS_PROTOCOL`, `..._METRICS_HEADERS`, `..._METRICS_TIMEOUT`).
The exporter retries within its timeout; what it could not send is reported, never raised: an
export never fails the run.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from spanscore.evaluation.runs.export_otlp import resource
from spanscore.evaluation.runs.options import _version
from spanscore.evaluation.runs.result import RunResult
from spanscore.evaluation.runs.run_metrics import Figure, run_figures

log = logging.getLogger("spanscore.export")

_SCOPE = "spanscore.evaluation"


@dataclass(slots=True)
class MetricsOutcome:
    """What sending a run's figures did: `points` sent (0 when it failed, with the `error`)."""

    endpoint: str
    points: int = 0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "points": self.points, "error": self.error}

    def describe(self) -> str:
        """One line for the run's summary."""
        if self.error:
            return f"the run's metrics could not be exported to {self.endpoint} ({self.error})"
        return f"exported the run's metrics ({self.points} points) to {self.endpoint}"


def _exporter(endpoint: str, protocol: str) -> Any:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(
            endpoint=endpoint, insecure=endpoint.startswith("http://") or None
        )
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetricExporter,
    )

    return HttpMetricExporter(endpoint=endpoint)


def metrics_data(figures: list[Figure]) -> Any:
    """The figures as the SDK's `MetricsData`: one gauge each, one point per sample."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(resource=resource(), metric_readers=[reader])
    try:
        meter = provider.get_meter(_SCOPE, _version())
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
    try:
        exporter = _exporter(endpoint, protocol)
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
    return outcome


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]
