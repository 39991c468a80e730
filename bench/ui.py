"""Review app benchmark: how fast `spanscore ui` serves its pages on a big lake, what it costs
the collector, and whether a huge conversation opens and scrolls in a browser.

What it does, in one run:

1. **Lake**: ``--conversations`` (100,000) synthetic conversations (examples/synthetic.py, 10
   spans each; one in 16 moved to a second service so that a service filter selects), one
   conversation of ``--huge-spans`` (30,000) spans sent over OTLP/HTTP through the collector
   (the ingest benchmark's agent traces, 1,500 turns of 20 spans), then maintenance (compaction,
   trajectories stored), then evaluation runs of a deterministic suite: ``--scored`` (20,000)
   conversations, and three runs of 1,000 more so that the history has a trend. Scoring all
   100,000 would take most of the run on two cores; the pages read the same tables either way.
2. **Warm page times**: ``spanscore ui --lake L --port 0`` in a child process, pages requested
   over one keep-alive HTTP connection after a warm-up, ``--requests`` times each: the
   conversation page (a different conversation each time), the list filtered by service, by
   text and by a failed metric, and the run history (``/``). Beside each,
   in the same loop: the page's read function in this process on a read-only connection (no
   HTTP, no template), and the bare DuckDB query on that connection: the conversation's spans
   (``SELECT * FROM spans WHERE conversation_id = ?``), and for the list and the history the
   statements their read function runs, replayed as they were sent. p50 and p95, the ratio of
   the page to the bare query, and the issue's targets (p95: conversation < 150 ms, filtered
   list < 300 ms, history < 300 ms).
3. **The huge conversation in Chromium** (Debian's, headless, driven by Playwright): the time
   from navigation until the trajectory is drawn (``#trajectory[data-ready]``; target < 2 s),
   the page's size and its server time; then ``--scrolls`` scrolls to the bottom (each draws
   the next page of steps), with the round trip of a script call after each and the longest
   task the page ran (the tab's responsiveness).
4. **Under ingest**: the collector (``spanscore serve``) on the same lake; ``--clients``
   OTLP/HTTP clients send the ingest benchmark's traces as fast as it accepts them
   (its capacity), then at half that rate for ``--seconds`` without, and again with, ten
   clients browsing the app in a loop (another process, no pause between pages): the accepted
   rates and their ratio (target >= 0.9), and the browsing clients' page times.

Figures are printed, nothing about time is asserted.

    .venv/bin/python bench/ui.py            # 100,000 conversations, about 15 min on 2 cores
    .venv/bin/python bench/ui.py --quick    # 5,000 conversations, a smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import http.client
import multiprocessing
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import duckdb
from ingest import (
    CollectorProcess,
    HttpExporter,
    IdSource,
    Template,
    Tokens,
    agent_turn_spans,
    key_values,
    make_templates,
    percentile,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from report import CHROMIUM_ARGS

from spanscore.evaluation import load_suite, review
from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.runs.run import evaluate
from spanscore.examples.synthetic import build_lake
from spanscore.lake import connect, maintain

SUITE: dict[str, Any] = {
    "name": "ui-bench",
    "metrics": [
        {"type": "tool_calls", "mode": "contains", "expected": ["get_order", "search_products"]},
        {"type": "response", "keywords": ["shipped"]},
        {"type": "efficiency"},
        {"type": "forbidden", "calls": [{"name": "cancel_order"}]},
    ],
}
SECOND_SERVICE = "billing-agent"
HUGE_ID = "conv-huge"
TARGETS_MS = {"conversation": 150.0, "list": 300.0, "history": 300.0}
TARGET_OPEN_S = 2.0
TARGET_INGEST_RATIO = 0.9
BROWSERS = 10
# The longest task and round trip above which a tab feels frozen (RAIL's 100 ms response).
RESPONSIVE_MS = 100.0


# --- the lake -------------------------------------------------------------------------------


def synthetic_id(c: int) -> str:
    """The id examples/synthetic.py gives conversation c."""
    return "conv-" + hashlib.md5(f"c{c}".encode()).hexdigest()[:12]


def huge_requests(spans: int, per_request: int = 500) -> list[tuple[bytes, int]]:
    """One conversation of `spans` spans, as turns of 20 (the ingest benchmark's traces, their
    conversation id replaced), in OTLP requests of `per_request` spans: (body, span count)."""
    rng = random.Random(56)
    tokens = Tokens(rng)
    t = time.time_ns() - 6 * 3600 * 10**9
    built: list[Any] = []
    while len(built) < spans:
        trace = agent_turn_spans(tokens, rng, min(20, spans - len(built)), t)
        t = max(s.end_time_unix_nano for s in trace) + 2 * 10**9
        for span in trace:
            for attribute in span.attributes:
                if attribute.key == "gen_ai.conversation.id":
                    attribute.value.string_value = HUGE_ID
        built.extend(trace)
    requests = []
    for lo in range(0, len(built), per_request):
        request = trace_service_pb2.ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.extend(key_values({"service.name": "support-agent"}))
        scope = resource_spans.scope_spans.add()
        scope.scope.name = "opentelemetry.instrumentation.openai_agents"
        chunk = built[lo : lo + per_request]
        scope.spans.extend(chunk)
        requests.append((request.SerializeToString(), len(chunk)))
    return requests


def send_all(port: int, requests: Sequence[tuple[bytes, int]]) -> int:
    exporter = HttpExporter(port)
    sent = 0
    try:
        for body, count in requests:
            for _attempt in range(20):
                outcome, detail = exporter.send(body)
                if outcome == "ok":
                    sent += count - int(detail)
                    break
                time.sleep(0.5)
            else:
                raise RuntimeError(f"the collector did not take a request: {detail}")
    finally:
        exporter.close()
    return sent


def make_lake(lake: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    started = time.perf_counter()
    build_lake(lake, args.conversations)
    con = connect(lake)
    # One conversation in 16 (their ids' first hex digit is 0) to a second service.
    con.execute(
        "UPDATE spans SET service_name = ? WHERE conversation_id LIKE 'conv-0%'", [SECOND_SERVICE]
    )
    con.close()
    facts["build_s"] = time.perf_counter() - started
    print(
        f"built {args.conversations:,} synthetic conversations in {facts['build_s']:.0f} s",
        flush=True,
    )

    started = time.perf_counter()
    requests = huge_requests(args.huge_spans)
    collector = CollectorProcess(lake, work / "collector-huge.log").start()
    try:
        sent = send_all(collector.http_port, requests)
    finally:
        collector.stop()
    print(
        f"sent one conversation of {sent:,} spans over OTLP/HTTP in "
        f"{time.perf_counter() - started:.0f} s",
        flush=True,
    )

    con = connect(lake)
    started = time.perf_counter()
    done = maintain(con, expire_older_than_s=0, delete_older_than_s=0, store_settled_after_s=0)
    con.close()
    print(
        f"maintenance in {time.perf_counter() - started:.0f} s: "
        f"{done.get('conversations_stored', 0):,} trajectories stored",
        flush=True,
    )

    suite = load_suite(SUITE)
    since = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    for size in (args.scored, *([1_000] * 3)):
        started = time.perf_counter()
        result = evaluate(
            lake,
            suite,
            RunOptions(settle_s=0, since=since, max_conversations=size, rescore=True),
        )
        print(
            f"evaluation run {result.run_id}: {result.scored:,} conversations scored in "
            f"{time.perf_counter() - started:.0f} s",
            flush=True,
        )
    return facts


# --- the app --------------------------------------------------------------------------------


class App:
    """`spanscore ui --port 0` in a child process; `url` once it listens."""

    def __init__(self, lake: Path, log: Path) -> None:
        self.log = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "spanscore.cli", "ui", "--lake", str(lake), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(120)
        found = re.search(rb"http://127\.0\.0\.1:(\d+)/", line[0] if line else b"")
        if found is None:
            self.stop()
            raise RuntimeError(f"spanscore ui did not print its URL (see {log})")
        self.port = int(found.group(1))
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.log.close()


class Client:
    """One keep-alive HTTP connection to the app."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)

    def get(self, path: str) -> int:
        """Fetches `path`; returns its size. Anything but 200 is an error."""
        for attempt in (1, 2):
            try:
                self.conn.request("GET", path)
                response = self.conn.getresponse()
                body = response.read()
                break
            except (OSError, http.client.HTTPException) as exc:
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
                # The server closes a connection idle for some seconds (uvicorn: 5 s), as
                # the benchmark's own queries take between two pages: connect again, as a
                # browser does.
                stale = isinstance(exc, http.client.RemoteDisconnected | ConnectionResetError)
                if attempt == 2 or not stale:
                    raise
        if response.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {response.status}: {body[:300]!r}")
        return len(body)

    def close(self) -> None:
        self.conn.close()


