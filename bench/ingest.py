"""Ingest benchmark: how many agent spans per second the spanscore collector commits to the lake.

What it measures, in one run:

1. **In-process ceiling** (no network, no collector process): the same request bodies through
   parse (``ExportTraceServiceRequest.FromString``), flatten (decode and ``Flattener().spans``,
   as a decode worker does) and the collector's own ``GroupCommitWriter`` appending
   ~50,000-row groups to a fresh lake, fed from two threads. Printed as spans/s for parse
   alone, flatten alone and the three end to end.
2. **OTLP/gRPC**: ``spanscore serve`` in a child process on a fresh lake; ``--clients`` threads
   (one channel each) export pre-serialized 512-span requests for ``--seconds``. An export is
   acknowledged only after its commit, so the figures are accepted spans/s (spans in successful
   exports / wall time), p50/p99 export latency, and refused exports (RESOURCE_EXHAUSTED /
   UNAVAILABLE, retried after a short backoff like a real exporter).
3. **OTLP/HTTP** (protobuf, ``POST /v1/traces``): the same with one persistent ``http.client``
   connection per client thread, against another fresh collector and lake.
4. **A minimal server** (OTLP/gRPC, after the collector's gRPC phase, same clients and bodies):
   ``bench/_minimal_otlp.py``, what one writes first in Python with the same libraries
   (grpcio's servicer on a thread pool, one row per span, one DuckDB transaction per export,
   answered after its commit; no worker processes, group commit, conventions or limits).
   The summary prints the collector's spans/s over its spans/s (target: 3 times or more).

After each network phase the lake is opened and its span count compared with the acknowledged
spans (and checked for duplicates); the collector's peak RSS (``VmHWM`` of the collector plus
its decode worker processes, else sampled RSS) is reported. The spans are realistic GenAI agent
traces: an ``invoke_agent`` root per trace with ``chat`` and ``execute_tool`` children, ~15
semantic-convention attributes per span, ~200-byte JSON tool arguments and ~500-byte JSON tool
results. Every span sent in the run has its own trace/span ids (patched into pre-serialized
templates before any timing starts).

It prints figures and the targets for context (>= 30,000 spans/s per protocol, end to end >= 60%
of the ceiling, collector memory < 1 GiB); it asserts nothing about time. The exit status is 1
only when a lake count does not match what was acknowledged.

Run (from the repository root)::

    .venv/bin/python bench/ingest.py                  # default: 15 s per protocol, 8 clients
    .venv/bin/python bench/ingest.py --quick          # ~3 s per protocol, smoke test
    .venv/bin/python bench/ingest.py --clients 16 --seconds 30
    .venv/bin/python bench/ingest.py --collector-arg=--batch-delay-ms=20   # try a setting
    .venv/bin/python bench/ingest.py --baseline-flatten e4bc8a8   # flatten against a revision
    .venv/bin/python bench/ingest.py --baseline-collector e4bc8a8 # end to end against one
    .venv/bin/python bench/ingest.py --quick --collector-arg=--maintenance-interval-s=1 \
        --compare-collector-arg=--retention-days=30   # a setting's cost, same run

``--baseline-collector REV`` runs each protocol's phase against git revision REV's collector
too (its sources extracted to a temporary directory and put first on the collector's
PYTHONPATH; its lake counted by its own code), alternating with today's for
``--baseline-rounds`` rounds (default 2), and prints both rates and their ratio: ingest of
today's collector against an earlier one's, in the same run.

With ``--baseline-collector REV`` the in-process ceiling is also measured for both
collectors, each in fresh child processes on the same bodies, alternating, and printed with
their ratio.

``--baseline-flatten REV`` also times the flattener of git revision REV (its ``collector`` and
``lake`` sources, extracted to a temporary directory) on the same request bodies as today's,
each in a fresh child process, alternating, three rounds each, and prints both (best round)
and their ratio: the flattener is where ingest spends its Python time.
"""

from __future__ import annotations

import abc
import argparse
import http.client
import json
import math
import os
import pickle
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import duckdb
import grpc
import pyarrow as pa
import pyarrow.compute as pc
from _preconditions import need_packages
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from spanscore.collector.config import CollectorConfig
from spanscore.collector.flatten import LOGS_SCHEMA, Flattener, Limits
from spanscore.collector.pool import FlattenPool, flatten_request
from spanscore.collector.stats import Stats
from spanscore.collector.writer import CONVERSATION_TRACES, GroupCommitWriter, Pending, QueueFull
from spanscore.lake import connect

# The helpers tests and benchmarks share (the collector process) are in tests/support; a script
# run as `python bench/ingest.py` has bench/ on sys.path, not the repository.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.collector import ServeProcess
from tests.support.ports import free_port

EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
TARGET_SPANS_PER_S = 30_000
TARGET_RATIO = 0.60
TARGET_RSS_BYTES = 1 << 30
MIB = 1 << 20
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # odd, so multiplying by it is a bijection on 64-bit integers


# --- realistic agent spans ----------------------------------------------------------------------

AGENTS = ("support", "billing", "returns", "travel-planner", "research", "sre-oncall")
MODELS = ("gpt-4.1-mini", "gpt-4o", "claude-sonnet-4", "gemini-2.5-flash")
TOOLS = (
    ("get_order", "Look up an order by id"),
    ("verify_customer", "Check the customer's identity"),
    ("cancel_order", "Cancel an order that has not shipped"),
    ("refund_payment", "Refund a captured payment"),
    ("search_kb", "Search the knowledge base"),
    ("update_address", "Change the shipping address"),
    ("get_weather", "Current weather for a city"),
    ("run_sql", "Run a read-only SQL query"),
)
_WORD_TEXT = (
    "order shipped pending refund customer address parcel invoice warehouse carrier delayed "
    "tracking priority standard express return label policy exception verified account email "
    "payment card captured authorized region europe north south west east store online"
)
WORDS = tuple(_WORD_TEXT.split())


