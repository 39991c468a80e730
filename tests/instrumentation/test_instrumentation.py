"""spanscore.instrumentation: one call sends spans to the collector; light on dependencies."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

import spanscore.instrumentation as instrumentation
from spanscore.collector import Collector

from ..support.lake import query


def _requirements(dist: str, seen: set[str]) -> set[str]:
    """The installed distributions `dist` pulls in, transitively (extras not requested)."""
    name = re.sub(r"[-_.]+", "-", dist).lower()
    if name in seen:
        return seen
    seen.add(name)
    try:
        requires = metadata.requires(name) or []
    except metadata.PackageNotFoundError:
        return seen
    for requirement in requires:
        if "extra ==" in requirement:
            continue
        _requirements(re.split(r"[ ;<>=!~\[(]", requirement, maxsplit=1)[0], seen)
    return seen


def test_instrumentation_pulls_neither_duckdb_nor_grpc() -> None:
    pulled = _requirements("spanscore-instrumentation", set())
    assert "opentelemetry-sdk" in pulled
    assert not {p for p in pulled if p.startswith(("duckdb", "grpcio", "pyarrow"))}, pulled


@pytest.fixture
def clean_instrumentation() -> Iterator[None]:
    yield
    instrumentation.uninstrument()


def test_instrument_sends_spans_to_the_collector(
    collector: Collector, lake_dir: Path, clean_instrumentation: None
) -> None:
    provider = TracerProvider()
    got = instrumentation.instrument(
        endpoint=f"http://127.0.0.1:{collector.http_port}", tracer_provider=provider
    )
    assert got is provider
    assert instrumentation.instrument(tracer_provider=TracerProvider()) is provider  # idempotent
    with (
        instrumentation.conversation("conv-9"),
        provider.get_tracer("agent").start_as_current_span(
            "execute_tool lookup", attributes={"gen_ai.tool.name": "lookup"}
        ),
    ):
        pass
    instrumentation.uninstrument()  # flushes
    assert not instrumentation.is_instrumented()
    assert query(lake_dir, "SELECT tool_name, conversation_id FROM spans") == [("lookup", "conv-9")]
    # Uninstrumented: the provider's spans no longer reach the collector.
    with provider.get_tracer("agent").start_as_current_span("after"):
        pass
    provider.force_flush()
    assert query(lake_dir, "SELECT count(*) FROM spans") == [(1,)]


@pytest.fixture
def stamped() -> tuple[TracerProvider, Any]:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(instrumentation.ConversationSpanProcessor())
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider, memory


def test_conversation_stamps_every_span_inside(stamped: tuple[TracerProvider, Any]) -> None:
    provider, memory = stamped
    ours, theirs = provider.get_tracer("spanscore"), provider.get_tracer("openinference")
    with (
        instrumentation.conversation("conv-1", user_id="u-7", scenario_id="refund", tier="gold"),
        ours.start_as_current_span("invoke_agent a"),
        theirs.start_as_current_span("LLM"),
    ):
        pass
    with ours.start_as_current_span("outside"):
        pass
    spans = {s.name: dict(s.attributes or {}) for s in memory.get_finished_spans()}
    expected = {
        "gen_ai.conversation.id": "conv-1",
        "user.id": "u-7",
        "scenario.id": "refund",
        "tier": "gold",
    }
    assert spans["invoke_agent a"] == expected
    assert spans["LLM"] == expected  # another instrumentation's span is stamped too
    assert spans["outside"] == {}


def test_conversation_as_decorator_sync_and_async(stamped: tuple[TracerProvider, Any]) -> None:
    import asyncio

    provider, memory = stamped
    tracer = provider.get_tracer("t")

    @instrumentation.conversation("sync-1")
    def handle() -> None:
        with tracer.start_as_current_span("sync"):
            pass

    @instrumentation.conversation("async-1")
    async def handle_async() -> None:
        async def child() -> None:
            with tracer.start_as_current_span("in-task"):
                pass

        await asyncio.gather(asyncio.create_task(child()), child())  # tasks copy the context

    async def with_block() -> None:
        async with instrumentation.conversation("block-1"):
            with tracer.start_as_current_span("async-with"):
                pass

    handle()
    asyncio.run(handle_async())
    asyncio.run(with_block())
    ids = [
        (s.name, (s.attributes or {}).get("gen_ai.conversation.id"))
        for s in memory.get_finished_spans()
    ]
    assert ids == [
        ("sync", "sync-1"),
        ("in-task", "async-1"),
        ("in-task", "async-1"),
        ("async-with", "block-1"),
    ]


def test_conversation_crosses_services_in_w3c_baggage() -> None:
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    with instrumentation.conversation("conv-remote", scenario_id="s-1"):
        propagate.inject(carrier)
    assert "baggage" in carrier
    remote = propagate.extract(carrier)  # the other service's side
    assert instrumentation.current_values(remote) == {
        "gen_ai.conversation.id": "conv-remote",
        "scenario.id": "s-1",
    }


@pytest.mark.timeout(60)  # the guard: a blocked agent would hang here
def test_a_dead_collector_never_blocks_the_agent(
    monkeypatch: pytest.MonkeyPatch, clean_instrumentation: None
) -> None:
    from ..support.ports import free_port

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # the exporter gives up after 1 s
    provider = TracerProvider()
    instrumentation.instrument(
        tracer_provider=provider,
        endpoint=f"http://127.0.0.1:{free_port()}",  # nothing listens
    )
    tracer = provider.get_tracer("agent")
    # More spans than the export queue holds: the overflow is dropped (and counted by the SDK),
    # the agent's calls return at once.
    for i in range(5_000):
        with tracer.start_as_current_span("execute_tool lookup", attributes={"i": i}):
            pass
    instrumentation.uninstrument(timeout_millis=2_000)  # flushing gives up, does not hang
    assert not instrumentation.is_instrumented()


def test_conversation_follows_work_into_threads(
    stamped: tuple[TracerProvider, Any], clean_instrumentation: None
) -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider, memory = stamped
    tracer = provider.get_tracer("t")
    instrumentation.instrument(tracer_provider=provider, exporter=InMemorySpanExporter())

    def work(name: str) -> None:
        with tracer.start_as_current_span(name):
            pass

    with instrumentation.conversation("threads-1"):
        thread = threading.Thread(target=work, args=("in-thread",))
        thread.start()
        thread.join()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(work, ["in-pool-a", "in-pool-b"]))  # map uses submit
    ids = {
        s.name: (s.attributes or {}).get("gen_ai.conversation.id")
        for s in memory.get_finished_spans()
    }
    assert ids == {"in-thread": "threads-1", "in-pool-a": "threads-1", "in-pool-b": "threads-1"}

    instrumentation.uninstrument()  # restores threading: a new thread no longer inherits
    memory.clear()
    with instrumentation.conversation("threads-2"):
        thread = threading.Thread(target=work, args=("after",))
        thread.start()
        thread.join()
    assert [
        (s.attributes or {}).get("gen_ai.conversation.id") for s in memory.get_finished_spans()
    ] == [None]


AGENT = """
import logging, sys, time
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from opentelemetry import trace
import spanscore.instrumentation as instrumentation
instrumentation.instrument(service_name="agent", endpoint=sys.argv[1])
tracer = trace.get_tracer("agent")
for n in range(200):
    with tracer.start_as_current_span("execute_tool lookup"):
        pass
