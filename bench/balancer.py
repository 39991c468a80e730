"""Benchmark: ingest into a shared lake through HAProxy with two collectors, against one
collector on its own, in the same run.

Each setup gets a fresh PostgreSQL database for the catalog and a fresh prefix in a bucket of
moto's S3 server on a loopback port; `--senders` threads post OTLP/HTTP protobuf exports of
`--spans` spans each until `--exports` are acknowledged. Prints spans/s for each setup and the
ratio. On a 2-core machine the two collectors, the balancer, PostgreSQL, the S3 server and the
senders share the same cores: the ratio then shows the balancer's and the second process's
overhead, not the speed-up more machines would give. Nothing is asserted.

Needs PostgreSQL (`--postgres`, trust or password in the URI), haproxy on PATH, and the dev
extras (moto).

    .venv/bin/python bench/balancer.py
    .venv/bin/python bench/balancer.py --exports 2000 --spans 50 --senders 8
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import psycopg
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

ROOT = Path(__file__).resolve().parent.parent
CFG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait(predicate: object, timeout: float = 120, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
            raise SystemExit(f"bench: a process did not come up in time\n{tail}")
        time.sleep(0.1)


def ok(url: str, method: str = "GET") -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def export_body(n: int, spans: int) -> bytes:
    req = trace_service_pb2.ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.append(
        common_pb2.KeyValue(key="service.name", value=common_pb2.AnyValue(string_value="bench"))
    )
    ss = rs.scope_spans.add()
    now = time.time_ns()
    for i in range(spans):
        span = ss.spans.add()
        span.trace_id = os.urandom(16)
        span.span_id = os.urandom(8)
        span.name = "execute_tool get_order"
        span.start_time_unix_nano = now
        span.end_time_unix_nano = now + 1000
        for key, value in (
            ("gen_ai.operation.name", "execute_tool"),
            ("gen_ai.tool.name", "get_order"),
            ("gen_ai.conversation.id", f"bench-{n}"),
            ("gen_ai.tool.call.arguments", f'{{"order_id": "ORD-{i}"}}'),
        ):
            span.attributes.append(
                common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=value))
            )
    return bytes(req.SerializeToString())


def load(port: int, exports: int, spans: int, senders: int) -> float:
    """Spans/s acknowledged through `port`."""
    bodies = [export_body(n, spans) for n in range(exports)]
    next_index = iter(range(exports))
    lock = threading.Lock()

    def sender() -> None:
        while True:
            with lock:
                n = next(next_index, None)
            if n is None:
                return
            while True:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/v1/traces",
                    data=bodies[n],
                    headers={"Content-Type": "application/x-protobuf"},
                    method="POST",
                )
                try:
                    with urllib.request.urlopen(request, timeout=120) as response:
                        if response.status == 200:
                            break
                except OSError:
                    time.sleep(0.1)

    threads = [threading.Thread(target=sender) for _ in range(senders)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return exports * spans / (time.monotonic() - started)


def run_setup(collectors: int, args: argparse.Namespace, s3_port: int, work: Path) -> float:
    name = "spanscore_bench_" + uuid.uuid4().hex[:10]
    with psycopg.connect(f"{args.postgres}/postgres", autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "SPANSCORE_S3_ENDPOINT": f"http://127.0.0.1:{s3_port}",
        "SPANSCORE_S3_URL_STYLE": "path",
        "SPANSCORE_S3_REGION": "us-east-1",
    }
    lake = f"{args.postgres}/{name}?data_path=s3://bench/{name}/"
    procs: list[subprocess.Popen[bytes]] = []
    ports = []
    try:
        for i in range(collectors):
            grpc_port, http_port = free_port(), free_port()
            ports.append((grpc_port, http_port))
            log = (work / f"{name}-collector-{i}.log").open("ab")
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "spanscore.cli", "serve", "--lake", lake,
                     "--grpc-port", str(grpc_port), "--http-port", str(http_port),
                     "--workers", "1", "--maintenance-interval-s", "0"],
                    env=env, stdout=log, stderr=log,
                )
            )  # fmt: skip
        for i, (_, http_port) in enumerate(ports):
            log_path = work / f"{name}-collector-{i}.log"
            wait(lambda p=http_port: ok(f"http://127.0.0.1:{p}/health"), log=log_path)
        port = ports[0][1]
        if collectors > 1:
            haproxy = shutil.which("haproxy")
            if haproxy is None:
                raise SystemExit("bench: haproxy is not on PATH")
            port = free_port()
            lb_env = {
                **os.environ,
                "LISTEN_ADDR": "127.0.0.1",
                "GRPC_PORT": str(free_port()),
                "HTTP_PORT": str(port),
            }
            for i, (grpc_port, http_port) in enumerate(ports, start=1):
                lb_env[f"COLLECTOR_{i}_HOST"] = "127.0.0.1"
                lb_env[f"COLLECTOR_{i}_GRPC"] = str(grpc_port)
                lb_env[f"COLLECTOR_{i}_HTTP"] = str(http_port)
            log = (work / f"{name}-haproxy.log").open("ab")
            command = [haproxy, "-db", "-f", str(CFG)]
            procs.append(subprocess.Popen(command, env=lb_env, stdout=log, stderr=log))
            time.sleep(3)  # two health checks (inter 1s, rise 2) put both collectors in
        return load(port, args.exports, args.spans, args.senders)
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            proc.wait(60)
        with psycopg.connect(f"{args.postgres}/postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--exports", type=int, default=600)
    parser.add_argument("--spans", type=int, default=50)
    parser.add_argument("--senders", type=int, default=8)
    args = parser.parse_args()
    s3_port = free_port()
    with tempfile.TemporaryDirectory(prefix="spanscore-bench-") as tmp:
        work = Path(tmp)
        s3 = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(s3_port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait(lambda: ok(f"http://127.0.0.1:{s3_port}/bench", "PUT"))
            one = run_setup(1, args, s3_port, work)
            two = run_setup(2, args, s3_port, work)
        finally:
            s3.terminate()
            s3.wait(30)
    print(f"{args.exports} exports x {args.spans} spans, {args.senders} senders, OTLP/HTTP")
    print(f"one collector, direct:           {one:10.0f} spans/s")
    print(f"two collectors behind HAProxy:   {two:10.0f} spans/s")
    print(f"ratio (two behind HAProxy / one): {two / one:.2f}  (on {os.cpu_count()} cores)")
    print(
        "the collectors, HAProxy, PostgreSQL, the S3 server and the senders share this "
        "machine's cores: the ratio shows the balancer's and the second collector's overhead, "
        "not the speed-up of collectors on more machines"
    )


if __name__ == "__main__":
    main()