class Tokens:
    """Placeholder values put into a template; each is later found in the serialized bytes."""

    TRACE, SPAN, HEX = "trace", "span", "hex"

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.kinds: dict[bytes, str] = {}

    def _new(self, kind: str, make: Callable[[], bytes]) -> bytes:
        while True:
            value = make()
            if value not in self.kinds and value.strip(b"\0"):
                self.kinds[value] = kind
                return value

    def trace_id(self) -> bytes:
        return self._new(self.TRACE, lambda: self.rng.randbytes(16))

    def span_id(self) -> bytes:
        return self._new(self.SPAN, lambda: self.rng.randbytes(8))

    def hex(self, chars: int) -> str:
        """A random lowercase hex string of `chars` characters (even), replaced per body."""
        return self._new(self.HEX, lambda: self.rng.randbytes(chars // 2).hex().encode()).decode()


def _any_value(value: Any) -> common_pb2.AnyValue:
    v = common_pb2.AnyValue()
    if isinstance(value, bool):
        v.bool_value = value
    elif isinstance(value, int):
        v.int_value = value
    elif isinstance(value, float):
        v.double_value = value
    elif isinstance(value, list):
        v.array_value.values.extend(_any_value(x) for x in value)
    else:
        v.string_value = str(value)
    return v


def key_values(attrs: dict[str, Any]) -> list[common_pb2.KeyValue]:
    return [common_pb2.KeyValue(key=k, value=_any_value(v)) for k, v in attrs.items()]


def _padded_json(doc: dict[str, Any], size: int, rng: random.Random) -> str:
    """`doc` as JSON, with a `note` of words making it about `size` bytes long."""
    text = json.dumps(doc, separators=(",", ":"))
    words: list[str] = []
    while len(text) + len(" ".join(words)) + 12 < size:
        words.append(rng.choice(WORDS))
    return json.dumps({**doc, "note": " ".join(words)}, separators=(",", ":"))


def _tool_arguments(tool: str, tokens: Tokens, rng: random.Random) -> str:
    doc = {
        "tool": tool,
        "order_id": f"ORD-{rng.randint(100000, 999999)}",
        "customer_id": f"cus_{tokens.hex(16)}",
        "include_history": rng.random() < 0.5,
        "limit": rng.choice((5, 10, 20, 50)),
    }
    return _padded_json(doc, 200, rng)


def _tool_result(tokens: Tokens, rng: random.Random) -> str:
    doc = {
        "status": rng.choice(("shipped", "pending", "delivered", "cancelled")),
        "request_ref": tokens.hex(16),
        "items": [
            {"sku": f"SKU-{rng.randint(1000, 9999)}", "qty": rng.randint(1, 4), "price": 19.99}
            for _ in range(rng.randint(1, 3))
        ],
        "carrier": rng.choice(("ups", "dhl", "fedex", "postnl")),
        "eta_days": rng.randint(1, 9),
    }
    return _padded_json(doc, 500, rng)


def agent_turn_spans(
    tokens: Tokens, rng: random.Random, n_spans: int, start_ns: int
) -> list[trace_pb2.Span]:
    """One agent turn: an invoke_agent root, then chat / execute_tool children."""
    trace_id = tokens.trace_id()
    conversation = f"conv_{tokens.hex(24)}"
    agent = rng.choice(AGENTS)
    model = rng.choice(MODELS)
    tenant = f"tenant-{rng.randint(1, 40)}"
    root_id = tokens.span_id()
    children: list[trace_pb2.Span] = []
    t = start_ns + rng.randint(1, 5) * 1_000_000
    want_chat = True
    while len(children) < n_spans - 1:
        span_id = tokens.span_id()
        if want_chat:
            duration = rng.randint(300, 2500) * 1_000_000
            attrs: dict[str, Any] = {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": model,
                "gen_ai.response.model": model + "-2025-04-14",
                "gen_ai.response.id": f"chatcmpl-{tokens.hex(24)}",
                "gen_ai.request.temperature": 0.2,
                "gen_ai.request.max_tokens": 2048,
                "gen_ai.usage.input_tokens": rng.randint(200, 9000),
                "gen_ai.usage.output_tokens": rng.randint(5, 800),
                "gen_ai.response.finish_reasons": ["tool_calls"],
                "gen_ai.conversation.id": conversation,
                "gen_ai.agent.name": agent,
                "gen_ai.output.type": "text",
                "server.address": "api.openai.com",
                "server.port": 443,
            }
            span = trace_pb2.Span(
                trace_id=trace_id,
                span_id=span_id,
                parent_span_id=root_id,
                name=f"chat {model}",
                kind=trace_pb2.Span.SPAN_KIND_CLIENT,
                start_time_unix_nano=t,
                end_time_unix_nano=t + duration,
                attributes=key_values(attrs),
            )
            want_chat = rng.random() < 0.4  # often two tool calls after one model answer
        else:
            tool, description = rng.choice(TOOLS)
            duration = rng.randint(2, 400) * 1_000_000
            failed = rng.random() < 0.04
            attrs = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": f"call_{tokens.hex(24)}",
                "gen_ai.tool.type": "function",
                "gen_ai.tool.description": description,
                "gen_ai.tool.call.arguments": _tool_arguments(tool, tokens, rng),
                "gen_ai.tool.call.result": _tool_result(tokens, rng),
                "gen_ai.conversation.id": conversation,
                "gen_ai.agent.name": agent,
                "gen_ai.provider.name": "openai",
                "app.tenant": tenant,
                "app.tool.retries": 0,
                "app.tool.cache_hit": rng.random() < 0.3,
                "code.function.name": f"tools.{tool}",
            }
            if failed:
                attrs["error.type"] = "TimeoutError"
            else:
                attrs["app.tool.latency_budget_ms"] = 500
            span = trace_pb2.Span(
                trace_id=trace_id,
                span_id=span_id,
                parent_span_id=root_id,
                name=f"execute_tool {tool}",
                kind=trace_pb2.Span.SPAN_KIND_INTERNAL,
                start_time_unix_nano=t,
                end_time_unix_nano=t + duration,
                attributes=key_values(attrs),
            )
            if failed:
                span.status.code = trace_pb2.Status.STATUS_CODE_ERROR
                span.status.message = "tool timed out"
                span.events.append(
                    trace_pb2.Span.Event(
                        name="exception",
                        time_unix_nano=t + duration,
                        attributes=key_values(
                            {
                                "exception.type": "TimeoutError",
                                "exception.message": f"{tool} did not answer within 500 ms",
                            }
                        ),
                    )
                )
            want_chat = rng.random() < 0.6
        children.append(span)
        t += duration + rng.randint(1, 20) * 1_000_000
    user_message = json.dumps(
        [
            {
                "role": "user",
                "parts": [
                    {
                        "type": "text",
                        "content": "Hi, " + " ".join(rng.choice(WORDS) for _ in range(18)),
                    }
                ],
            }
        ]
    )
    root_attrs: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "gen_ai.agent.id": f"agent_{agent}",
        "gen_ai.agent.description": f"The {agent} agent",
        "gen_ai.conversation.id": conversation,
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": model,
        "gen_ai.usage.input_tokens": rng.randint(1000, 40000),
        "gen_ai.usage.output_tokens": rng.randint(50, 3000),
        "gen_ai.input.messages": user_message,
        "enduser.id": f"user-{rng.randint(1, 100000)}",
        "session.id": f"sess_{tokens.hex(16)}",
        "app.tenant": tenant,
        "app.channel": rng.choice(("web", "email", "voice", "slack")),
        "app.version": "2.14.1",
    }
    root = trace_pb2.Span(
        trace_id=trace_id,
        span_id=root_id,
        name=f"invoke_agent {agent}",
        kind=trace_pb2.Span.SPAN_KIND_SERVER,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=t + 1_000_000,
        attributes=key_values(root_attrs),
    )
    return [root, *children]


