"""The OTLP/gRPC port reads each connection's first bytes: HTTP/1 sent there (an OTLP/HTTP
exporter given the wrong port) is answered, logged and counted, while gRPC (and TLS) go on to
grpcio untouched, on the same port at the same time."""

from __future__ import annotations

import json
import socket
import threading
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from spanscore.collector.grpc_port import HTTP1, OTHER, OncePerClient, classify

from ..support.collector import ServeProcess, start_collector
from ..support.lake import query
from ..support.polling import wait_for

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


@pytest.mark.parametrize(
    ("first", "kind"),
    [
        (PREFACE, OTHER),
        (b"PR", OTHER),  # the preface parts from POST, PUT and PATCH at its second byte
        (b"\x16\x03\x01\x02\x00\x01", OTHER),  # a TLS ClientHello: relayed, grpcio speaks TLS
        (b"POST /v1/traces HTTP/1.1\r\n", HTTP1),
        (b"GET /status HTTP/1.1\r\n", HTTP1),
        (b"OPTIONS * HTTP/1.1\r\n", HTTP1),
        (b"PUT ", HTTP1),
        (b"P", None),  # not enough yet: POST? PRI?
        (b"POST", None),  # POSTX would be no method: wait for the space
        (b"post /v1/traces", OTHER),  # methods are case-sensitive
        (b"\x00\x00\x12\x04", OTHER),  # bytes of no protocol we know: grpcio's to refuse
    ],
    ids=[
        "h2-preface",
        "h2-preface-2-bytes",
        "tls",
        "otlp-http",
        "status",
        "options",
        "put",
        "one-byte",
        "method-without-space",
        "lowercase",
        "binary",
    ],
)
def test_first_bytes_are_classified(first: bytes, kind: str | None) -> None:
    assert classify(first) == kind


def test_a_client_is_logged_once_per_interval_and_the_table_is_bounded() -> None:
    once = OncePerClient(every_s=60, limit=2)
    assert once("10.0.0.1", now=0)
    assert not once("10.0.0.1", now=59)  # the same exporter's next batch
    assert once("10.0.0.2", now=1)  # another client is news
    assert not once("10.0.0.3", now=2)  # the table is full of recent clients
    assert once("10.0.0.1", now=61)  # a reminder after the interval
    assert once("10.0.0.3", now=62)  # 10.0.0.2's entry expired and made room


def _send(exporter: SpanExporter, name: str) -> SpanExportResult:
    provider = TracerProvider()
    results: list[SpanExportResult] = []

    class Recording(SpanExporter):
        def export(self, spans):  # type: ignore[no-untyped-def]
            results.append(exporter.export(spans))
            return results[-1]

        def shutdown(self) -> None:
            exporter.shutdown()

    provider.add_span_processor(SimpleSpanProcessor(Recording()))
    with provider.get_tracer("test").start_as_current_span(name):
        pass
    provider.shutdown()
    return results[0]


def _log_records(path: Path) -> list[dict[str, object]]:
    records = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    return records


