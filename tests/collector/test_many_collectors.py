"""Two collectors behind the real HAProxy on one shared lake (PostgreSQL catalog, data on a
loopback S3 server), an evaluation run scoring while the load goes on, and one collector
killed with SIGKILL mid-load: every acknowledged span is in the lake once, every conversation
is scored once."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from spanscore.collector import Collector
from spanscore.lake import connect, maintain

from ..support import otlp_factory
from ..support.collector import ServeProcess
from ..support.polling import wait_for
from ..support.ports import free_port
from ..support.s3 import S3Server

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CLI = [sys.executable, "-m", "spanscore.cli"]
SUITE = """name: balanced
metrics:
  - type: tool_calls
    mode: contains
    expected: [get_order]
"""


class Balancer:
    """HAProxy in the foreground with deploy/haproxy/haproxy.cfg, in front of two collectors."""

    def __init__(self, collectors: list[ServeProcess], log_path: Path) -> None:
        haproxy = shutil.which("haproxy")
        if haproxy is None:
            pytest.skip("haproxy is not installed (Debian package haproxy)")
        self.grpc_port = free_port()
        self.http_port = free_port()
        env = {
            **os.environ,
            "LISTEN_ADDR": "127.0.0.1",
            "GRPC_PORT": str(self.grpc_port),
            "HTTP_PORT": str(self.http_port),
        }
        for i, c in enumerate(collectors, start=1):
            env[f"COLLECTOR_{i}_HOST"] = "127.0.0.1"
            env[f"COLLECTOR_{i}_GRPC"] = str(c.grpc_port)
            env[f"COLLECTOR_{i}_HTTP"] = str(c.http_port)
        log = log_path.open("ab")
        self.proc = subprocess.Popen(
            [haproxy, "-db", "-f", str(DEPLOY / "haproxy" / "haproxy.cfg")],
            env=env,
            stdout=log,
            stderr=log,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _export(port: int, body: bytes, deadline: float) -> bool:
    """POST one export through the balancer, retrying as an OTLP exporter does; acknowledged?"""
    delay = 0.05
    while time.monotonic() < deadline:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/traces",
            data=body,
            headers={"Content-Type": "application/x-protobuf"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass  # 502/503 from the balancer, a reset from a dying collector: retry
        time.sleep(delay)
        delay = min(delay * 2, 1.0)
    return False


def _export_grpc(port: int, body: bytes, deadline: float) -> bool:
    """The same over OTLP/gRPC (HTTP/2 through the balancer)."""
    import grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            request_serializer=None,
            response_deserializer=None,
        )
        delay = 0.05
        while time.monotonic() < deadline:
            try:
                export(body, timeout=60)
                return True
            except grpc.RpcError:
                pass  # UNAVAILABLE from the balancer or a dying collector: retry
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
    return False


@pytest.mark.postgres
def test_a_retry_to_another_collector_is_no_duplicate(
    postgres_database: str, make_collector: Callable[..., Collector], tmp_path: Path
) -> None:
    """An export committed by one collector (which then died before answering) and retried
    to another one is stored once: on a shared lake each commit looks its span ids up."""
    lake = f"{postgres_database}?data_path={tmp_path / 'data'}/"
    first, second = make_collector(lake=lake), make_collector(lake=lake)
    spans = otlp_factory.tool_spans(20, conversation="retried")
    body = otlp_factory.request(spans)
    deadline = time.monotonic() + 60
    assert _export(first.http_port, body, deadline)
    assert _export(second.http_port, body, deadline)
    assert second.stats.get("spans_duplicate") == 20
    con = connect(postgres_database)
    try:
        assert con.execute("SELECT count(*), count(DISTINCT span_id) FROM spans").fetchone() == (
            20,
            20,
        )
    finally:
        con.close()


def _span_files_read(s3_server: S3Server, since_line: int) -> tuple[set[str], int]:
    """The `spans` data files read (GET) after line `since_line` of the object store's log
    (whose request lines may carry colour codes)."""
    lines = s3_server.log_path.read_text().splitlines()
    read = set(
        re.findall(r'GET /[^/]+/lake/main/spans/([^ ?"]+\.parquet)', "\n".join(lines[since_line:]))
    )
    return read, len(lines)


@pytest.mark.postgres
def test_a_collector_reads_only_what_others_committed_since(
    shared_lake: str, s3_server: S3Server, make_collector: Callable[..., Collector]
) -> None:
    """On a shared lake each commit looks for its span ids among those other collectors
    committed: it used to read every data file of the lake's last 10 minutes at each commit
    (1 s per commit after 50 commits, 3 s after 150, on the loopback object store); it now
    reads each of the others' commits once, and none of its own."""
    a, b = make_collector(lake=shared_lake), make_collector(lake=shared_lake)
    deadline = time.monotonic() + 120

    def send(collector: Collector, name: str) -> bytes:
        body = otlp_factory.request(otlp_factory.tool_spans(5, conversation=name), service="s")
        assert _export(collector.http_port, body, deadline)
        return body

    def files() -> set[str]:
        return {key.rsplit("/", 1)[-1] for key in s3_server.objects("lake/main/spans/")}

    _, mark = _span_files_read(s3_server, 0)
    for n in range(20):
        send(a, f"a{n}")
    read, mark = _span_files_read(s3_server, mark)
    assert read == set()  # its own commits: never read back
    of_a = files()
    assert len(of_a) == 20

    from_b = send(b, "b0")  # b reads a's 20 commits, once
    read, mark = _span_files_read(s3_server, mark)
    assert read == of_a
    of_b = files() - of_a
    assert len(of_b) == 1

    for n in range(20, 40):
        from_a = send(a, f"a{n}")
    read, mark = _span_files_read(s3_server, mark)
    assert read == of_b  # b's one commit, once: not the 40 files of the last 10 minutes

    # and what another collector committed is still no duplicate when retried here
    assert _export(a.http_port, from_b, deadline)
    assert a.stats.get("spans_duplicate") == 5

    # The commits b has not read yet are expired (a short retention, a collector idle for
    # longer): b reads the lake's recent spans instead, and still finds a's.
    con = connect(shared_lake.split("?")[0])
    try:
        done = maintain(con, expire_older_than_s=0)
        assert done["snapshots_expired"] > 0
        assert _export(b.http_port, from_a, deadline)
        assert b.stats.get("others_read_from_recent_spans") == 1
        assert b.stats.get("spans_duplicate") == 5
        assert con.execute("SELECT count(*), count(DISTINCT span_id) FROM spans").fetchone() == (
            41 * 5,
            41 * 5,
        )
    finally:
        con.close()