print(f"ending at {time.monotonic()}", flush=True)  # the system's clock, the test's too
if sys.argv[2] == "uninstrument":
    instrumentation.uninstrument()
"""


@pytest.mark.parametrize("ending", ["exit", "uninstrument"])
@pytest.mark.parametrize("collector", ["refusing", "silent"])
def test_an_agent_ends_within_its_exit_timeout_when_the_collector_is_unreachable(
    ending: str, collector: str
) -> None:
    """The exporter would retry one batch for 30 s (EXPORT_TIMEOUT_S) against a collector that
    refuses connections, or wait as long on one that accepts and never answers; the process
    ends after its exit timeout instead, and says what it did not send, and where."""
    import socket
    import subprocess
    import sys
    import time

    from ..support.ports import free_port

    silent = socket.socket()  # accepts connections (the kernel's backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    port = silent.getsockname()[1] if collector == "silent" else free_port()
    endpoint = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["SPANSCORE_EXIT_TIMEOUT_S"] = "1"
    try:
        ended = subprocess.run(
            [sys.executable, "-c", AGENT, endpoint, ending],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    finally:
        silent.close()
    ended_at = time.monotonic()
    assert ended.returncode == 0, ended.stderr
    # From the end of the agent's work to the end of its process: not Python's start, which a
    # loaded machine makes slow (27.8 s once, at a load average of 25). Generous all the same,
    # and nowhere near the 30 s of retries.
    took = ended_at - float(ended.stdout.split("ending at ", 1)[1].split()[0])
    assert took < 20, f"the agent took {took:.1f} s to end"
    assert f"{endpoint}/v1/traces did not take the last spans within 1 s" in ended.stderr
    assert "200 span(s) not sent" in ended.stderr
