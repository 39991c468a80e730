"""Soak benchmark: the collector at a steady ingest rate for a long time, with background
maintenance and periodic evaluations, watched for anything that grows.

`spanscore serve` runs in a child process on a fresh lake (maintenance every
``--maintenance-interval-s``); ``--clients`` threads export realistic agent spans (the ingest
benchmark's traces, fresh ids and conversations in every request) over OTLP/gRPC or HTTP at
``--rate`` spans/s in total; every ``--eval-every-minutes`` a ``spanscore evaluate`` run scores
up to 500 new conversations (hourly in production; more often here so that a 30-minute soak
sees several). Every ``--sample-s`` it records:

- the accepted rate and the p50 / p99 export latency over the interval, refusals;
- the RSS of every process of the collector (the server and each decode worker);
- the lake's data files and snapshots, and the collector's queued rows.

At the end it prints the samples and, over the second half of the run (after warm-up), the
trend of each series per hour, absolute and relative to its mean: "no growth trend" means
those slopes are near zero. Beside the server's RSS, the trend of its floor (the lowest sample
of each 5 minutes): the allocator's swings leave the floor alone, a leak lifts it. It asserts
nothing about time; the exit status is 1 only when the lake is missing an acknowledged span or
holds one twice.

Run (from the repository root)::

    .venv/bin/python bench/soak.py                      # 30 minutes, 2,000 spans/s
    .venv/bin/python bench/soak.py --quick              # 2 minutes, a smoke run
    .venv/bin/python bench/soak.py --minutes 240 --rate 5000 --protocol http
    .venv/bin/python bench/soak.py --collector-arg=--compact-after-commits=100   # a setting
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from _preconditions import missing_package
from ingest import (
    CollectorProcess,
    Exporter,
    GrpcExporter,
    HttpExporter,
    IdSource,
    make_templates,
    percentile,
)

from spanscore.lake import connect

try:
    import psutil  # the collector's memory and CPU as the soak goes
except ImportError as exc:
    missing_package(exc)

SUITE = {
    "name": "soak",
    "metrics": [{"type": "tool_calls", "mode": "contains", "expected": ["get_order"]}],
}


@dataclass
class Sends:
    """What the clients did since the last sample (swapped out by the sampler)."""

    latencies: list[float] = field(default_factory=list)
    spans: int = 0
    refused: int = 0
    errors: int = 0


@dataclass
class Sample:
    t: float
    rate: float
    p50_ms: float
    p99_ms: float
    refused: int
    errors: int
    rss_mib: dict[str, float]
    files: int
    snapshots: int
    span_files: int
    queue_rows: int
    maintenance: str  # runs/failed so far


class Load:
    """Client threads sending at a steady total rate; counts what was acknowledged."""

    def __init__(self, args: argparse.Namespace, collector: CollectorProcess) -> None:
        self.args = args
        self.collector = collector
        self.templates = make_templates(args.batch_size)
        self.ids = IdSource()
        self.ids_lock = threading.Lock()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.sends = Sends()
        self.acked = 0
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        interval = self.args.clients * self.args.batch_size / self.args.rate
        for i in range(self.args.clients):
            thread = threading.Thread(target=self._client, args=(i, interval), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _exporter(self) -> Exporter:
        if self.args.protocol == "grpc":
            return GrpcExporter(self.collector.grpc_port)
        return HttpExporter(self.collector.http_port)

    def _client(self, index: int, interval: float) -> None:
        exporter = self._exporter()
        template = self.templates[index % len(self.templates)]
        next_at = time.monotonic() + interval * index / self.args.clients  # spread the clients
        while not self.stop.is_set():
            if self.stop.wait(max(0.0, next_at - time.monotonic())):
                break
            next_at += interval
            with self.ids_lock:
                body = template.render(self.ids)
            while not self.stop.is_set():  # an exporter retries until the export is taken
                started = time.perf_counter()
                outcome, _ = exporter.send(body)
                latency = time.perf_counter() - started
                with self.lock:
                    if outcome == "ok":
                        self.sends.latencies.append(latency)
                        self.sends.spans += template.spans
                        self.acked += template.spans
                    elif outcome == "refused":
                        self.sends.refused += 1
                    else:
                        self.sends.errors += 1
                if outcome == "ok":
                    break
                self.stop.wait(0.5)
        exporter.close()

    def take(self) -> Sends:
        with self.lock:
            sends, self.sends = self.sends, Sends()
        return sends

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(120)


def rss_by_process(pid: int) -> dict[str, float]:
    """MiB resident per process of the collector: the server, then each decode worker."""
    out: dict[str, float] = {}
    try:
        main = psutil.Process(pid)
        out["server"] = main.memory_info().rss / 2**20
        for i, child in enumerate(main.children(recursive=True)):
            name = "tracker" if "resource_tracker" in " ".join(child.cmdline()) else f"worker{i}"
            out[name] = child.memory_info().rss / 2**20
    except psutil.Error:
        pass
    return out


def lake_shape(lake: Path) -> tuple[int, int, int]:
    """(data files on disk, snapshots, span files a query opens now), read the way any other
    reader would: the files compaction replaced stay on disk until expiry, and a query for
    one conversation opens every span file of the current snapshot but the sorted ones."""
    files = sum(1 for _ in (lake / "data").rglob("*.parquet"))
    con = connect(lake, read_only=True)
    try:
        row = con.execute("SELECT count(*) FROM ducklake_snapshots('lake')").fetchone()
        current = con.execute(
            "SELECT count(*) FROM ducklake_list_files('lake', 'spans')"
        ).fetchone()
    finally:
        con.close()
    return files, int(row[0]) if row else 0, int(current[0]) if current else 0


class Evaluations:
    """`spanscore evaluate` every so often, in its own process, as the nightly job runs."""

    def __init__(self, lake: Path, suite: Path, every_s: float) -> None:
        self.lake, self.suite, self.every_s = lake, suite, every_s
        self.stop = threading.Event()
        self.runs: list[tuple[float, int, float]] = []  # (when, exit code, seconds)
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        started = time.monotonic()
        while not self.stop.wait(self.every_s):
            begin = time.monotonic()
            run = subprocess.run(
                [
                    *(sys.executable, "-m", "spanscore.cli", "evaluate"),
                    *("--lake", str(self.lake), "--suite", str(self.suite)),
                    *("--last", "3h", "--settle", "0s", "--max-conversations", "500"),
                    *("--workers", "1"),
                ],
                capture_output=True,
                text=True,
                timeout=3600,
            )
            self.runs.append((begin - started, run.returncode, time.monotonic() - begin))
            if run.returncode != 0:  # 1 is a failed gate, or a run that never started: say
                print(f"  evaluate exited {run.returncode}: {run.stderr[-4000:]}", flush=True)


def slope_per_hour(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per hour."""
    if len(points) < 2:
        return 0.0
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var * 3600