class Recorder:
    """A connection that notes the statements a read function runs, to replay them bare."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.statements: list[tuple[str, Any]] = []

    def execute(self, sql: str, parameters: Any = None) -> duckdb.DuckDBPyConnection:
        self.statements.append((sql, parameters))
        return self.con.execute(sql, parameters)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.con, name)


@dataclass
class Page:
    """One kind of page: its URLs, its read function and its bare query."""

    name: str
    target: str  # key of TARGETS_MS
    paths: list[str]
    read: Callable[[duckdb.DuckDBPyConnection, int], Any]
    bare: Callable[[duckdb.DuckDBPyConnection, int], Any]


def replayed(fn: Callable[[duckdb.DuckDBPyConnection], Any], con: duckdb.DuckDBPyConnection) -> Any:
    """The bare queries of a read function: the statements it ran once, each run again and
    fetched whole (Arrow), without the function's Python around them."""
    recorder = Recorder(con)
    fn(recorder)  # type: ignore[arg-type]
    statements = list(recorder.statements)

    def bare(con: duckdb.DuckDBPyConnection, i: int) -> None:
        for sql, parameters in statements:
            con.execute(sql, parameters).to_arrow_table()

    return bare


def pages(con: duckdb.DuckDBPyConnection, ids: list[str], failed: str) -> list[Page]:
    def conversation_read(con: duckdb.DuckDBPyConnection, i: int) -> Any:
        return review.conversation_view(con, ids[i % len(ids)])

    def conversation_bare(con: duckdb.DuckDBPyConnection, i: int) -> Any:
        return con.execute(
            "SELECT * FROM spans WHERE conversation_id = ?", [ids[i % len(ids)]]
        ).to_arrow_table()

    kinds = [
        Page(
            "conversation page",
            "conversation",
            [f"/conversations/{quote(c)}" for c in ids],
            conversation_read,
            conversation_bare,
        )
    ]
    filters = {
        "list, service filter": {"service": SECOND_SERVICE},
        "list, text filter": {"text": "ORD-4242"},
        "list, failed metric": {"failed": failed},
    }
    for name, query in filters.items():
        f = review.ConversationFilter.model_validate(query)

        def read(con: duckdb.DuckDBPyConnection, i: int, f: Any = f) -> Any:
            return review.list_conversations(con, f)

        kinds.append(
            Page(
                name,
                "list",
                [f"/conversations?{urlencode(query)}"],
                read,
                replayed(partial(read, i=0), con),
            )
        )

    def history_read(con: duckdb.DuckDBPyConnection, i: int) -> Any:
        return review.run_history(con)

    kinds.append(
        Page(
            "run history (/)",
            "history",
            ["/"],
            history_read,
            replayed(review.run_history, con),
        )
    )
    return kinds