@dataclass
class Template:
    """A serialized request plus where each placeholder id or token sits in it."""

    data: bytes
    spans: int
    slots: list[tuple[str, int, list[int]]]  # (kind, size, offsets)
    hex_bytes: int  # total hex characters over all HEX slots

    @classmethod
    def build(cls, seed: int, batch_size: int) -> Template:
        rng = random.Random(seed)
        tokens = Tokens(rng)
        start_ns = time.time_ns() - 3600 * 10**9
        spans: list[trace_pb2.Span] = []
        while len(spans) < batch_size:
            n = min(batch_size - len(spans), rng.randint(6, 20))
            spans.extend(agent_turn_spans(tokens, rng, n, start_ns + len(spans) * 50_000_000))
        request = trace_service_pb2.ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.extend(
            key_values(
                {
                    "service.name": "customer-service-agent",
                    "service.version": "2.14.1",
                    "service.instance.id": f"pod-{seed}",
                    "deployment.environment.name": "production",
                    "host.name": f"agents-{seed % 7}.internal",
                    "telemetry.sdk.language": "python",
                    "telemetry.sdk.name": "opentelemetry",
                    "telemetry.sdk.version": "1.45.0",
                }
            )
        )
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.name = "opentelemetry.instrumentation.openai_agents"
        scope_spans.scope.version = "0.1.0"
        scope_spans.spans.extend(spans)
        data = request.SerializeToString()
        slots: list[tuple[str, int, list[int]]] = []
        hex_bytes = 0
        for value, kind in tokens.kinds.items():
            offsets = []
            at = data.find(value)
            while at >= 0:
                offsets.append(at)
                at = data.find(value, at + len(value))
            if not offsets:
                raise RuntimeError(f"template {seed}: placeholder {value!r} not found")
            slots.append((kind, len(value), offsets))
            if kind == Tokens.HEX:
                hex_bytes += len(value)
        return cls(data, len(spans), slots, hex_bytes)

    def render(self, ids: IdSource) -> bytes:
        """A copy with fresh trace ids, span ids and tokens (same length, so same framing)."""
        buf = bytearray(self.data)
        hex_pool = os.urandom(self.hex_bytes // 2).hex().encode()
        pos = 0
        for kind, size, offsets in self.slots:
            if kind == Tokens.TRACE:
                value = ids.trace()
            elif kind == Tokens.SPAN:
                value = ids.span()
            else:
                value = hex_pool[pos : pos + size]
                pos += size
            for at in offsets:
                buf[at : at + size] = value
        return bytes(buf)


class IdSource:
    """Trace and span ids from counters: unique over the whole run, random-looking."""

    def __init__(self) -> None:
        self.prefix = random.getrandbits(64) | 1
        self.traces = 0
        self.spans = 0

    def trace(self) -> bytes:
        self.traces += 1
        return struct.pack(">QQ", self.prefix, (self.traces * _GOLDEN) & _MASK64)

    def span(self) -> bytes:
        self.spans += 1
        return struct.pack(">Q", (self.spans * _GOLDEN) & _MASK64)


def make_templates(batch_size: int, count: int = 6) -> list[Template]:
    return [Template.build(seed, batch_size) for seed in range(1, count + 1)]


def make_pool(templates: Sequence[Template], n_bodies: int, ids: IdSource) -> list[bytes]:
    pool = [templates[i % len(templates)].render(ids) for i in range(n_bodies)]
    _check_body(pool[0], templates[0])
    return pool


def _check_body(body: bytes, template: Template) -> None:
    """The patched body parses, has the span count, and shares no id with its template."""
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
    spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    if len(spans) != template.spans:
        raise RuntimeError(f"patched body has {len(spans)} spans, expected {template.spans}")
    original = trace_service_pb2.ExportTraceServiceRequest.FromString(template.data)
    old_ids = {
        s.span_id for rs in original.resource_spans for ss in rs.scope_spans for s in ss.spans
    }
    new_ids = {s.span_id for s in spans}
    if len(new_ids) != len(spans) or new_ids & old_ids:
        raise RuntimeError("patched body: span ids are not fresh and distinct")
    parents = {s.parent_span_id for s in spans if s.parent_span_id}
    if not parents <= new_ids:
        raise RuntimeError("patched body: a parent span id points outside the body")


def pool_bytes(pool: Sequence[bytes | None]) -> int:
    return sum(len(b) for b in pool if b is not None)


# --- the collector process --------------------------------------------------------------------


class CollectorProcess(ServeProcess):
    """`spanscore serve` in a child process on free loopback ports, logging JSON to a file;
    `sources`: another revision's sources, first on PYTHONPATH ("": today's)."""

    noun = "collector"
    store = "lake"

    def __init__(
        self, lake: Path, log_path: Path, extra: Sequence[str] = (), sources: str = ""
    ) -> None:
        super().__init__(lake, log_path, *extra)
        self.lake = lake
        self.sources = sources
        self.env = _python_env(sources)

    def start(self, timeout: float = 60.0) -> CollectorProcess:
        super().start(timeout)
        return self

    def counts(self) -> tuple[int, int]:
        """(spans, distinct (trace_id, span_id)) in its lake, once stopped."""
        return lake_counts(self.lake, self.sources)

    def remove(self) -> None:
        shutil.rmtree(self.lake, ignore_errors=True)

    def peak_rss(self) -> int | None:
        """The kernel's high-water marks of resident memory, summed over the collector and its
        decode workers (an upper bound of the peak of the whole), while it runs."""
        pids = [self.pid]
        try:
            import psutil

            pids += [child.pid for child in psutil.Process(self.pid).children(recursive=True)]
        except Exception:
            pass
        total = 0
        for pid in pids:
            peak = vm_hwm(pid)
            if peak is None and pid == self.pid:
                return None
            total += peak or 0
        return total


def vm_hwm(pid: int) -> int | None:
    """The kernel's high-water mark of `pid`'s resident memory, in bytes (None: unknown)."""
    return proc_status_bytes(pid, "VmHWM")


def proc_status_bytes(pid: int, field: str) -> int | None:
    """A memory field of `/proc/<pid>/status` (VmHWM, VmRSS...), in bytes (None: unknown)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


MINIMAL = "minimal gRPC"
_MINIMAL_SERVER = Path(__file__).with_name("_minimal_otlp.py")


class MinimalServer:
    """`_minimal_otlp.py` in a child process on a free loopback port: the baseline server."""

    noun = "minimal server"
    store = "DuckDB file"

    def __init__(self, db: Path, log_path: Path) -> None:
        self.db = db
        self.log_path = log_path
        self.grpc_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> MinimalServer:
        command = [sys.executable, str(_MINIMAL_SERVER), "--port", str(self.grpc_port)]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [*command, "--db", str(self.db)], stdout=subprocess.PIPE, stderr=log
            )
        assert self.proc.stdout is not None
        ready = threading.Thread(target=self.proc.stdout.readline, daemon=True)
        ready.start()  # "ready", or nothing if it died
        ready.join(timeout)
        if ready.is_alive() or self.proc.poll() is not None:
            self.kill()
            raise RuntimeError(f"the minimal server did not start: {self.log_tail()}")
        return self

    def status(self) -> dict[str, Any]:
        return {}  # it counts nothing

    def peak_rss(self) -> int | None:
        return vm_hwm(self.pid)

    def stop(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log_tail(self, limit: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def counts(self) -> tuple[int, int]:
        return span_counts(duckdb.connect(str(self.db), read_only=True))

    def remove(self) -> None:
        for path in (self.db, self.db.with_name(self.db.name + ".wal")):
            path.unlink(missing_ok=True)


Server = CollectorProcess | MinimalServer


class RssSampler:
    """Samples a process's RSS in a thread (the fallback when VmHWM is not available)."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _rss(self) -> int:
        try:
            import psutil

            return int(psutil.Process(self.pid).memory_info().rss)
        except Exception:
            return proc_status_bytes(self.pid, "VmRSS") or 0

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self._rss())

    def start(self) -> RssSampler:
        self.peak = self._rss()
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(2)
        self.peak = max(self.peak, self._rss())
        return self.peak


