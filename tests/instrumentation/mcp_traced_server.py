"""The customer-service tools as an MCP server over stdio, in a process of its own, with the MCP
SDK's own OpenTelemetry on, as a server's owner turns it on: an SDK tracer provider made global,
exporting over OTLP/HTTP to `OTEL_EXPORTER_OTLP_ENDPOINT` as `OTEL_SERVICE_NAME`. For each
`tools/call` the SDK records a SERVER `execute_tool` span named `tools/call NAME`, whose parent
is the trace context the client sent in `_meta`. Each span is exported as it ends (before the
response goes back), so the spans of the calls made are sent by the time the client has their
results."""

from __future__ import annotations

import sys
from pathlib import Path

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from spanscore.examples.customer_service.store import Store

# Run as a script: the repository, for the tests' own support modules.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.support.customer_service_mcp import make_server


def main() -> None:
    provider = TracerProvider(resource=Resource.create())
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    make_server(Store()).run("stdio")


if __name__ == "__main__":
    main()
