"""What the OTLP/gRPC port's relay costs: grpcio behind `GrpcPort` against grpcio on the port.

The collector owns the public gRPC port so that it can read each connection's first bytes
(`spanscore.collector.grpc_port`); gRPC is relayed to grpcio on a private socket. This measures
that relay alone, without the lake: a grpcio server whose unary handler returns at once, in a
child process, either listening on the TCP port itself (`direct`) or behind `GrpcPort`
(`relayed`). `--clients` threads in this process (one channel each) call it with `--payload`
bytes per call for `--seconds`, alternating direct and relayed for `--rounds` rounds.

Printed per mode: calls/s, MiB/s, p50/p99 latency, and the server process's CPU seconds per
GiB received (user + system, its threads and the kernel work done for it): the relay's cost is
the difference. `--busy-threads N` adds N Python threads spinning in the server process, as
the collector's own Python work does, so that the relay has to win the GIL to move bytes.

Run (from the repository root)::

    .venv/bin/python bench/grpc_port.py                       # 512 KiB calls, like an export
    .venv/bin/python bench/grpc_port.py --payload 1024        # small calls: latency
    .venv/bin/python bench/grpc_port.py --busy-threads 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent import futures

import grpc
import psutil

METHOD = "/bench.Sink/Put"
MIB = 1 << 20


def serve(mode: str, busy_threads: int) -> None:
    """The child: a grpcio server, direct or behind GrpcPort; prints its port, runs until
    stdin closes."""
    from spanscore.collector.grpc_port import GrpcPort, private_address
    from spanscore.collector.stats import Stats

    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=16),
        options=[("grpc.max_receive_message_length", 64 * MIB)],
    )
    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: b"")
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("bench.Sink", {"Put": handler})]
    )
    front = None
    remove = None
    if mode == "direct":
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
    else:
        address, remove = private_address()
        server.add_insecure_port(address)
        server.start()
        front = GrpcPort("127.0.0.1", 0, address, Stats())
        front.start(http_port=0)
        port = front.port
    for _ in range(busy_threads):
        threading.Thread(target=_spin, daemon=True).start()
    print(port, flush=True)
    sys.stdin.read()
    if front is not None:
        front.shutdown(5)
    server.stop(None).wait(5)
    if remove is not None:
        remove()


def _spin() -> None:
    n = 0
    while True:
        n = (n * 31 + 7) % 1_000_003


def run_phase(mode: str, args: argparse.Namespace) -> dict[str, float]:
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", mode, "--busy-threads", str(args.busy_threads)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        process = psutil.Process(child.pid)
        payload = os.urandom(args.payload)
        channels = [grpc.insecure_channel(f"127.0.0.1:{port}") for _ in range(args.clients)]
        for channel in channels:
            channel.unary_unary(METHOD)(payload, timeout=30)  # connected and warm
        latencies: list[float] = []
        lock = threading.Lock()
        stop = time.monotonic() + args.seconds
        before = process.cpu_times()
        started = time.monotonic()

        def client(channel: grpc.Channel) -> None:
            call = channel.unary_unary(METHOD)
            mine = []
            while time.monotonic() < stop:
                t = time.perf_counter()
                call(payload, timeout=30)
                mine.append(time.perf_counter() - t)
            with lock:
                latencies.extend(mine)

        threads = [threading.Thread(target=client, args=(c,)) for c in channels]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.monotonic() - started
        after = process.cpu_times()
        for channel in channels:
            channel.close()
        cpu = (after.user - before.user) + (after.system - before.system)
        received = len(latencies) * args.payload
        latencies.sort()
        return {
            "calls/s": len(latencies) / wall,
            "MiB/s": received / wall / MIB,
            "p50 ms": 1000 * statistics.median(latencies),
            "p99 ms": 1000 * latencies[int(len(latencies) * 0.99) - 1],
            "server CPU s/GiB": cpu / (received / (1 << 30)),
        }
    finally:
        if child.stdin is not None:
            child.stdin.close()
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", choices=("direct", "relayed"), help=argparse.SUPPRESS)
    parser.add_argument("--payload", type=int, default=512 * 1024, help="bytes per call")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy-threads", type=int, default=0)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.busy_threads)
        return
    results: dict[str, list[dict[str, float]]] = {"direct": [], "relayed": []}
    for _ in range(args.rounds):
        for mode in results:
            results[mode].append(run_phase(mode, args))
    print(
        f"grpcio direct vs behind the gRPC port's relay: {args.clients} clients, "
        f"{args.payload:,} bytes per call, {args.seconds:g}s x {args.rounds} rounds, "
        f"{args.busy_threads} busy Python threads in the server, {os.cpu_count()} CPUs"
    )
    keys = list(results["direct"][0])
    print(f"{'':<20}{'direct':>14}{'relayed':>14}{'relayed/direct':>16}")
    for key in keys:
        # Best round for rates, median for latency and cost: the machine is shared.
        pick = max if key in ("calls/s", "MiB/s") else statistics.median
        direct = pick(r[key] for r in results["direct"])
        relayed = pick(r[key] for r in results["relayed"])
        print(f"{key:<20}{direct:>14,.2f}{relayed:>14,.2f}{relayed / direct:>16.2f}")


if __name__ == "__main__":
    main()