@pytest.mark.postgres
@pytest.mark.slow
def test_two_collectors_behind_haproxy_survive_a_kill(
    shared_lake: str, s3_server: S3Server, tmp_path: Path
) -> None:
    extra = ("--workers", "0", "--maintenance-interval-s", "0")
    collectors = [
        ServeProcess(shared_lake, tmp_path / f"collector-{i}.log", *extra, env=s3_server.env)  # type: ignore[arg-type]
        for i in (1, 2)
    ]
    reader_lake = shared_lake.split("?")[0]
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE)
    evaluate = [*CLI, "evaluate", "--lake", reader_lake, "--suite", str(suite), "--settle",
                "0s", "--since", "1h", "--workers", "1"]  # fmt: skip
    balancer: Balancer | None = None
    run: subprocess.Popen[str] | None = None
    acknowledged: set[tuple[str, str]] = set()
    lock = threading.Lock()
    senders_done = threading.Event()
    failures: list[int] = []
    try:
        for c in collectors:
            c.start(timeout=120)
        balancer = Balancer(collectors, tmp_path / "haproxy.log")
        probe = otlp_factory.request([])
        port = balancer.http_port
        wait_for(lambda: _export(port, probe, time.monotonic() + 2), timeout=60, interval=0.2)

        def sender(worker: int, conversations: int) -> None:
            assert balancer is not None
            # Half the senders go through the gRPC frontend, half through the HTTP one.
            send, port = (
                (_export_grpc, balancer.grpc_port) if worker % 2 else (_export, balancer.http_port)
            )
            for n in range(conversations):
                spans = otlp_factory.tool_spans(5, conversation=f"w{worker}-c{n}")
                body = otlp_factory.request(spans, service="balanced")
                if send(port, body, time.monotonic() + 120):
                    with lock:
                        acknowledged.update(otlp_factory.span_keys(spans))
                else:
                    failures.append(n)

        threads = [threading.Thread(target=sender, args=(w, 60)) for w in range(4)]
        for t in threads:
            t.start()
        wait_for(lambda: len(acknowledged) >= 200, timeout=120)
        run = subprocess.Popen(evaluate, env={**os.environ, **s3_server.env}, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
        wait_for(lambda: len(acknowledged) >= 400, timeout=120)
        collectors[0].kill()  # SIGKILL mid-load
        killed_at = len(acknowledged)
        for t in threads:
            t.join(300)
        senders_done.set()
        output, _ = run.communicate(timeout=300)
        assert run.returncode == 0, output[-3000:]
        assert failures == []
        assert len(acknowledged) == 4 * 60 * 5
        assert killed_at < len(acknowledged)
        assert collectors[1].terminate() == 0
    finally:
        if balancer is not None:
            balancer.stop()
        for c in collectors:
            if c.proc is not None and c.proc.poll() is None:
                c.kill()
        if run is not None and run.poll() is None:
            run.kill()
            run.wait(10)
    # A second run scores what the first did not see; nothing is scored twice.
    second = subprocess.run(evaluate, env={**os.environ, **s3_server.env}, capture_output=True,
                            text=True, timeout=300, check=False)  # fmt: skip
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    con = connect(reader_lake)
    try:
        stored = con.execute(
            "SELECT lower(trace_id), lower(span_id), count(*) FROM spans "
            "WHERE service_name = 'balanced' GROUP BY ALL"
        ).fetchall()
        duplicated = [r for r in stored if r[2] > 1]
        assert duplicated == []
        assert acknowledged <= {(r[0], r[1]) for r in stored}
        conversations = con.execute(
            "SELECT count(DISTINCT conversation_id) FROM spans WHERE service_name = 'balanced'"
        ).fetchone()
        per_conversation = con.execute(
            "SELECT conversation_id, count(*) FROM scores GROUP BY ALL HAVING count(*) <> 1"
        ).fetchall()
        scored = con.execute("SELECT count(DISTINCT conversation_id) FROM scores").fetchone()
        runs = con.execute("SELECT count(*), sum(conversation_count) FROM eval_runs").fetchone()
    finally:
        con.close()
    assert per_conversation == []
    assert scored == conversations == (240,)
    print(json.dumps({"runs": runs, "killed_at_acknowledged_spans": killed_at}))