def test_otlp_http_on_the_grpc_port_is_refused_logged_and_counted_while_grpc_goes_on(
    tmp_path: Path,
) -> None:
    lake = tmp_path / "lake"
    log = tmp_path / "collector.log"
    server = ServeProcess(lake, log, "--workers", "0").start()
    try:
        grpc_results: list[SpanExportResult] = []
        stop = threading.Event()

        def grpc_agent() -> None:
            # A real gRPC exporter on the same port, exporting throughout.
            while not stop.is_set() or len(grpc_results) < 3:
                exporter = GrpcExporter(
                    endpoint=f"127.0.0.1:{server.grpc_port}", insecure=True, timeout=30
                )
                grpc_results.append(_send(exporter, f"grpc-{len(grpc_results)}"))

        agent = threading.Thread(target=grpc_agent)
        agent.start()
        try:
            wrong = f"http://127.0.0.1:{server.grpc_port}/v1/traces"
            assert _send(HttpExporter(endpoint=wrong), "http-1") is SpanExportResult.FAILURE
            # The same mistake again (the next batch, a restart): counted, not logged again.
            assert _send(HttpExporter(endpoint=wrong), "http-2") is SpanExportResult.FAILURE
        finally:
            stop.set()
            agent.join(120)
        assert not agent.is_alive()
        assert len(grpc_results) >= 3
        assert set(grpc_results) == {SpanExportResult.SUCCESS}

        status = server.status()
        assert status["counters"]["refused_http_on_grpc_port"] == 2
        with urllib.request.urlopen(
            f"http://127.0.0.1:{server.http_port}/metrics", timeout=30
        ) as response:
            metrics = response.read().decode()
        assert 'spanscore_collector_refused_total{reason="http_on_grpc_port"} 2' in metrics

        fix = (
            f"an OTLP/HTTP exporter at 127.0.0.1 sent POST /v1/traces to the OTLP/gRPC port "
            f"{server.grpc_port}: OTLP/HTTP goes to the HTTP port {server.http_port} (point "
            f"the exporter at http://127.0.0.1:{server.http_port}), or switch the exporter to "
            "gRPC (OTEL_EXPORTER_OTLP_PROTOCOL=grpc)"
        )
        wait_for(lambda: fix in log.read_text(errors="replace"), timeout=60)
        warnings = [r for r in _log_records(log) if r.get("message") == fix]
        assert len(warnings) == 1, warnings  # once per client, not once per batch
        assert warnings[0]["level"] == "warning"
        assert warnings[0]["client"] == "127.0.0.1"
        assert warnings[0]["http_port"] == server.http_port
        # Every gRPC span was stored; no HTTP one was.
        assert query(lake, "SELECT count(*) FROM spans WHERE name LIKE 'http-%'") == [(0,)]
        assert query(lake, "SELECT count(*) FROM spans WHERE name LIKE 'grpc-%'") == [
            (len(grpc_results),)
        ]
    finally:
        code = server.stop()
    assert code == 0, server.log_tail()


def test_the_answer_names_the_http_port_to_a_plain_http_client(tmp_path: Path) -> None:
    with start_collector(tmp_path / "lake") as collector:
        request = urllib.request.Request(
            f"http://127.0.0.1:{collector.grpc_port}/v1/logs",
            data=b"\x0a\x00" * 1000,  # a body, read before the answer's connection closes
            headers={"Content-Type": "application/x-protobuf"},
        )
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(request, timeout=30)
        body = answer.value.read().decode()
        assert answer.value.code == 400
        assert answer.value.headers["Spanscore-Http-Port"] == str(collector.http_port)
        assert f"http://127.0.0.1:{collector.http_port}/v1/logs" in body
        assert collector.stats.get("refused_http_on_grpc_port") == 1


def test_open_connections_do_not_hold_up_stop(tmp_path: Path) -> None:
    """An exporter's connection left open, and one that never sends a byte, end when the
    collector stops; every relay thread with them."""
    import grpc

    collector = start_collector(tmp_path / "lake")
    channel = grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}")
    try:
        silent = socket.create_connection(("127.0.0.1", collector.grpc_port), timeout=30)
        grpc.channel_ready_future(channel).result(timeout=30)  # HTTP/2 set up through the relay
    finally:
        assert collector.stop(timeout=30)
    silent.settimeout(30)
    assert silent.recv(4096) == b""  # the collector closed its end: no hang
    silent.close()
    channel.close()
    relays = [t for t in threading.enumerate() if t.name.startswith("spanscore-grpc-")]
    assert relays == []


def test_with_grpcio_on_the_port_grpc_works_and_http_goes_unnamed(tmp_path: Path) -> None:
    """`grpc_listener = "grpcio"`: no relay, and the mistake is not seen (as before)."""
    collector = start_collector(tmp_path / "lake", grpc_listener="grpcio")
    try:
        grpc_exporter = GrpcExporter(
            endpoint=f"127.0.0.1:{collector.grpc_port}", insecure=True, timeout=30
        )
        assert _send(grpc_exporter, "grpc") is SpanExportResult.SUCCESS
        wrong = HttpExporter(endpoint=f"http://127.0.0.1:{collector.grpc_port}/v1/traces")
        assert _send(wrong, "http") is SpanExportResult.FAILURE
        assert collector.stats.get("refused_http_on_grpc_port") == 0
        assert [t for t in threading.enumerate() if t.name.startswith("spanscore-grpc-")] == []
    finally:
        assert collector.stop(timeout=30)
    assert query(tmp_path / "lake", "SELECT name FROM spans") == [("grpc",)]