# --- the clients --------------------------------------------------------------------------------


class BodyFeed:
    """Hands each pre-serialized body to exactly one client, then forgets it (frees memory)."""

    def __init__(self, bodies: list[bytes]) -> None:
        self._bodies: list[bytes | None] = list(bodies)
        self._next = 0
        self._lock = threading.Lock()
        self.exhausted = False

    def take(self) -> bytes | None:
        with self._lock:
            if self._next >= len(self._bodies):
                self.exhausted = True
                return None
            body = self._bodies[self._next]
            self._bodies[self._next] = None
            self._next += 1
            return body


@dataclass
class ClientResult:
    latencies: list[float] = field(default_factory=list)
    spans: int = 0
    rejected_spans: int = 0
    refused: int = 0
    errors: int = 0
    abandoned: int = 0
    error_samples: list[str] = field(default_factory=list)
    finished: float = 0.0

    def error(self, text: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 3:
            self.error_samples.append(text)


def _backoff(attempt: int) -> float:
    """Short exponential backoff with jitter: 50 ms, 100 ms, ... up to 1 s."""
    return float(min(1.0, 0.05 * 2**attempt) * (0.5 + random.random()))


# An export that fails with anything other than a refusal is retried until this long after the
# phase's end (it may have been committed; the collector's dedup makes the retry harmless).
RETRY_GRACE_S = 30.0


class Exporter(abc.ABC):
    """One client: sends a body, returns ('ok', rejected) / ('refused', why) / ('error', why)."""

    @abc.abstractmethod
    def send(self, body: bytes) -> tuple[str, int | str]: ...

    @abc.abstractmethod
    def close(self) -> None: ...


class GrpcExporter(Exporter):
    def __init__(self, port: int) -> None:
        self.channel = grpc.insecure_channel(
            f"127.0.0.1:{port}",
            options=[
                ("grpc.max_send_message_length", 64 * MIB),
                ("grpc.max_receive_message_length", 64 * MIB),
                ("grpc.use_local_subchannel_pool", 1),  # one connection per client, like exporters
            ],
        )
        grpc.channel_ready_future(self.channel).result(timeout=30)
        self.export = self.channel.unary_unary(
            EXPORT_METHOD,
            request_serializer=None,  # the body is already serialized
            response_deserializer=trace_service_pb2.ExportTraceServiceResponse.FromString,
        )

    def send(self, body: bytes) -> tuple[str, int | str]:
        try:
            response = self.export(body, timeout=60)
        except grpc.RpcError as exc:
            code = exc.code()
            why = f"{code.name}: {exc.details()}"
            if code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE):
                return "refused", why
            return "error", why
        return "ok", int(response.partial_success.rejected_spans)

    def close(self) -> None:
        self.channel.close()


class HttpExporter(Exporter):
    HEADERS: ClassVar[dict[str, str]] = {"Content-Type": "application/x-protobuf"}

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn: http.client.HTTPConnection | None = None
        self._connection()  # connected before timing, like the gRPC channels

    def _connection(self) -> http.client.HTTPConnection:
        if self.conn is None:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            conn.connect()
            assert conn.sock is not None
            # urllib3/requests (the OTel HTTP exporter) set TCP_NODELAY too.
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.conn = conn
        return self.conn

    def send(self, body: bytes) -> tuple[str, int | str]:
        try:
            conn = self._connection()
            conn.request("POST", "/v1/traces", body=body, headers=self.HEADERS)
            response = conn.getresponse()
            data = response.read()
            if response.will_close:
                self.close()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            return "error", f"{type(exc).__name__}: {exc}"
        if response.status == 200:
            decoded = trace_service_pb2.ExportTraceServiceResponse.FromString(data)
            return "ok", int(decoded.partial_success.rejected_spans)
        why = f"HTTP {response.status}: {data[:200]!r}"
        return ("refused" if response.status in (429, 503) else "error"), why

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def client_loop(
    exporter: Exporter,
    feed: BodyFeed,
    batch_size: int,
    deadline: float,
    stop: threading.Event,
    result: ClientResult,
) -> None:
    try:
        while not stop.is_set() and time.perf_counter() < deadline:
            body = feed.take()
            if body is None:
                break
            attempt = 0
            while not stop.is_set():
                started = time.perf_counter()
                outcome, detail = exporter.send(body)
                if outcome == "ok":
                    assert isinstance(detail, int)
                    result.latencies.append(time.perf_counter() - started)
                    result.spans += batch_size - detail
                    result.rejected_spans += detail
                    break
                now = time.perf_counter()
                if outcome == "refused":
                    result.refused += 1
                    if now >= deadline:  # refused means not stored: safe to give up
                        result.abandoned += 1
                        break
                else:
                    result.error(str(detail))
                    if now >= deadline + RETRY_GRACE_S:
                        result.abandoned += 1
                        break
                time.sleep(_backoff(attempt))
                attempt += 1
    finally:
        exporter.close()
        result.finished = time.perf_counter()


# --- phases -------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def lake_counts(lake_dir: Path, sources: str = "") -> tuple[int, int]:
    if sources:  # a lake another revision wrote: counted by that revision's code
        rows, distinct = _run_python(_LAKE_COUNTER, str(lake_dir), sources).split()
        return int(rows), int(distinct)
    return span_counts(connect(lake_dir))


