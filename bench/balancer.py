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
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import psycopg
from _preconditions import need_packages, need_postgres, need_program

# The collector process, moto's server, free ports and the spans are the tests' helpers
# (tests/support); a script run as `python bench/balancer.py` has bench/ on sys.path, not the
# repository.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support import otlp_factory
from tests.support.collector import ServeProcess
from tests.support.ports import free_port
from tests.support.s3 import S3Server

ROOT = Path(__file__).resolve().parent.parent
CFG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"


def export_body(n: int, spans: int) -> bytes:
    """`spans` tool-call spans of conversation `bench-{n}` in one export."""
    return otlp_factory.request(otlp_factory.tool_spans(spans, f"bench-{n}"), service="bench")


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


def run_setup(collectors: int, args: argparse.Namespace, s3: S3Server, work: Path) -> float:
    name = "spanscore_bench_" + uuid.uuid4().hex[:10]
    with psycopg.connect(f"{args.postgres}/postgres", autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    lake = f"{args.postgres}/{name}?data_path=s3://{s3.bucket}/{name}/"
    servers: list[ServeProcess] = []
    balancer: subprocess.Popen[bytes] | None = None
    try:
        for i in range(collectors):
            log_path = work / f"{name}-collector-{i}.log"
            extra = ("--workers", "1", "--maintenance-interval-s", "0")
            servers.append(ServeProcess(lake, log_path, *extra, env=s3.env))
            servers[-1].start(timeout=120)
        port = servers[0].http_port
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
            for i, server in enumerate(servers, start=1):
                lb_env[f"COLLECTOR_{i}_HOST"] = "127.0.0.1"
                lb_env[f"COLLECTOR_{i}_GRPC"] = str(server.grpc_port)
                lb_env[f"COLLECTOR_{i}_HTTP"] = str(server.http_port)
            with (work / f"{name}-haproxy.log").open("ab") as log:
                command = [haproxy, "-db", "-f", str(CFG)]
                balancer = subprocess.Popen(command, env=lb_env, stdout=log, stderr=log)
            time.sleep(3)  # two health checks (inter 1s, rise 2) put both collectors in
        return load(port, args.exports, args.spans, args.senders)
    finally:
        if balancer is not None:
            balancer.terminate()
            balancer.wait(60)
        for server in reversed(servers):
            server.stop(60)
        with psycopg.connect(f"{args.postgres}/postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--exports", type=int, default=600)
    parser.add_argument("--spans", type=int, default=50)
    parser.add_argument("--senders", type=int, default=8)
    args = parser.parse_args()
    need_packages("moto")
    need_program("haproxy", "apt-get install haproxy")
    need_postgres(args.postgres)
    with tempfile.TemporaryDirectory(prefix="spanscore-bench-") as tmp:
        work = Path(tmp)
        s3 = S3Server(work / "moto.log")
        s3.bucket = "bench"
        s3.start()
        try:
            one = run_setup(1, args, s3, work)
            two = run_setup(2, args, s3, work)
        finally:
            s3.stop()
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