def floors(points: Sequence[tuple[float, float]], window_s: float) -> list[tuple[float, float]]:
    """The lowest point of each `window_s` window. Memory the allocator holds after a peak
    (a compaction, a burst of exports) and gives back later swings the samples by hundreds of
    MiB; what a leak holds is never given back, so it lifts the floor too."""
    lowest: dict[int, tuple[float, float]] = {}
    counts: dict[int, int] = {}
    for t, value in points:
        window = int(t // window_s)
        counts[window] = counts.get(window, 0) + 1
        if window not in lowest or value < lowest[window][1]:
            lowest[window] = (t, value)
    # A window cut short (the run's first or last) has no floor to speak of: one sample there
    # may be a peak.
    full = max(counts.values(), default=0)
    return [lowest[w] for w in sorted(lowest) if counts[w] >= 0.8 * full]


def print_report(samples: list[Sample], floor_window_s: float = 300.0) -> None:
    names = sorted({name for s in samples for name in s.rss_mib})
    head = f"{'t s':>7} {'spans/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'refused':>7} "
    head += " ".join(f"{n + ' MiB':>12}" for n in names)
    print("\n" + head + f" {'files':>6} {'snaps':>6} {'queued':>7} {'maint ok/failed':>15}")
    for s in samples:
        rss = " ".join(f"{s.rss_mib.get(n, float('nan')):12.1f}" for n in names)
        print(
            f"{s.t:7.0f} {s.rate:8.0f} {s.p50_ms:7.1f} {s.p99_ms:7.1f} {s.refused:7d} {rss} "
            f"{s.files:6d} {s.snapshots:6d} {s.queue_rows:7d} {s.maintenance:>15}"
        )
    tail = samples[len(samples) // 2 :]
    print("\ntrend over the second half (per hour; relative to the mean):")
    series: dict[str, list[tuple[float, float]]] = {
        "accepted spans/s": [(s.t, s.rate) for s in tail],
        "p99 latency ms": [(s.t, s.p99_ms) for s in tail],
        "total RSS MiB": [(s.t, sum(s.rss_mib.values())) for s in tail],
        **{f"{n} RSS MiB": [(s.t, s.rss_mib.get(n, 0.0)) for s in tail] for n in names},
        f"server RSS floor MiB ({floor_window_s / 60:.0f}-min lows)": floors(
            [(s.t, s.rss_mib.get("server", 0.0)) for s in tail], floor_window_s
        ),
        "data files": [(s.t, float(s.files)) for s in tail],
        "snapshots": [(s.t, float(s.snapshots)) for s in tail],
    }
    for name, points in series.items():
        slope = slope_per_hour(points)
        mean = statistics.fmean(p[1] for p in points) if points else 0.0
        relative = f"{slope / mean:+8.1%}" if mean else "     n/a"
        print(f"  {name:<34} {slope:+12.1f}/h  {relative}/h  (mean {mean:.1f})")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to soak")
    parser.add_argument("--rate", type=float, default=2000.0, help="spans/s, all clients")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=256, help="spans per export")
    parser.add_argument("--protocol", choices=["grpc", "http"], default="grpc")
    parser.add_argument("--sample-s", type=float, default=30.0)
    parser.add_argument("--maintenance-interval-s", type=float, default=60.0)
    parser.add_argument("--eval-every-minutes", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true", help="2 minutes, sampled every 10 s")
    parser.add_argument("--keep", action="store_true", help="keep the lake and the log")
    parser.add_argument(
        "--collector-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra `spanscore serve` argument, repeatable "
        "(e.g. --collector-arg=--compact-after-commits=100)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.minutes, args.sample_s = 2.0, 10.0
        args.maintenance_interval_s, args.eval_every_minutes = 20.0, 1.0
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="spanscore-soak-"))
    lake = workdir / "lake"
    suite = workdir / "suite.json"
    suite.write_text(json.dumps(SUITE))
    collector = CollectorProcess(
        lake,
        workdir / "collector.log",
        [
            *("--maintenance-interval-s", str(args.maintenance_interval_s)),
            *("--snapshot-retention-s", str(args.maintenance_interval_s)),
            *args.collector_arg,
        ],
    )
    print(
        f"soak: {args.minutes:g} min at {args.rate:,.0f} spans/s over {args.protocol} "
        f"({args.clients} clients, {args.batch_size} spans per export); maintenance every "
        f"{args.maintenance_interval_s:g} s, evaluation every {args.eval_every_minutes:g} min"
        + (f"; collector {' '.join(args.collector_arg)}" if args.collector_arg else ""),
        flush=True,
    )
    collector.start()
    load = Load(args, collector)
    evaluations = Evaluations(lake, suite, args.eval_every_minutes * 60)
    samples: list[Sample] = []
    every_latency: list[float] = []
    status = 0
    try:
        started = time.monotonic()
        load.start()
        evaluations.thread.start()
        deadline = started + args.minutes * 60
        next_sample = started + args.sample_s
        while time.monotonic() < deadline:
            time.sleep(max(0.0, min(next_sample, deadline) - time.monotonic()))
            if time.monotonic() < next_sample:
                continue
            sends = load.take()
            files, snapshots, span_files = lake_shape(lake)
            doc = collector.status()
            gauges, counters = doc.get("gauges", {}), doc.get("counters", {})
            latencies = sends.latencies or [0.0]
            every_latency.extend(sends.latencies)
            samples.append(
                Sample(
                    t=time.monotonic() - started,
                    rate=sends.spans / args.sample_s,
                    p50_ms=percentile(latencies, 50) * 1000,
                    p99_ms=percentile(latencies, 99) * 1000,
                    refused=sends.refused,
                    errors=sends.errors,
                    rss_mib=rss_by_process(collector.pid),
                    files=files,
                    snapshots=snapshots,
                    span_files=span_files,
                    queue_rows=int(gauges.get("queue_rows", 0)),
                    maintenance=f"{counters.get('maintenance_runs', 0)}/"
                    f"{counters.get('maintenance_failed', 0)}",
                )
            )
            last = samples[-1]
            print(
                f"  {last.t:6.0f}s {last.rate:8.0f} spans/s  p99 {last.p99_ms:7.1f} ms  "
                f"RSS {sum(last.rss_mib.values()):7.1f} MiB  files {files}  snapshots "
                f"{snapshots}  span files now {span_files}",
                flush=True,
            )
            next_sample += args.sample_s
    finally:
        evaluations.stop.set()
        load.finish()
        evaluations.thread.join(3600)
        code = collector.stop()
        if code != 0:
            print(f"collector exited {code}: {collector.log_tail()}")
    if samples:
        print_report(samples)
    if every_latency:
        print(
            f"\nover the run: {len(every_latency):,} exports acknowledged, latency p50 "
            f"{percentile(every_latency, 50) * 1000:.1f} ms, p99 "
            f"{percentile(every_latency, 99) * 1000:.1f} ms, p99.9 "
            f"{percentile(every_latency, 99.9) * 1000:.1f} ms, max "
            f"{max(every_latency) * 1000:.1f} ms; span files a query opened, at most "
            f"{max((s.span_files for s in samples), default=0):,} (sampled)"
        )
    print(f"\nevaluations: {len(evaluations.runs)}")
    for when, code, seconds in evaluations.runs:
        print(f"  at {when:6.0f}s  exit {code}  {seconds:6.1f}s")
    con = connect(lake, read_only=True)
    try:
        stored, distinct = con.execute(
            "SELECT count(*), count(DISTINCT (trace_id, span_id)) FROM spans"
        ).fetchone() or (0, 0)
    finally:
        con.close()
    print(f"\nacknowledged {load.acked:,} spans; the lake holds {stored:,} ({distinct:,} distinct)")
    # More stored than acknowledged is fine (an export committed as the run stopped, its answer
    # not awaited); fewer, or a span twice, is a broken promise.
    if stored < load.acked or distinct != stored:
        print("MISMATCH: acknowledged spans are missing, or a span is stored twice")
        status = 1
    if args.keep:
        print(f"kept {workdir} (lake and collector log)")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
