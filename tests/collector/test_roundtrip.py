"""The real OpenTelemetry OTLP exporters deliver spans that read back field-for-field."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from spanscore.collector import Collector

from ..support.lake import query

ExporterFactory = Callable[[Collector], SpanExporter]

EXPORTERS: dict[str, ExporterFactory] = {
    "grpc": lambda c: GrpcExporter(endpoint=f"127.0.0.1:{c.grpc_port}", insecure=True),
    "grpc-gzip": lambda c: GrpcExporter(
        endpoint=f"127.0.0.1:{c.grpc_port}",
        insecure=True,
        compression=__import__("grpc").Compression.Gzip,
    ),
    "http": lambda c: HttpExporter(endpoint=f"http://127.0.0.1:{c.http_port}/v1/traces"),
    "http-gzip": lambda c: HttpExporter(
        endpoint=f"http://127.0.0.1:{c.http_port}/v1/traces", compression=Compression.Gzip
    ),
}


def _emit(provider: TracerProvider) -> None:
    tracer = provider.get_tracer("tests.roundtrip", "1.2.3")
    with tracer.start_as_current_span(
        "invoke_agent support",
        kind=SpanKind.SERVER,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "support",
            "gen_ai.conversation.id": "conv-1",
        },
    ) as root:
        root.add_event("gen_ai.user.message", {"content": "where is ORD-1?"})
        with tracer.start_as_current_span(
            "execute_tool get_order",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "get_order",
                "gen_ai.tool.call.id": "call_1",
                "gen_ai.tool.call.arguments": json.dumps({"order_id": "ORD-1", "n": 1}),
                "gen_ai.tool.call.result": json.dumps({"status": "shipped"}),
                "gen_ai.conversation.id": "conv-1",
                "int": 2**62,
                "float": 1.5,
                "bool": True,
                "list": ["a", "b"],
                "ints": [1, 2, 3],
            },
            links=[Link(root.get_span_context(), {"why": "test"})],
        ) as tool:
            tool.set_status(Status(StatusCode.ERROR, "boom"))
            tool.set_attribute("error.type", "TimeoutError")


@pytest.mark.parametrize("name", list(EXPORTERS))
def test_exporter_spans_read_back_field_for_field(
    collector: Collector, lake_dir: Path, name: str
) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": f"svc-{name}", "k": 7}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(BatchSpanProcessor(EXPORTERS[name](collector)))
    _emit(provider)
    assert provider.force_flush(10_000)
    provider.shutdown()
    sent: list[ReadableSpan] = list(memory.get_finished_spans())
    assert len(sent) == 2

    rows = query(
        lake_dir,
        """SELECT trace_id, span_id, parent_span_id, name, kind, start_time_unix_nano,
                  end_time_unix_nano, status_code, status_message, service_name, scope_name,
                  scope_version, attributes, events, links, resource, conversation_id,
                  operation, tool_name, tool_call_id, tool_arguments, tool_result, error_type,
                  agent_name, convention, ingest_time IS NOT NULL
           FROM spans ORDER BY start_time_unix_nano""",
    )
    assert len(rows) == 2
    by_id = {r[1]: r for r in rows}
    for span in sent:
        ctx = span.get_span_context()
        row = by_id[format(ctx.span_id, "016x")]
        assert row[0] == format(ctx.trace_id, "032x")
        assert row[2] == (format(span.parent.span_id, "016x") if span.parent else None)
        assert row[3] == span.name
        assert row[4] == span.kind.name
        assert (row[5], row[6]) == (span.start_time, span.end_time)
        assert row[7] == span.status.status_code.name
        assert row[8] == span.status.description
        assert row[9] == f"svc-{name}"
        assert (row[10], row[11]) == ("tests.roundtrip", "1.2.3")
        assert json.loads(row[12]) == {
            k: list(v) if isinstance(v, tuple) else v for k, v in span.attributes.items()
        }
        events = json.loads(row[13]) if row[13] else []
        assert [(e["name"], e["time_unix_nano"], e["attributes"]) for e in events] == [
            (e.name, e.timestamp, dict(e.attributes)) for e in span.events
        ]
        links = json.loads(row[14]) if row[14] else []
        assert [(link["span_id"], link["attributes"]) for link in links] == [
            (format(link.context.span_id, "016x"), dict(link.attributes)) for link in span.links
        ]
        assert json.loads(row[15])["k"] == 7
        assert row[16] == "conv-1"
        assert row[25] is True
    tool = next(r for r in rows if r[3] == "execute_tool get_order")
    assert tool[17:25] == (
        "execute_tool",
        "get_order",
        "call_1",
        '{"order_id": "ORD-1", "n": 1}',
        '{"status": "shipped"}',
        "TimeoutError",
        None,
        "genai",
    )
    assert json.loads(tool[12])["int"] == 2**62  # 64-bit integers survive exactly


def test_views_answer_for_the_conversation(collector: Collector, lake_dir: Path) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
    provider.add_span_processor(BatchSpanProcessor(EXPORTERS["grpc"](collector)))
    _emit(provider)
    provider.force_flush(10_000)
    provider.shutdown()
    calls = query(
        lake_dir,
        "SELECT conversation_id, turn_index, step_index, tool_name, tool_call_id, arguments, "
        "result, error FROM tool_calls",
    )
    assert calls == [
        (
            "conv-1",
            0,
            0,
            "get_order",
            "call_1",
            '{"order_id": "ORD-1", "n": 1}',
            '{"status": "shipped"}',
            "TimeoutError",
        )
    ]
    conversations = query(
        lake_dir,
        "SELECT conversation_id, agent_name, service_name, span_count, tool_call_count, "
        "error_count FROM conversations",
    )
    assert conversations == [("conv-1", "support", "svc", 2, 1, 1)]