@dataclass
class Times:
    app: list[float] = field(default_factory=list)
    read: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)


def _ms(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def warm_page_times(app: App, lake: Path, args: argparse.Namespace) -> dict[str, Times]:
    con = connect(lake, read_only=True)
    try:
        ids = [synthetic_id(c) for c in random.Random(7).sample(range(args.conversations), 50)]
        (failed,) = con.execute(
            "SELECT metric FROM scores WHERE passed = false GROUP BY metric "
            "ORDER BY count(*) LIMIT 1"
        ).fetchone() or ("forbidden",)
        kinds = pages(con, ids, failed)
        client = Client(app.port)
        times: dict[str, Times] = {}
        try:
            for kind in kinds:
                t = times[kind.name] = Times()
                for i in range(args.warmup):  # the app's, this process's and DuckDB's caches
                    client.get(kind.paths[i % len(kind.paths)])
                    kind.read(con, i)
                    kind.bare(con, i)
                for i in range(args.requests):
                    j = args.warmup + i  # conversations not seen in the warm-up
                    path = kind.paths[j % len(kind.paths)]
                    t.app.append(_ms(partial(client.get, path)))
                    t.read.append(_ms(partial(kind.read, con, j)))
                    t.bare.append(_ms(partial(kind.bare, con, j)))
                print(
                    f"  {kind.name}: app p50 {percentile(t.app, 50):.0f} ms, "
                    f"bare p50 {percentile(t.bare, 50):.1f} ms",
                    flush=True,
                )
        finally:
            client.close()
    finally:
        con.close()
    print()
    print(f"warm page times, ms, {args.requests} requests each (failed metric: {failed})")
    print(
        f"{'':24}{'app p50':>9}{'p95':>8}{'read fn p50':>13}{'p95':>8}{'bare p50':>10}"
        f"{'p95':>8}{'app/bare':>10}{'target p95':>12}"
    )
    for kind in kinds:
        t = times[kind.name]
        target = TARGETS_MS[kind.target]
        p95 = percentile(t.app, 95)
        ratio = percentile(t.app, 50) / max(percentile(t.bare, 50), 1e-6)
        print(
            f"{kind.name:24}{percentile(t.app, 50):>9.1f}{p95:>8.1f}"
            f"{percentile(t.read, 50):>13.1f}{percentile(t.read, 95):>8.1f}"
            f"{percentile(t.bare, 50):>10.1f}{percentile(t.bare, 95):>8.1f}{ratio:>10.1f}"
            f"{'< ' + format(target, '.0f'):>9} {'met' if p95 < target else 'MISSED'}"
        )
    print(
        "(app: the page over HTTP; read fn: its read function in this process, no HTTP, no "
        "template; bare: the conversation's spans, or the statements the read function runs)"
    )
    return times


# --- the huge conversation in Chromium ------------------------------------------------------

LONGEST_TASK_JS = """
window.__longest = 0;
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__longest = Math.max(window.__longest, e.duration);
}).observe({type: 'longtask', buffered: true});
"""
NAVIGATION_JS = """() => {
  const n = performance.getEntriesByType('navigation')[0];
  return {response_end: n.responseEnd, dom_loaded: n.domContentLoadedEventEnd,
          drawn: Number(document.querySelector('#trajectory [data-drawn]')?.dataset.drawn || 0),
          longest: window.__longest};
}"""
STATE_JS = """() => ({
  drawn: Number(document.querySelector('#trajectory [data-drawn]')?.dataset.drawn || 0),
  longest: window.__longest,
  height: document.documentElement.scrollHeight})"""


def huge_conversation(app: App, lake: Path, args: argparse.Namespace) -> None:
    path = f"/conversations/{quote(HUGE_ID)}"
    con = connect(lake, read_only=True)
    try:
        (spans,) = con.execute(
            "SELECT count(*) FROM spans WHERE conversation_id = ?", [HUGE_ID]
        ).fetchone() or (0,)
        bare = min(
            _ms(
                lambda: con.execute(
                    "SELECT * FROM spans WHERE conversation_id = ?", [HUGE_ID]
                ).to_arrow_table()
            )
            for _ in range(3)
        )
        read = min(_ms(lambda: review.conversation_view(con, HUGE_ID)) for _ in range(3))
    finally:
        con.close()
    client = Client(app.port)
    try:
        size = client.get(path)
        server = min(_ms(lambda: client.get(path)) for _ in range(3))
    finally:
        client.close()
    print()
    print(
        f"huge conversation: {spans:,} spans; page {size / 1e6:.1f} MB, served in {server:.0f} ms "
        f"(best of 3; read function {read:.0f} ms, bare query of its spans {bare:.0f} ms)"
    )
    executable = shutil.which("chromium")
    try:
        from playwright.sync_api import TimeoutError as PlaywrightTimeout
        from playwright.sync_api import sync_playwright
    except ImportError:
        executable = None
    if executable is None:
        print("  no chromium or playwright here: the browser figures are left out")
        return
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.add_init_script(LONGEST_TASK_JS)
            page = context.new_page()
            page.set_default_timeout(300_000)
            opens = []
            for _ in range(args.opens):
                started = time.perf_counter()
                page.goto(app.url + path, wait_until="commit")
                page.wait_for_selector('#trajectory[data-ready="1"]', state="attached")
                opens.append(time.perf_counter() - started)
                nav = page.evaluate(NAVIGATION_JS)
            median = statistics.median(opens)
            print(
                f"  Chromium: open until the trajectory is drawn {median:.2f} s "
                f"(median of {len(opens)}: {', '.join(f'{s:.2f}' for s in opens)}; target < "
                f"{TARGET_OPEN_S:.0f} s: {'met' if median < TARGET_OPEN_S else 'MISSED'})"
            )
            print(
                f"  last open: response received at {nav['response_end']:.0f} ms, DOM loaded at "
                f"{nav['dom_loaded']:.0f} ms, {nav['drawn']} steps drawn, longest task "
                f"{nav['longest']:.0f} ms"
            )
            page.evaluate("() => { window.__longest = 0; }")
            trips, drawn = [], nav["drawn"]
            for _ in range(args.scrolls):
                page.evaluate("() => window.scrollTo(0, document.documentElement.scrollHeight)")
                trips.append(_ms(lambda: page.evaluate("() => 1")))
                with contextlib.suppress(PlaywrightTimeout):  # everything is drawn already
                    page.wait_for_function(
                        f"() => Number(document.querySelector('#trajectory [data-drawn]')"
                        f"?.dataset.drawn || 0) > {drawn}",
                        timeout=10_000,
                    )
                state = page.evaluate(STATE_JS)
                drawn = state["drawn"]
            print(
                f"  {args.scrolls} scrolls to the bottom: {drawn:,} steps drawn at the end "
                f"(page height {state['height']:,} px); a script call's round trip after each "
                f"scroll: median {statistics.median(trips):.0f} ms, max {max(trips):.0f} ms; "
                f"longest task while scrolling {state['longest']:.0f} ms "
                f"({'responsive' if max(max(trips), state['longest']) < RESPONSIVE_MS else 'SLOW'}"
                f": under {RESPONSIVE_MS:.0f} ms)"
            )
            context.close()
        finally:
            browser.close()


# --- under ingest ---------------------------------------------------------------------------


@dataclass
class Load:
    spans: int = 0
    refused: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.spans / self.seconds if self.seconds else 0.0


def ingest(
    port: int, templates: Sequence[Template], clients: int, seconds: float, rate: float | None
) -> Load:
    """`clients` OTLP/HTTP clients sending fresh copies of `templates` for `seconds`: as fast
    as they are acknowledged (`rate` None), or each at its share of `rate` spans/s (a client
    behind its schedule sends at once: the accepted rate is then the collector's)."""
    load = Load()
    lock = threading.Lock()
    per_body = templates[0].spans
    interval = per_body * clients / rate if rate else 0.0
    start = time.perf_counter() + 0.5
    deadline = start + seconds

    def client(index: int) -> None:
        exporter = HttpExporter(port)
        ids = IdSource()
        k = 0
        try:
            while True:
                body = templates[(index + k) % len(templates)].render(ids)
                due = start + (k + index / clients) * interval
                if due >= deadline or (not rate and time.perf_counter() >= deadline):
                    break
                if due > time.perf_counter():
                    time.sleep(due - time.perf_counter())
                sent = time.perf_counter()
                outcome, detail = exporter.send(body)
                with lock:
                    if outcome == "ok":
                        load.spans += per_body - int(detail)
                        load.latencies.append(time.perf_counter() - sent)
                    elif outcome == "refused":
                        load.refused += 1
                    else:
                        load.errors += 1
                k += 1
        finally:
            exporter.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    load.seconds = time.perf_counter() - start
    return load


def browse(port: int, paths: dict[str, list[str]], seconds: float) -> dict[str, list[float]]:
    """`BROWSERS` clients requesting pages in a loop, no pause, for `seconds` (in a process of
    its own, not to take the ingest clients' interpreter): each kind's times in ms."""
    times: dict[str, list[float]] = {kind: [] for kind in paths}
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds
    errors: list[str] = []

    def loop(index: int) -> None:
        client = Client(port)
        rng = random.Random(index)
        kinds = list(paths)
        try:
            while time.perf_counter() < deadline:
                kind = kinds[rng.randrange(len(kinds))]
                path = rng.choice(paths[kind])
                try:
                    ms = _ms(partial(client.get, path))
                except Exception as exc:
                    errors.append(str(exc))
                    continue
                with lock:
                    times[kind].append(ms)
        finally:
            client.close()

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(BROWSERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        times["errors"] = [float(len(errors))]
        print(f"  ! {len(errors)} page errors while browsing, e.g. {errors[0][:200]}", flush=True)
    return times


def under_ingest(app: App, lake: Path, work: Path, args: argparse.Namespace) -> None:
    ids = [synthetic_id(c) for c in random.Random(11).sample(range(args.conversations), 200)]
    con = connect(lake, read_only=True)
    (failed,) = con.execute(
        "SELECT metric FROM scores WHERE passed = false GROUP BY metric ORDER BY count(*) LIMIT 1"
    ).fetchone() or ("forbidden",)
    con.close()
    paths = {
        "conversation page": [f"/conversations/{quote(c)}" for c in ids],
        "filtered list": [
            f"/conversations?{urlencode(q)}"
            for q in (
                {"service": SECOND_SERVICE},
                {"text": "ORD-4242"},
                {"failed": failed},
            )
        ],
        "run history (/)": ["/"],
    }
    templates = make_templates(args.batch_size, 4)
    collector = CollectorProcess(lake, work / "collector-ingest.log").start()
    print()
    print(
        f"under ingest: the collector on the same lake, {args.clients} OTLP/HTTP clients, "
        f"{args.batch_size}-span exports, {args.seconds:.0f} s per phase",
        flush=True,
    )
    try:
        capacity = ingest(collector.http_port, templates, args.clients, args.seconds, None)
        print(
            f"  capacity (as fast as acknowledged): {capacity.rate:,.0f} spans/s "
            f"(export p50 {percentile(capacity.latencies, 50) * 1000:.0f} ms; "
            f"{capacity.refused} refused, {capacity.errors} errors)",
            flush=True,
        )
        half = capacity.rate / 2
        alone = ingest(collector.http_port, templates, args.clients, args.seconds, half)
        print(
            f"  at half of it ({half:,.0f} spans/s offered), nobody browsing: "
            f"{alone.rate:,.0f} spans/s accepted ({alone.refused} refused, {alone.errors} errors)",
            flush=True,
        )
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            # The browsers start first and stop after the load: they browse all along.
            browsing = pool.apply_async(browse, (app.port, paths, args.seconds + 4))
            time.sleep(2)
            busy = ingest(collector.http_port, templates, args.clients, args.seconds, half)
            times = browsing.get(timeout=args.seconds + 600)
        ratio = busy.rate / alone.rate if alone.rate else 0.0
        print(
            f"  at half of it, {BROWSERS} clients browsing: {busy.rate:,.0f} spans/s accepted "
            f"({busy.refused} refused, {busy.errors} errors)"
        )
        print(
            f"  accepted with browsing / without: {ratio:.2f} (target >= {TARGET_INGEST_RATIO}: "
            f"{'met' if ratio >= TARGET_INGEST_RATIO else 'MISSED'})"
        )
        print(f"  page times while ingesting, {BROWSERS} clients browsing at once (ms):")
        for kind, values in times.items():
            if kind == "errors" or not values:
                continue
            print(
                f"    {kind:20} p50 {percentile(values, 50):>7.0f}  p95 "
                f"{percentile(values, 95):>7.0f}  ({len(values)} pages, "
                f"{len(values) / (args.seconds + 4):.1f}/s)"
            )
    finally:
        code = collector.stop()
        if code != 0:
            print(f"  ! collector exit status {code}; log tail:\n{collector.log_tail()}")


# --- main -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--conversations", type=int, default=100_000)
    p.add_argument("--scored", type=int, default=20_000, help="conversations the first run scores")
    p.add_argument("--huge-spans", type=int, default=30_000)
    p.add_argument("--requests", type=int, default=15, help="timed requests per page")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--opens", type=int, default=3, help="times the huge conversation is opened")
    p.add_argument("--scrolls", type=int, default=8)
    p.add_argument("--seconds", type=float, default=30.0, help="ingest per phase")
    p.add_argument("--clients", type=int, default=8, help="OTLP/HTTP clients")
    p.add_argument("--batch-size", type=int, default=512, help="spans per export")
    p.add_argument("--quick", action="store_true", help="a small lake, a smoke run")
    p.add_argument("--keep", action="store_true", help="keep the lake and the logs")
    p.add_argument(
        "--lake",
        type=Path,
        help="a lake this benchmark built and kept (--keep), with the same --conversations: "
        "measured again without building it (the ingest phase adds to it)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.conversations = min(args.conversations, 5_000)
        args.scored = min(args.scored, 2_000)
        args.huge_spans = min(args.huge_spans, 3_000)
        args.requests = min(args.requests, 8)
        args.warmup = min(args.warmup, 2)
        args.opens = min(args.opens, 2)
        args.scrolls = min(args.scrolls, 3)
        args.seconds = min(args.seconds, 8.0)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="spanscore-ui-bench-"))
    lake = args.lake or work / "lake"
    app = None
    try:
        if args.lake is None:
            make_lake(lake, work, args)
        app = App(lake, work / "ui.log")
        print(f"spanscore ui at {app.url}", flush=True)
        warm_page_times(app, lake, args)
        huge_conversation(app, lake, args)
        under_ingest(app, lake, work, args)
    finally:
        if app is not None:
            app.stop()
        if args.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
