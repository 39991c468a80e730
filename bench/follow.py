"""Continuous-evaluation benchmark: how soon `spanscore evaluate --follow` scores a conversation
after its last span, and what the follower costs ingest.

`spanscore serve` runs in a child process on a fresh lake; ``--clients`` threads export the
ingest benchmark's realistic agent traces (one conversation each, its spans timed so that the
conversation ends as it is sent) over OTLP/HTTP at ``--rate`` spans/s in total for
``--seconds``. Two phases, each on a lake of its own:

1. **without the follower**: the accepted ingest rate (spans in acknowledged exports / wall
   time): the baseline;
2. **with the follower**: the same load with ``spanscore evaluate --follow --settle SETTLE
   --poll POLL`` running on the lake; the accepted rate again, and the ratio to the baseline
   (target >= 0.9). After the load stops the follower gets ``SETTLE + 60 s`` to score what
   was sent; then, from the lake, each conversation's lag from its last span's end to the
   commit of its first score: p50, p99 and max (target p99 <= SETTLE + 30 s), and how many
   conversations were not scored in time.

The suite is deterministic (no judge): the figures are the follower's own. It prints figures
next to the targets and asserts nothing about time. The exit status is 1 only when a
conversation was scored twice.

Run (from the repository root)::

    .venv/bin/python bench/follow.py                # 60 s per phase, 1,000 spans/s, settle 10 s
    .venv/bin/python bench/follow.py --quick        # 20 s per phase, a smoke run
    .venv/bin/python bench/follow.py --rate 3000 --settle 30s --poll 5s
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ingest import CollectorProcess, HttpExporter, Tokens, agent_turn_spans, percentile
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from spanscore.lake import connect

SUITE = {
    "name": "follow-bench",
    "metrics": [
        {"type": "tool_errors", "missing_result_is_error": False},
        {"type": "efficiency"},
    ],
}
TARGET_RATIO = 0.9
TARGET_LAG_MARGIN_S = 30.0


def fresh_request(rng: random.Random, spans: int, ends_ns: int) -> tuple[bytes, int]:
    """A request of whole conversations (one trace each) ending at `ends_ns`, when it is to be
    sent: (body, span count)."""
    tokens = Tokens(rng)
    request = trace_service_pb2.ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    request.resource_spans[0].resource.attributes.add(
        key="service.name"
    ).value.string_value = "customer-service-agent"
    scope.scope.name = "opentelemetry.instrumentation.openai_agents"
    now = ends_ns
    built: list[trace_pb2.Span] = []
    while len(built) < spans:
        built.extend(
            agent_turn_spans(tokens, rng, min(spans - len(built), rng.randint(6, 20)), now)
        )
    shift = max(s.end_time_unix_nano for s in built) - now
    for span in built:
        span.start_time_unix_nano -= shift
        span.end_time_unix_nano -= shift
    scope.spans.extend(built)
    return request.SerializeToString(), len(built)


@dataclass
class Load:
    sent_spans: int = 0
    refused: int = 0
    errors: int = 0
    elapsed_s: float = 0.0

    @property
    def rate(self) -> float:
        return self.sent_spans / self.elapsed_s if self.elapsed_s else 0.0


def run_load(port: int, rate: float, seconds: float, clients: int, spans: int) -> Load:
    """`clients` threads, each sending `spans`-span requests at its share of `rate`. The
    requests are built before the clock starts (each ending when it is due), so the figures
    are the collector's, not the generator's."""
    load = Load()
    lock = threading.Lock()
    interval = spans * clients / rate
    per_client = max(1, int(seconds / interval))
    lead_s = 2.0
    start_wall = time.time_ns() + int((lead_s + per_client * clients * 0.02) * 1e9)
    planned: list[list[tuple[float, bytes, int]]] = []
    for index in range(clients):
        rng = random.Random(index * 7919 + time.time_ns())
        bodies = []
        for k in range(per_client):
            offset = (k + index / clients) * interval
            body, count = fresh_request(rng, spans, start_wall + int(offset * 1e9))
            bodies.append((offset, body, count))
        planned.append(bodies)
    start = time.perf_counter() + (start_wall - time.time_ns()) / 1e9

    def client(index: int) -> None:
        exporter = HttpExporter(port)
        try:
            for offset, body, count in planned[index]:
                wait = start + offset - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                outcome, detail = exporter.send(body)
                with lock:
                    if outcome == "ok":
                        load.sent_spans += count - int(detail)
                    elif outcome == "refused":
                        load.refused += 1
                    else:
                        load.errors += 1
        finally:
            exporter.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    load.elapsed_s = time.perf_counter() - start
    return load


def start_follower(
    lake: Path, suite: Path, settle: str, poll: str, log: Path
) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "spanscore.cli", "evaluate", "--lake", str(lake),
        "--suite", str(suite), "--follow", "--settle", settle, "--poll", poll,
        "--workers", "1",
    ]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)


def lags(lake: Path) -> tuple[list[float], int, int, int]:
    """(lag of each scored conversation in s, conversations, unscored, scored twice)."""
    con = connect(lake, read_only=True)
    try:
        rows = con.execute(
            """
            SELECT epoch(s.first_score) - epoch(c.end_time)
            FROM conversations c
            LEFT JOIN (SELECT conversation_id, min(created_at) AS first_score FROM scores
                       GROUP BY 1) s USING (conversation_id)
            """
        ).fetchall()
        (twice,) = con.execute(
            "SELECT count(*) FROM (SELECT conversation_id, metric FROM scores "
            "GROUP BY ALL HAVING count(*) > 1)"
        ).fetchone() or (0,)
    finally:
        con.close()
    scored = [float(r[0]) for r in rows if r[0] is not None]
    return scored, len(rows), len(rows) - len(scored), int(twice)


def scored_count(lake: Path) -> tuple[int, int]:
    con = connect(lake, read_only=True)
    try:
        row = con.execute(
            "SELECT (SELECT count(*) FROM conversations), "
            "(SELECT count(DISTINCT conversation_id) FROM scores)"
        ).fetchone()
    finally:
        con.close()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def parse_duration_s(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=1000.0, help="spans/s in total")
    p.add_argument("--seconds", type=float, default=60.0, help="load per phase")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--spans", type=int, default=100, help="spans per request")
    p.add_argument("--settle", default="10s")
    p.add_argument("--poll", default="2s")
    p.add_argument("--quick", action="store_true", help="20 s per phase")
    p.add_argument("--keep", action="store_true", help="keep the lakes and logs")
    args = p.parse_args(argv)
    if args.quick:
        args.seconds = 20.0
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settle_s = parse_duration_s(args.settle)
    work = Path(tempfile.mkdtemp(prefix="spanscore-follow-bench-"))
    suite = work / "suite.json"
    suite.write_text(json.dumps(SUITE))
    print(
        f"follow benchmark: {args.rate:.0f} spans/s over OTLP/HTTP for {args.seconds:.0f} s "
        f"per phase, {args.clients} clients, settle {args.settle}, poll {args.poll}"
    )
    loads: dict[str, Load] = {}
    status = 0
    try:
        for phase in ("without", "with"):
            lake = work / f"lake-{phase}"
            collector = CollectorProcess(lake, work / f"collector-{phase}.log").start()
            follower = None
            try:
                if phase == "with":
                    follower = start_follower(
                        lake, suite, args.settle, args.poll, work / "follower.log"
                    )
                load = run_load(
                    collector.http_port, args.rate, args.seconds, args.clients, args.spans
                )
                loads[phase] = load
                print(
                    f"  {phase} the follower: {load.rate:,.0f} spans/s accepted "
                    f"({load.sent_spans:,} spans, {load.refused} refused, {load.errors} errors)"
                )
                if follower is not None:
                    deadline = time.monotonic() + settle_s + 60
                    while time.monotonic() < deadline:
                        total, scored = scored_count(lake)
                        if total and scored >= total:
                            break
                        time.sleep(1)
                    follower.terminate()
                    follower.wait(timeout=120)
                    scored_lags, total, unscored, twice = lags(lake)
                    if scored_lags:
                        p50 = percentile(scored_lags, 50)
                        p99 = percentile(scored_lags, 99)
                        target = settle_s + TARGET_LAG_MARGIN_S
                        print(
                            f"  lag, last span to score committed: p50 {p50:.1f} s, "
                            f"p99 {p99:.1f} s, max {max(scored_lags):.1f} s over "
                            f"{len(scored_lags):,} conversations (target p99 <= {target:.0f} s: "
                            f"{'met' if p99 <= target else 'MISSED'})"
                        )
                    print(
                        f"  {unscored} of {total:,} conversations not scored within settle + 60 s"
                    )
                    if twice:
                        print(f"  ERROR: {twice} (conversation, metric) pairs scored twice")
                        status = 1
            finally:
                if follower is not None and follower.poll() is None:
                    follower.kill()
                    follower.wait(timeout=60)
                collector.stop()
        ratio = loads["with"].rate / loads["without"].rate if loads["without"].rate else 0.0
        print(
            f"  ingest with the follower / without: {ratio:.2f} (target >= {TARGET_RATIO}: "
            f"{'met' if ratio >= TARGET_RATIO else 'MISSED'})"
        )
    finally:
        if args.keep:
            print(f"  kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