def span_counts(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    """(spans, distinct (trace_id, span_id)) in `spans`; closes `con`."""
    try:
        row = con.execute(
            "SELECT count(*), count(DISTINCT (trace_id, span_id)) FROM spans"
        ).fetchone()
    finally:
        con.close()
    assert row is not None
    return int(row[0]), int(row[1])


_LAKE_COUNTER = """
import sys
from spanscore.lake import connect
con = connect(sys.argv[1])
print(*con.execute("SELECT count(*), count(DISTINCT (trace_id, span_id)) FROM spans").fetchone())
"""


def _run_python(script: str, argument: str, sources: str, *more: str) -> str:
    """What `script` prints, run with `argument` in a fresh interpreter on `sources`."""
    done = subprocess.run(
        [sys.executable, "-c", script, argument, *more],
        env=_python_env(sources),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def _python_env(sources: str) -> dict[str, str]:
    """This environment, with `sources` (another revision's) as PYTHONPATH, else none."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if sources:
        env["PYTHONPATH"] = sources
    return env


@dataclass
class PhaseResult:
    name: str
    seconds: float = 0.0
    spans: int = 0
    exports: int = 0
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    refused: int = 0
    errors: int = 0
    abandoned: int = 0
    rejected_spans: int = 0
    lake_rows: int = -1
    lake_distinct: int = -1
    peak_rss: int | None = None
    exhausted: bool = False

    @property
    def rate(self) -> float:
        return self.spans / self.seconds if self.seconds > 0 else 0.0

    @property
    def count_ok(self) -> bool:
        return self.lake_rows == self.spans == self.lake_distinct


ExporterFactory = Callable[[int], Exporter]


def run_network_phase(
    name: str,
    make_exporter: ExporterFactory,
    port_of: Callable[[CollectorProcess], int],
    bodies: list[bytes],
    args: argparse.Namespace,
    workdir: Path,
    collectors: list[Server],
    sources: str = "",
    extra_args: Sequence[str] = (),
) -> PhaseResult:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower())
    lake_dir = workdir / f"lake-{slug}-{len(collectors)}"
    collector = CollectorProcess(lake_dir, workdir / f"collector-{slug}.log", sources=sources)
    collector.args.extend(args.collector_arg or [])
    collector.args.extend(extra_args)
    collectors.append(collector)
    collector.start()
    return drive(name, collector, port_of(collector), make_exporter, bodies, args)


def run_minimal_phase(
    bodies: list[bytes], args: argparse.Namespace, workdir: Path, servers: list[Server]
) -> PhaseResult:
    """The same clients against `_minimal_otlp.py` (OTLP/gRPC) on a fresh DuckDB file."""
    server = MinimalServer(workdir / f"minimal-{len(servers)}.duckdb", workdir / "minimal.log")
    servers.append(server)
    server.start()
    return drive(MINIMAL, server, server.grpc_port, GrpcExporter, bodies, args)


def drive(
    name: str,
    collector: Server,
    port: int,
    make_exporter: ExporterFactory,
    bodies: list[bytes],
    args: argparse.Namespace,
) -> PhaseResult:
    """`args.clients` clients export `bodies` to the started `collector` for `args.seconds`;
    then the collector is stopped and its spans counted."""
    sampler = RssSampler(collector.pid).start()
    print(
        f"  {collector.noun} pid {collector.pid} on a fresh {collector.store}, RSS at start "
        f"{sampler.peak / MIB:.0f} MiB; {args.clients} clients for {args.seconds:g}s",
        flush=True,
    )
    exporters = [make_exporter(port) for _ in range(args.clients)]  # connected before timing
    feed = BodyFeed(bodies)
    bodies.clear()  # the feed holds the only references; memory frees as bodies are sent
    stop = threading.Event()
    results = [ClientResult() for _ in range(args.clients)]
    started = time.perf_counter()
    deadline = started + args.seconds
    threads = [
        threading.Thread(
            target=client_loop,
            args=(exporters[i], feed, args.batch_size, deadline, stop, results[i]),
            name=f"{name}-client-{i}",
            daemon=True,
        )
        for i in range(args.clients)
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)
    finally:
        stop.set()
    phase = PhaseResult(name)
    phase.seconds = max(r.finished for r in results) - started
    latencies = [x for r in results for x in r.latencies]
    phase.exports = len(latencies)
    phase.spans = sum(r.spans for r in results)
    phase.p50_ms = percentile(latencies, 50) * 1000
    phase.p99_ms = percentile(latencies, 99) * 1000
    phase.refused = sum(r.refused for r in results)
    phase.errors = sum(r.errors for r in results)
    phase.abandoned = sum(r.abandoned for r in results)
    phase.rejected_spans = sum(r.rejected_spans for r in results)
    phase.exhausted = feed.exhausted
    status = collector.status()
    phase.peak_rss = collector.peak_rss()
    sampled = sampler.stop()
    if phase.peak_rss is None:
        phase.peak_rss = sampled
    code = collector.stop()
    if code != 0:
        print(f"  ! {collector.noun} exit status {code}; log tail:\n{collector.log_tail()}")
    phase.lake_rows, phase.lake_distinct = collector.counts()
    _print_phase(phase, status, sampled)
    for sample in [x for r in results for x in r.error_samples][:5]:
        print(f"  ! error sample: {sample}")
    collector.remove()
    return phase


def _print_phase(phase: PhaseResult, status: dict[str, Any], sampled_rss: int) -> None:
    counters = status.get("counters", {})
    commits = int(counters.get("commits", 0))
    stored = int(counters.get("spans_stored", 0))
    print(
        f"  {phase.exports} exports acknowledged in {phase.seconds:.2f}s: "
        f"{phase.spans:,} spans, {phase.rate:,.0f} spans/s; "
        f"latency p50 {phase.p50_ms:.0f} ms, p99 {phase.p99_ms:.0f} ms"
    )
    print(
        f"  refused {phase.refused} (retried), other errors {phase.errors}, "
        f"abandoned at the end {phase.abandoned}, rejected spans {phase.rejected_spans}"
        + ("; the body pool ran out before the time was up" if phase.exhausted else "")
    )
    if commits:
        print(
            f"  collector: {commits} commits, {stored / commits:,.0f} spans per commit, "
            f"last commit {status.get('gauges', {}).get('last_commit_s', '?')}s; "
            f"refusals counted by the collector: "
            + (", ".join(f"{k}={v}" for k, v in counters.items() if "refused" in k) or "none")
        )
    verdict = "OK, equals" if phase.count_ok else "MISMATCH with"
    print(
        f"  lake: {phase.lake_rows:,} spans, {phase.lake_distinct:,} distinct (trace_id, span_id)"
        f" - {verdict} the {phase.spans:,} acknowledged"
        + ("" if phase.lake_rows == phase.lake_distinct else " - DUPLICATES")
    )
    peak = phase.peak_rss or 0
    print(
        f"  collector peak RSS {peak / MIB:,.0f} MiB (VmHWM; sampled max "
        f"{sampled_rss / MIB:,.0f} MiB)",
        flush=True,
    )


@dataclass
class Ceiling:
    parse_rate: float = 0.0
    flatten_rate: float = 0.0
    end_to_end_rate: float = 0.0
    spans: int = 0
    commits: int = 0
    lake_rows: int = 0
    records: int = 0  # log records stored beside the spans (`records_first`)
    records_resolved: int = 0  # of them, stored with their span's conversation


# How many exports a thread's log records go ahead of their spans (`records_first`): with
# two threads, their spans come several commits later.
RECORDS_AHEAD = 4


def log_records_of(spans: pa.RecordBatch, *, carrying: bool = False) -> pa.Table:
    """Two GenAI log records per model call of the spans (its user message, its answer), as
    producers that send messages as events emit them, carrying no conversation id (or, with
    `carrying`, their span's, as though the producer had put it on them)."""
    chats = pa.Table.from_batches([spans]).filter(pc.equal(spans.column("operation"), "chat"))
    columns: dict[str, list[Any]] = {}
    for n, (event, text) in enumerate(
        (("gen_ai.user.message", "user_message"), ("gen_ai.choice", "response_text"))
    ):
        part = {
            "time": chats.column("start_time"),
            "time_unix_nano": pc.add(chats.column("start_time_unix_nano"), n),
            "trace_id": chats.column("trace_id"),
            "span_id": chats.column("span_id"),
            "event_name": pa.array([event] * chats.num_rows, pa.string()),
            "conversation_id": chats.column("conversation_id")
            if carrying
            else pa.nulls(chats.num_rows, pa.string()),
        }
        for said in ("user_message", "response_text"):
            # the model call's message, else a stand-in: a record that says something
            part[said] = (
                pc.fill_null(chats.column(said), "(text)")
                if said == text
                else pa.nulls(chats.num_rows, pa.string())
            )
        for name, values in part.items():
            columns.setdefault(name, []).append(values)
    return _as_logs(pa.table({name: pa.chunked_array(parts) for name, parts in columns.items()}))


def _as_logs(table: pa.Table) -> pa.Table:
    """`table`'s columns in the collector's log-record schema, the others null."""
    return pa.table(
        {
            f.name: table.column(f.name).cast(f.type)
            if f.name in table.column_names
            else pa.nulls(table.num_rows, f.type)
            for f in LOGS_SCHEMA
        },
        schema=LOGS_SCHEMA,
    )


def run_ceiling(
    bodies: list[bytes],
    batch_size: int,
    workdir: Path,
    threads: int = 4,
    conversation_traces: int | None = None,
    records_first: bool = False,
    records_carrying: bool = False,
) -> Ceiling:
    """The collector's own pipeline with no network: its decode pool (one worker process per
    CPU, as `spanscore serve` runs by default) and its group-commit writer. With
    `conversation_traces=0` the writer resolves no conversations at commit (the baseline for
    what resolving costs). With `records_first`, each export's model calls also send two
    GenAI log records each, exported before the spans (events are emitted while their span
    runs): the writer stores each with its span's conversation, resolving those it stored
    before their span (`schema.RESOLVE_RECORDS`); with `records_carrying` too, the records
    carry their span's conversation, and none is resolved (the baseline for what resolving
    records costs)."""
    result = Ceiling(spans=len(bodies) * batch_size)
    parse = trace_service_pb2.ExportTraceServiceRequest.FromString
    started = time.perf_counter()
    for body in bodies:
        parse(body)
    result.parse_rate = result.spans / (time.perf_counter() - started)

    # Flattening as a decode worker does it: the body decoded, then flattened (parsing is the
    # small part: see parse alone).
    flattener = Flattener()
    sample = bodies[: max(1, min(len(bodies), 120))]
    started = time.perf_counter()
    for body in sample:
        flatten_request(flattener, "spans", body, False)
    result.flatten_rate = len(sample) * batch_size / (time.perf_counter() - started)

    lake_dir = workdir / "lake-ceiling"
    con = connect(lake_dir, create=True)
    stats = Stats()
    defaults = CollectorConfig(lake=str(lake_dir))
    writer = GroupCommitWriter(
        con.cursor(),
        stats,
        batch_rows=defaults.batch_rows,
        batch_delay_s=defaults.batch_delay_ms / 1000,
        queue_rows=defaults.queue_rows,
        conversation_traces=CONVERSATION_TRACES
        if conversation_traces is None
        else conversation_traces,
    )
    writer.start()
    pool = FlattenPool(Limits(), None, workers=defaults.workers)
    feed = BodyFeed(bodies)
    errors: list[BaseException] = []

    def work() -> None:
        outstanding: list[Pending] = []
        held: list[Pending] = []  # spans whose records went ahead (`records_first`)

        def submit(pending: Pending) -> None:
            while True:
                try:
                    writer.submit(pending)
                    break
                except QueueFull:  # wait for our oldest export's commit, like a backlog
                    if outstanding:
                        outstanding.pop(0).done.wait()
                    else:
                        time.sleep(0.01)
            outstanding.append(pending)

        try:
            while (body := feed.take()) is not None:
                flat = pool.run("spans", body, as_json=False)
                if not records_first:
                    submit(Pending(spans=flat.batch))
                    continue
                # The records now, their spans RECORDS_AHEAD exports later (other commits).
                records = log_records_of(flat.batch, carrying=records_carrying)
                records = records.combine_chunks().to_batches()
                submit(Pending(logs=records[0] if records else None))
                held.append(Pending(spans=flat.batch))
                if len(held) > RECORDS_AHEAD:
                    submit(held.pop(0))
            for pending in held:
                submit(pending)
            for p in outstanding:
                p.done.wait()
                if p.error is not None:
                    errors.append(p.error)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    writer.shutdown()
    pool.close()
    if errors:
        raise RuntimeError(f"in-process append failed: {errors[0]!r}")
    result.end_to_end_rate = result.spans / elapsed
    result.commits = stats.get("commits")
    row = con.execute("SELECT count(*) FROM spans").fetchone()
    result.lake_rows = int(row[0]) if row else -1
    row = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE l.conversation_id = s.conversation_id) "
        "FROM logs l LEFT JOIN spans s USING (trace_id, span_id)"
    ).fetchone()
    result.records, result.records_resolved = (int(row[0]), int(row[1])) if row else (-1, -1)
    con.close()
    shutil.rmtree(lake_dir, ignore_errors=True)
    return result


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Benchmark the spanscore collector: OTLP/gRPC and OTLP/HTTP ingest into a "
        "fresh lake, plus the in-process parse/flatten/append ceiling.",
    )
    parser.add_argument("--seconds", type=float, default=15.0, help="duration of each phase")
    parser.add_argument("--clients", type=int, default=8, help="concurrent exporting clients")
    parser.add_argument("--batch-size", type=int, default=512, help="spans per export")
    parser.add_argument(
        "--ceiling-spans",
        type=int,
        default=200_000,
        help="spans pushed through the in-process ceiling (default 200,000)",
    )
    parser.add_argument(
        "--max-bodies",
        type=int,
        default=2500,
        help="most pre-serialized requests per network phase (bounds this process's memory)",
    )
    parser.add_argument(
        "--collector-arg",
        action="append",
        metavar="ARG",
        help="extra `spanscore serve` argument, repeatable "
        "(e.g. --collector-arg=--batch-delay-ms=20)",
    )
    parser.add_argument("--quick", action="store_true", help="a ~3 s per phase smoke run")
    parser.add_argument(
        "--baseline-flatten",
        metavar="REV",
        help="also time the flattener of this git revision on the same bodies",
    )
    parser.add_argument(
        "--baseline-collector",
        metavar="REV",
        help="also run each protocol's phase against this git revision's collector, "
        "alternating with today's (--baseline-rounds rounds each)",
    )
    parser.add_argument("--baseline-rounds", type=int, default=2, metavar="N")
    parser.add_argument(
        "--compare-collector-arg",
        action="append",
        metavar="ARG",
        help="also run each protocol's phase with this extra `spanscore serve` argument "
        "(repeatable), alternating with the run without it (--baseline-rounds rounds each), "
        "and print both rates (e.g. --compare-collector-arg=--retention-days=30)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = min(args.seconds, 3.0)
        args.ceiling_spans = min(args.ceiling_spans, 60_000)
    if args.clients < 1 or args.batch_size < 1 or args.seconds <= 0:
        parser.error("--clients, --batch-size and --seconds must be positive")
    return args


def _fmt_rate(value: float) -> str:
    return f"{value:,.0f}"


def print_summary(phases: list[PhaseResult], ceiling: Ceiling, args: argparse.Namespace) -> None:
    rows: list[tuple[str, Callable[[PhaseResult], str]]] = [
        ("accepted spans/s", lambda p: _fmt_rate(p.rate)),
        ("export latency p50 ms", lambda p: f"{p.p50_ms:,.0f}"),
        ("export latency p99 ms", lambda p: f"{p.p99_ms:,.0f}"),
        ("refused exports (retried)", lambda p: str(p.refused)),
        ("other export errors", lambda p: str(p.errors)),
        (
            "lake count = acknowledged",
            lambda p: ("yes" if p.count_ok else "NO") + f" ({p.lake_rows:,})",
        ),
        ("collector peak RSS MiB", lambda p: f"{(p.peak_rss or 0) / MIB:,.0f}"),
        (
            "end to end / ceiling",
            lambda p: (
                f"{100 * p.rate / ceiling.end_to_end_rate:.0f}%" if ceiling.end_to_end_rate else "-"
            ),
        ),
    ]
    width = 28
    print()
    print(
        f"Summary ({args.clients} clients, {args.batch_size} spans per export, "
        f"{args.seconds:g}s per protocol, {os.cpu_count()} CPUs)"
    )
    print(f"{'':<{width}}" + "".join(f"{p.name:>16}" for p in phases))
    for label, cell in rows:
        print(f"{label:<{width}}" + "".join(f"{cell(p):>16}" for p in phases))
    print("in-process, spans/s:")
    for label, value in (
        ("  parse alone", ceiling.parse_rate),
        ("  flatten alone", ceiling.flatten_rate),
        ("  parse+flatten+append", ceiling.end_to_end_rate),
    ):
        print(f"{label:<{width}}{_fmt_rate(value):>16}")
    print()
    print("Targets (for context; not asserted):")
    for p in phases:
        rss = p.peak_rss or 0
        ratio = p.rate / ceiling.end_to_end_rate if ceiling.end_to_end_rate else 0.0
        print(
            f"  {p.name}: >= {TARGET_SPANS_PER_S:,} spans/s: "
            f"{'met' if p.rate >= TARGET_SPANS_PER_S else 'NOT met'} ({_fmt_rate(p.rate)}); "
            f">= {TARGET_RATIO:.0%} of ceiling: "
            f"{'met' if ratio >= TARGET_RATIO else 'NOT met'} ({ratio:.0%}); "
            f"memory < 1 GiB: {'met' if rss < TARGET_RSS_BYTES else 'NOT met'} "
            f"({rss / MIB:,.0f} MiB)"
        )


TARGET_OVER_MINIMAL = 3.0


def print_minimal(compared: dict[tuple[str, str], list[PhaseResult]]) -> None:
    """Today's collector over gRPC against the minimal server, best of their rounds."""
    today = [p.rate for p in compared.get(("gRPC", ""), [])]
    minimal = [p.rate for p in compared.get((MINIMAL, ""), [])]
    if not today or not minimal or not max(minimal):
        return
    ratio = max(today) / max(minimal)
    print(
        f"\nThe collector against the minimal server (OTLP/gRPC, same clients, best of the "
        f"rounds): {_fmt_rate(max(today))} against {_fmt_rate(max(minimal))} spans/s "
        f"({', '.join(_fmt_rate(r) for r in minimal)}) = {ratio:.2f}x; target >= "
        f"{TARGET_OVER_MINIMAL:g}x: {'met' if ratio >= TARGET_OVER_MINIMAL else 'NOT met'}"
    )


def print_baseline(compared: dict[tuple[str, str], list[PhaseResult]], rev: str) -> None:
    """Each protocol's accepted spans/s with today's collector and with `rev`'s (best of the
    alternating rounds, and every round), and their ratio."""
    print(f"\nToday's collector against {rev!r} (same run, alternating; best of the rounds):")
    for name in ("gRPC", "HTTP"):
        today = [p.rate for p in compared.get((name, ""), [])]
        then = [p.rate for p in compared.get((name, rev), [])]
        if not today or not then:
            continue
        print(
            f"  {name}: today {_fmt_rate(max(today))} spans/s "
            f"({', '.join(_fmt_rate(r) for r in today)}), {rev} {_fmt_rate(max(then))} "
            f"({', '.join(_fmt_rate(r) for r in then)}); today / {rev} = "
            f"{max(today) / max(then):.2f}"
        )


def _raise_interrupt(signum: int, frame: types.FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# Times `Flattener().spans` on pickled bodies (argv[1]); the flattener is whichever
# `spanscore.collector` PYTHONPATH puts first. Prints the best of 5 passes, in spans/s.
_FLATTEN_TIMER = """
import pickle, sys, time
from spanscore.collector.flatten import Flattener
from spanscore.collector.pool import flatten_request
with open(sys.argv[1], "rb") as f:
    bodies, batch_size = pickle.load(f)
flattener, best = Flattener(), 0.0
for _ in range(5):
    started = time.perf_counter()
    for body in bodies:
        flatten_request(flattener, "spans", body, False)
    best = max(best, len(bodies) * batch_size / (time.perf_counter() - started))
print(best)
"""


# Each package's sources (`<dir>/src`), for running another revision beside today's.
PACKAGE_SOURCES = ("src", "collector/src", "lake/src", "evaluation/src", "instrumentation/src")


def revision_sources(rev: str, workdir: Path, dirs: Sequence[str] = PACKAGE_SOURCES) -> str:
    """Revision `rev`'s `dirs`, extracted under `workdir`, as a PYTHONPATH that puts them
    before today's (installed in development mode)."""
    source = workdir / f"sources-{rev}-{len(dirs)}"
    if not source.exists():
        source.mkdir()
        archive = subprocess.run(["git", "archive", rev, *dirs], capture_output=True, check=False)
        if archive.returncode != 0:
            raise RuntimeError(f"sources of {rev}: {archive.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    return os.pathsep.join(str(source / d) for d in dirs)


def compare_flatten(rev: str, bodies: Sequence[bytes], batch_size: int, workdir: Path) -> None:
    """Today's flattener against revision `rev`'s on the same bodies, alternating fresh child
    processes (three rounds each): both best rates and their ratio."""
    sample = workdir / "flatten-bodies.pickle"
    with sample.open("wb") as f:
        pickle.dump((list(bodies[:120]), batch_size), f)
    paths = {rev: revision_sources(rev, workdir, ("collector/src", "lake/src")), "today": ""}
    best = dict.fromkeys(paths, 0.0)
    for _ in range(3):
        for name, path in paths.items():
            best[name] = max(best[name], float(_run_python(_FLATTEN_TIMER, str(sample), path)))
    print(
        f"  decode + flatten (as a worker does), same bodies, fresh processes (best of 3 "
        f"rounds): today "
        f"{_fmt_rate(best['today'])} spans/s, {rev} {_fmt_rate(best[rev])} spans/s; "
        f"today / {rev} = {best['today'] / best[rev]:.2f}",
        flush=True,
    )


_CEILING_RUNNER = """
import pickle, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
import ingest
with open(sys.argv[1], "rb") as f:
    bodies, batch_size, threads = pickle.load(f)
r = ingest.run_ceiling(bodies, batch_size, Path(sys.argv[1]).parent, threads=threads)
print(r.end_to_end_rate, r.flatten_rate, r.parse_rate)
"""


def compare_ceiling(
    rev: str, bodies: Sequence[bytes], batch_size: int, workdir: Path, threads: int, rounds: int
) -> None:
    """The in-process ceiling of today's collector against revision `rev`'s on the same bodies,
    alternating fresh child processes (`rounds` each): both best rates and their ratio."""
    sample = workdir / "ceiling-bodies.pickle"
    with sample.open("wb") as f:
        pickle.dump((list(bodies), batch_size, threads), f)
    paths = {"today": "", rev: revision_sources(rev, workdir)}
    best = dict.fromkeys(paths, (0.0, 0.0))
    bench_dir = str(Path(__file__).resolve().parent)
    for round_ in range(rounds):
        for name, path in paths.items():
            out = _run_python(_CEILING_RUNNER, str(sample), path, bench_dir).split()
            end_to_end, flatten = float(out[0]), float(out[1])
            print(
                f"  round {round_ + 1}, {name}: parse+flatten+append {_fmt_rate(end_to_end)} "
                f"spans/s (flatten alone {_fmt_rate(flatten)})",
                flush=True,
            )
            best[name] = max(best[name], (end_to_end, flatten))
    sample.unlink()
    today, before = best["today"][0], best[rev][0]
    print(
        f"  the ceiling, same bodies, fresh processes (best of {rounds}): today "
        f"{_fmt_rate(today)} spans/s, {rev} {_fmt_rate(before)} spans/s; "
        f"today / {rev} = {today / before:.2f}",
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    need_packages("psutil")  # the collector's peak memory
    signal.signal(signal.SIGTERM, _raise_interrupt)  # clean up on SIGTERM as on Ctrl-C
    collectors: list[Server] = []
    workdir = Path(tempfile.mkdtemp(prefix="spanscore-bench-"))
    try:
        started = time.perf_counter()
        templates = make_templates(args.batch_size)
        ids = IdSource()
        sizes = [len(t.data) for t in templates]
        print(
            f"spanscore ingest benchmark: {len(templates)} request templates of "
            f"{args.batch_size} spans, {min(sizes) / 1024:,.0f}-{max(sizes) / 1024:,.0f} KiB "
            f"serialized (~{sum(sizes) / len(sizes) / args.batch_size:,.0f} bytes per span); "
            f"{os.cpu_count()} CPUs",
            flush=True,
        )

        print("\n== in-process ceiling (parse + flatten + group-commit append, 2 threads)")
        n_ceiling = max(2, math.ceil(args.ceiling_spans / args.batch_size))
        bodies = make_pool(templates, n_ceiling, ids)
        # Same bodies again with the writer resolving no conversations at commit: the
        # baseline for what stored conversation identity costs ingest (same run).
        unresolved = run_ceiling(
            bodies, args.batch_size, workdir, threads=args.clients, conversation_traces=0
        )
        ceiling = run_ceiling(bodies, args.batch_size, workdir, threads=args.clients)
        print(
            f"  {ceiling.spans:,} spans: parse {_fmt_rate(ceiling.parse_rate)} spans/s, "
            f"flatten {_fmt_rate(ceiling.flatten_rate)} spans/s, parse+flatten+append "
            f"{_fmt_rate(ceiling.end_to_end_rate)} spans/s = the ceiling "
            f"({ceiling.commits} commits; lake holds {ceiling.lake_rows:,})",
            flush=True,
        )
        print(
            f"  without resolving conversations at commit: "
            f"{_fmt_rate(unresolved.end_to_end_rate)} spans/s (resolving costs "
            f"{100 * (1 - ceiling.end_to_end_rate / unresolved.end_to_end_rate):.0f}%)",
            flush=True,
        )
        # Same bodies with their model calls' messages as log records too, sent first: as
        # producers send them (no conversation id on the records, resolved when their spans
        # come), and carrying their span's (nothing to resolve), alternating, twice each.
        for round_ in range(2):
            for carrying in (False, True):
                records = run_ceiling(
                    bodies,
                    args.batch_size,
                    workdir,
                    threads=args.clients,
                    records_first=True,
                    records_carrying=carrying,
                )
                print(
                    f"  with two log records per model call sent ahead of their spans, "
                    f"{'carrying their conversation' if carrying else 'carrying none'} "
                    f"(round {round_ + 1}): {_fmt_rate(records.end_to_end_rate)} spans/s and "
                    f"{_fmt_rate(records.records / records.spans * records.end_to_end_rate)} "
                    f"records/s; {records.records_resolved:,} of {records.records:,} records "
                    "stored with their span's conversation",
                    flush=True,
                )
        if args.baseline_flatten:
            compare_flatten(args.baseline_flatten, bodies, args.batch_size, workdir)
        if args.baseline_collector:
            print(f"\n== in-process ceiling, today's collector and {args.baseline_collector}'s")
            compare_ceiling(
                args.baseline_collector,
                bodies,
                args.batch_size,
                workdir,
                args.clients,
                args.baseline_rounds,
            )
        del bodies

        # Enough requests for well over the ceiling's rate; a phase that runs out ends early.
        expected = max(ceiling.end_to_end_rate * 1.5, 10_000) * args.seconds
        n_bodies = min(args.max_bodies, math.ceil(expected / args.batch_size) + args.clients)
        phases: list[PhaseResult] = []
        protocols: list[tuple[str, ExporterFactory, Callable[[CollectorProcess], int]]] = [
            ("gRPC", GrpcExporter, lambda c: c.grpc_port),
            ("HTTP", HttpExporter, lambda c: c.http_port),
        ]
        # Today's collector, and with --baseline-collector another revision's, alternating.
        rev = args.baseline_collector
        runs: list[tuple[str, str, list[str]]] = [("", "", [])]
        if rev:
            runs.append((rev, revision_sources(rev, workdir), []))
        compare = args.compare_collector_arg or []
        if compare:
            runs.append((" ".join(compare), "", compare))
        rounds = args.baseline_rounds if rev or compare else 1
        compared: dict[tuple[str, str], list[PhaseResult]] = {}
        for name, factory, port_of in protocols:
            for _ in range(rounds):
                for label, sources, extra in runs:
                    title = f"{name} {label}".strip()
                    print(f"\n== OTLP/{name}" + (f", the collector of {label}" if label else ""))
                    generated = time.perf_counter()
                    bodies = make_pool(templates, n_bodies, ids)
                    print(
                        f"  pre-serialized {len(bodies)} requests "
                        f"({pool_bytes(bodies) / MIB:,.0f} MiB) "
                        f"in {time.perf_counter() - generated:.1f}s",
                        flush=True,
                    )
                    phase = run_network_phase(
                        title, factory, port_of, bodies, args, workdir, collectors, sources, extra
                    )
                    compared.setdefault((name, label), []).append(phase)
                    phases.append(phase)
                if name == "gRPC":  # the minimal server in the same rounds, same clients
                    print(f"\n== OTLP/gRPC, the {MinimalServer.noun} (bench/_minimal_otlp.py)")
                    bodies = make_pool(templates, n_bodies, ids)
                    phase = run_minimal_phase(bodies, args, workdir, collectors)
                    compared.setdefault((MINIMAL, ""), []).append(phase)
        print_summary([p for p in phases if p.name in ("gRPC", "HTTP")], ceiling, args)
        print_minimal(compared)
        if rev:
            print_baseline(compared, rev)
        if compare:
            print_baseline(compared, " ".join(compare))
        print(f"\n(total run time {time.perf_counter() - started:.0f}s)")
        return 0 if all(p.count_ok for p in phases) else 1
    except KeyboardInterrupt:
        print("\ninterrupted; stopping the collector", file=sys.stderr)
        return 130
    finally:
        for collector in collectors:
            collector.kill()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
