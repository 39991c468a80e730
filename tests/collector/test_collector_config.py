"""Collector settings, authentication, TLS and backpressure, against the real servers."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from spanscore.cli import main
from spanscore.collector import Collector, ConfigError, load_config

from ..support import otlp_factory as f
from ..support.catalog_lock import LOCK_CATALOG
from ..support.lake import query
from ..support.polling import wait_for

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@pytest.mark.parametrize(
    ("file_value", "env_value", "cli_value", "expected"),
    [
        (None, None, None, 4317),  # default
        (5001, None, None, 5001),  # config file
        (5001, "5002", None, 5002),  # environment beats the file
        (5001, "5002", 5003, 5003),  # command line beats both
    ],
    ids=["default", "file", "env-over-file", "cli-over-env"],
)
def test_setting_precedence(
    tmp_path: Path,
    file_value: int | None,
    env_value: str | None,
    cli_value: int | None,
    expected: int,
) -> None:
    config_file = tmp_path / "spanscore.toml"
    config_file.write_text(
        "[collector]\nlake = 'x'\n" + (f"grpc_port = {file_value}\n" if file_value else "")
    )
    env = {"SPANSCORE_GRPC_PORT": env_value} if env_value else {}
    config = load_config(config_file, {"grpc_port": cli_value}, environ=env)
    assert config.grpc_port == expected


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"host": "0.0.0.0"}, "refusing to listen on non-loopback address"),
        ({"host": "10.1.2.3", "grpc_port": "x"}, "grpc_port"),
        ({"tls_cert": "cert.pem"}, "tls_cert and tls_key go together"),
        ({"batch_rows": 10, "queue_rows": 5}, "batch_rows must not exceed queue_rows"),
        ({"unknown_setting": 1}, "unknown_setting"),
        ({"memory_limit": "100"}, "memory_limit.*such as 512MiB or 2GB"),
    ],
    ids=[
        "non-loopback-needs-auth",
        "bad-int",
        "half-tls",
        "batch-over-queue",
        "unknown-key",
        "memory-limit-without-unit",
    ],
)
def test_invalid_settings_name_the_problem(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(overrides={"lake": "x", **settings}, environ={})


def test_duckdb_memory_is_bounded_by_default_and_by_the_setting(
    make_collector: Callable[..., Collector],
) -> None:
    # Unbounded, DuckDB may cache 80 % of the machine: a collector running for days grows.
    def limit(collector: Collector) -> str:
        cursor = collector._con.cursor()
        return str(cursor.sql("SELECT current_setting('memory_limit')").fetchone()[0])

    collector = make_collector()
    assert limit(collector) == "1.0 GiB"
    # Nor does it keep what compaction read from data files: that cache grew by a run's worth
    # of data each time, up to the limit.
    cursor = collector._con.cursor()
    assert cursor.sql("SELECT current_setting('enable_external_file_cache')").fetchone() == (False,)


def test_the_memory_limit_setting_reaches_duckdb(
    make_collector: Callable[..., Collector],
) -> None:
    collector = make_collector(memory_limit="256MiB")
    cursor = collector._con.cursor()
    assert cursor.sql("SELECT current_setting('memory_limit')").fetchone() == ("256.0 MiB",)


def test_non_loopback_is_allowed_with_a_token_or_insecure() -> None:
    assert load_config(overrides={"lake": "x", "host": "0.0.0.0", "token": "t"}, environ={})
    assert load_config(overrides={"lake": "x", "host": "0.0.0.0", "insecure": True}, environ={})


def test_environment_names_the_source_of_a_bad_value() -> None:
    with pytest.raises(ConfigError, match="environment variable SPANSCORE_HTTP_PORT"):
        load_config(overrides={"lake": "x"}, environ={"SPANSCORE_HTTP_PORT": "not-a-port"})


def test_serve_refuses_a_public_bind_without_auth(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["serve", "--lake", str(tmp_path / "l"), "--host", "0.0.0.0"], env={}
    )
    assert result.exit_code == 2
    assert "refusing to listen on non-loopback address '0.0.0.0'" in result.output
    assert "--insecure" in result.output


def _send(exporter: SpanExporter) -> SpanExportResult:
    results: list[SpanExportResult] = []

    class Capture(SimpleSpanProcessor):
        def on_end(self, span: object) -> None:
            results.append(exporter.export([span]))  # type: ignore[list-item]

    provider = TracerProvider()
    provider.add_span_processor(Capture(exporter))
    with provider.get_tracer("t").start_as_current_span("execute_tool x"):
        pass
    provider.shutdown()
    return results[0]


def test_bearer_token_on_both_protocols(
    make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    collector = make_collector(token="s3cret")
    grpc_ep = f"127.0.0.1:{collector.grpc_port}"
    http_ep = f"http://127.0.0.1:{collector.http_port}/v1/traces"
    good = {"authorization": "Bearer s3cret"}
    bad = {"authorization": "Bearer nope"}
    assert (
        _send(GrpcExporter(endpoint=grpc_ep, insecure=True, headers=good))
        is SpanExportResult.SUCCESS
    )
    assert _send(HttpExporter(endpoint=http_ep, headers=good)) is SpanExportResult.SUCCESS
    assert (
        _send(GrpcExporter(endpoint=grpc_ep, insecure=True, headers=bad))
        is SpanExportResult.FAILURE
    )
    assert _send(HttpExporter(endpoint=http_ep)) is SpanExportResult.FAILURE
    assert query(lake_dir, "SELECT count(*) FROM spans") == [(2,)]
    assert collector.stats.get("refused_unauthenticated") == 2


def test_token_file(make_collector: Callable[..., Collector], tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    collector = make_collector(token_file=str(token_file))
    conn = http.client.HTTPConnection("127.0.0.1", collector.http_port, timeout=10)
    conn.request(
        "POST",
        "/v1/traces",
        f.request(f.tool_spans(1)),
        {"Content-Type": "application/x-protobuf", "Authorization": "Bearer from-file"},
    )
    assert conn.getresponse().status == 200


def test_tls_on_both_protocols(
    make_collector: Callable[..., Collector],
    tls_files: tuple[Path, Path],
    lake_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # requests lets these variables override the exporter's own CA file (requests issue 3829).
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    cert, key = tls_files
    collector = make_collector(tls_cert=str(cert), tls_key=str(key))
    grpc_exporter = GrpcExporter(
        endpoint=f"https://localhost:{collector.grpc_port}",
        credentials=grpc.ssl_channel_credentials(cert.read_bytes()),
    )
    http_exporter = HttpExporter(
        endpoint=f"https://127.0.0.1:{collector.http_port}/v1/traces", certificate_file=str(cert)
    )
    assert _send(grpc_exporter) is SpanExportResult.SUCCESS
    assert _send(http_exporter) is SpanExportResult.SUCCESS
    assert query(lake_dir, "SELECT count(*) FROM spans") == [(2,)]
    # Plain text to the TLS port is refused.
    plain = GrpcExporter(endpoint=f"127.0.0.1:{collector.grpc_port}", insecure=True, timeout=2)
    assert _send(plain) is SpanExportResult.FAILURE


def test_full_queue_is_refused_with_retryable_codes(
    make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    collector = make_collector(queue_rows=200, batch_rows=200, batch_delay_ms=0)
    # Another process holds the catalog's write lock: the writer's commit retries, exports pile
    # up, and the queue (one batch committing + 200 rows queued) fills.
    # (A separate process: POSIX locks do not conflict within one process.)
    blocker = subprocess.Popen(
        [sys.executable, "-c", LOCK_CATALOG, str(lake_dir / "catalog.sqlite")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert blocker.stdout is not None
    assert blocker.stdout.readline().strip() == "locked"
    channel = grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}")
    export = channel.unary_unary(EXPORT, request_serializer=lambda b: b)
    accepted: list[bool] = []

    def send() -> None:
        accepted.append(bool(export(f.request(f.tool_spans(200)), timeout=30) is not None))

    threads = [threading.Thread(target=send) for _ in range(2)]
    for t in threads:
        t.start()
        wait_for(lambda t=t: collector.stats.get("spans_received") >= 200 * (threads.index(t) + 1))
    wait_for(lambda: collector.stats.snapshot()["gauges"].get("queue_rows") == 200)  # type: ignore[union-attr]
    with pytest.raises(grpc.RpcError) as refused:
        export(f.request(f.tool_spans(200)), timeout=20)
    error = refused.value
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
    assert "write queue is full" in error.details()  # type: ignore[attr-defined]
    details = dict(error.trailing_metadata())  # type: ignore[attr-defined]
    status = status_pb2.Status.FromString(details["grpc-status-details-bin"])
    info = error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(info)
    assert info.retry_delay.seconds >= 1

    conn = http.client.HTTPConnection("127.0.0.1", collector.http_port, timeout=10)
    conn.request(
        "POST",
        "/v1/traces",
        f.request(f.tool_spans(200)),
        {"Content-Type": "application/x-protobuf"},
    )
    response = conn.getresponse()
    assert response.status == 429
    assert int(response.getheader("Retry-After", "0")) >= 1
    assert "write queue is full" in status_pb2.Status.FromString(response.read()).message

    blocker.communicate("")  # releases the lock
    for t in threads:
        t.join(30)
    assert accepted == [True, True]  # what was queued is committed and acknowledged
    assert collector.stats.get("spans_refused_queue_full") == 400
    channel.close()


def test_status_command_reads_the_counters(collector: Collector) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", collector.http_port, timeout=10)
    conn.request(
        "POST", "/v1/traces", f.request(f.tool_spans(3)), {"Content-Type": "application/x-protobuf"}
    )
    assert conn.getresponse().status == 200
    result = CliRunner().invoke(
        main, ["status", "--endpoint", f"http://127.0.0.1:{collector.http_port}", "--json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["status"] == "ok"
    assert doc["counters"]["spans_received"] == 3
    assert doc["counters"]["spans_stored"] == 3
    text = CliRunner().invoke(
        main, ["status", "--endpoint", f"http://127.0.0.1:{collector.http_port}"]
    )
    assert "spans_stored" in text.output


def test_status_command_without_a_collector() -> None:
    from ..support.ports import free_port

    result = CliRunner().invoke(main, ["status", "--endpoint", f"http://127.0.0.1:{free_port()}"])
    assert result.exit_code == 2
    assert "no collector at" in result.output


def test_background_maintenance_compacts_while_ingesting(
    make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    collector = make_collector(maintenance_interval_s=0.2, snapshot_retention_s=0)
    conn = http.client.HTTPConnection("127.0.0.1", collector.http_port, timeout=10)
    for _ in range(15):  # 15 small commits, 15 small files
        conn.request(
            "POST",
            "/v1/traces",
            f.request(f.tool_spans(5)),
            {"Content-Type": "application/x-protobuf"},
        )
        assert conn.getresponse().read() is not None
    wait_for(lambda: collector.stats.get("maintenance_runs") >= 2, timeout=30)
    assert collector.stats.get("maintenance_failed") == 0
    files = query(lake_dir, "SELECT count(*) FROM ducklake_list_files('lake', 'spans')")[0][0]
    assert files < 15
    assert query(lake_dir, "SELECT count(*) FROM spans") == [(75,)]
