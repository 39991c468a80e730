"""What an acknowledgement promises: kill -9, SIGTERM, and concurrent readers and writers."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from ..support import otlp_factory as f
from ..support.collector import ServeProcess
from ..support.lake import query
from ..support.polling import wait_for

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


class LoadClient(threading.Thread):
    """Sends 200-span exports over gRPC until stopped; remembers what was acknowledged."""

    def __init__(self, port: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.stop_event = stop
        self.acked: set[tuple[str, str]] = set()
        self.unacked: list[bytes] = []
        self.refusals: list[str] = []
        self.exports = 0

    def run(self) -> None:
        channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        export = channel.unary_unary(
            EXPORT,
            request_serializer=lambda b: b,
            response_deserializer=trace_service_pb2.ExportTraceServiceResponse.FromString,
        )
        while not self.stop_event.is_set():
            spans = f.tool_spans(200, conversation=f"load-{self.name}")
            body = f.request(spans)
            try:
                export(body, timeout=10)
            except grpc.RpcError as exc:
                self.unacked.append(body)
                self.refusals.append(f"{exc.code().name}: {exc.details()}")  # type: ignore[attr-defined]
                if self.stop_event.wait(0.05):
                    break
                continue
            self.acked |= f.span_keys(spans)
            self.exports += 1
        channel.close()


def _lake_keys(lake: Path) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in query(lake, "SELECT trace_id, span_id FROM spans")]


@pytest.mark.slow
def test_kill_9_loses_nothing_acknowledged_and_retries_do_not_duplicate(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    server = ServeProcess(lake, tmp_path / "collector.log").start()
    stop = threading.Event()
    clients = [LoadClient(server.grpc_port, stop) for _ in range(4)]
    for c in clients:
        c.start()
    wait_for(lambda: sum(c.exports for c in clients) >= 20, timeout=60)
    server.kill()  # mid-load: some exports are queued, some committing, some answered
    stop.set()
    for c in clients:
        c.join(30)
    acked = set().union(*(c.acked for c in clients))
    unacked = [body for c in clients for body in c.unacked]
    assert acked, "nothing was acknowledged before the kill"
    assert unacked, "the kill should land mid-load, with exports in flight"

    # Restart on the same lake and let the "exporters" retry what was not acknowledged, as real
    # ones do: an export committed just before the kill must not be stored twice.
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    export = channel.unary_unary(EXPORT, request_serializer=lambda b: b)
    for body in unacked:
        export(body, timeout=30)
    channel.close()
    assert server.terminate() == 0

    keys = _lake_keys(lake)
    assert len(keys) == len(set(keys)), "a span id is stored twice"
    assert acked <= set(keys), f"{len(acked - set(keys))} acknowledged spans are missing"


@pytest.mark.slow
def test_sigterm_commits_and_answers_everything_queued(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    # A long batch delay keeps exports queued when SIGTERM arrives.
    server = ServeProcess(lake, tmp_path / "collector.log", "--batch-delay-ms", "3000").start()
    results: list[tuple[set[tuple[str, str]], bool]] = []

    def one_export() -> None:
        spans = f.tool_spans(50)
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        export = channel.unary_unary(EXPORT, request_serializer=lambda b: b)
        try:
            export(f.request(spans), timeout=30)
            results.append((f.span_keys(spans), True))
        except grpc.RpcError:
            results.append((f.span_keys(spans), False))
        channel.close()

    threads = [threading.Thread(target=one_export) for _ in range(8)]
    for t in threads:
        t.start()
    wait_for(lambda: _queued_rows(server) >= 8 * 50, timeout=20)  # all 8 exports queued
    assert server.terminate() == 0
    for t in threads:
        t.join(30)
    assert len(results) == 8
    assert all(ok for _, ok in results), "a queued export was not answered with success"
    stored = set(_lake_keys(lake))
    for keys, _ in results:
        assert keys <= stored
    # Structured logs: one JSON object per line; the last says the queue was drained.
    events = [json.loads(line) for line in server.log_path.read_text().splitlines()]
    assert events[0]["logger"].startswith("spanscore")
    stopped = [e for e in events if e["message"] == "stopped"]
    assert stopped[-1]["drained"] is True
    assert stopped[-1]["spans_stored"] == 8 * 50


def _queued_rows(server: ServeProcess) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/status") as response:
        return int(json.load(response)["gauges"].get("queue_rows", 0))


WRITER = """
import sys
from spanscore.lake import connect, retrying
con = connect(sys.argv[1])
for i in range(int(sys.argv[2])):
    retrying(lambda: con.execute(
        "INSERT INTO scores (run_id, conversation_id, metric, value) VALUES ('w', ?, 'm', 1)",
        [str(i)]), con=con)
print("wrote", sys.argv[2])
"""


@pytest.mark.slow
def test_sql_and_another_writer_run_while_the_collector_ingests(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    server = ServeProcess(lake, tmp_path / "collector.log").start()
    stop = threading.Event()
    clients = [LoadClient(server.grpc_port, stop) for _ in range(2)]
    for c in clients:
        c.start()
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(lake), "100"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    sql_runs = 0
    while writer.poll() is None or sql_runs < 5:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "spanscore.cli",
                "sql",
                "--lake",
                str(lake),
                "--format",
                "csv",
                "SELECT count(*) AS spans, count(DISTINCT conversation_id) FROM spans",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout.startswith("spans,")
        sql_runs += 1
    out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    assert "wrote 100" in out
    stop.set()
    for c in clients:
        c.join(30)
    assert server.terminate() == 0
    refusals = [r for c in clients for r in c.refusals]
    assert not refusals, (
        f"the collector refused exports under light load: {refusals}\n"
        + (server.log_path.read_text()[-3000:])
    )
    acked = set().union(*(c.acked for c in clients))
    stored = _lake_keys(lake)
    assert len(stored) == len(set(stored))
    assert acked <= set(stored)
    assert query(lake, "SELECT count(*) FROM scores WHERE run_id = 'w'") == [(100,)]
