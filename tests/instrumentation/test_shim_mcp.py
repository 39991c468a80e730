"""The MCP client shim: the real `mcp` package (2.3.0), an MCPServer with the customer-service
tools connected in-process to `mcp.Client` (whose calls go through `ClientSession.call_tool`),
spans exported over OTLP/HTTP to the real collector and asserted with SQL."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import Client
from mcp.client.session import ClientSession
from mcp.server.mcpserver import MCPServer
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import spanscore.instrumentation as instrumentation
from spanscore.collector import Collector
from spanscore.examples.customer_service.store import Store
from spanscore.instrumentation import mcp as shim
from spanscore.instrumentation.mcp import MCPInstrumentor

from ..support.customer_service_mcp import SERVER, make_server
from ..support.lake import query
from ..support.polling import wait_for

CONVERSATION = "mcp-conv-1"
SEARCH = {"query": "keyboard", "max_price": 100.0}


CALLS = [
    ("get_order", {"order_id": "ORD-1001"}),
    ("search_products", SEARCH),
    ("get_order", {"order_id": "ORD-9999"}),  # raises in the server: an isError result
]


def run_calls(server: MCPServer) -> list[Any]:
    async def calls() -> list[Any]:
        async with Client(server) as client:
            return [await client.call_tool(name, arguments) for name, arguments in CALLS]

    with instrumentation.conversation(CONVERSATION):
        return asyncio.run(calls())


@pytest.fixture
def clean() -> Iterator[None]:
    yield
    instrumentation.uninstrument()
    MCPInstrumentor().uninstrument()


def test_tool_calls_land_in_the_lake(collector: Collector, lake_dir: Path, clean: None) -> None:
    store = Store()
    instrumentation.instrument(
        tracer_provider=TracerProvider(), endpoint=f"http://127.0.0.1:{collector.http_port}"
    )
    assert MCPInstrumentor().is_instrumented
    results = run_calls(make_server(store))
    assert [r.is_error for r in results] == [False, False, True]  # returned, not raised
    instrumentation.uninstrument()
    wait_for(lambda: query(lake_dir, "SELECT count(*) FROM spans") == [(3,)])
    rows = query(
        lake_dir,
        """SELECT tool_name, tool_arguments, tool_result, error_type, status_code,
                  conversation_id, attributes->>'$."gen_ai.tool.type"',
                  attributes->>'$."mcp.server.name"'
           FROM spans WHERE operation = 'execute_tool' ORDER BY start_time_unix_nano""",
    )
    got = [(name, json.loads(args), result, *rest) for name, args, result, *rest in rows]
    common = (CONVERSATION, "extension", SERVER)
    assert [(g[0], g[1], g[3], g[4], *g[5:]) for g in got] == [
        ("get_order", {"order_id": "ORD-1001"}, None, "UNSET", *common),
        ("search_products", SEARCH, None, "UNSET", *common),
        ("get_order", {"order_id": "ORD-9999"}, "tool_error", "ERROR", *common),
    ]
    assert json.loads(got[0][2]) == store.get_order("ORD-1001")
    assert json.loads(got[1][2]) == {"result": store.search_products("keyboard", 100.0)}
    assert got[2][2] == "Error executing tool get_order"


@pytest.fixture
def memory(clean: None) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    instrumentation.instrument(tracer_provider=TracerProvider(), exporter=exporter)
    return exporter


def test_a_call_links_to_the_models_call_id(memory: InMemorySpanExporter) -> None:
    from spanscore.instrumentation import _tool

    async def call() -> None:
        _tool.remember_requested_calls([("call_1", "get_order", '{"order_id": "ORD-1001"}')])
        async with Client(make_server(Store())) as client:
            await client.call_tool("get_order", {"order_id": "ORD-1001"})

    asyncio.run(call())
    instrumentation.uninstrument()
    (span,) = memory.get_finished_spans()
    assert (span.attributes or {})["gen_ai.tool.call.id"] == "call_1"


def test_a_failure_in_the_shim_never_reaches_the_caller(
    memory: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("bug in the shim")

    monkeypatch.setattr(shim, "result_text", broken)
    with caplog.at_level(logging.WARNING, "spanscore.instrumentation"):
        results = run_calls(make_server(Store()))
        assert [r.is_error for r in results] == [False, False, True]
        monkeypatch.setattr(shim, "server_info", broken)  # fails before the call
        assert not run_calls(make_server(Store()))[0].is_error
    assert "bug in the shim" in caplog.text
    instrumentation.uninstrument()
    assert len(memory.get_finished_spans()) == 3  # the second run went unrecorded


def test_an_exception_is_recorded_and_re_raised_unchanged(memory: InMemorySpanExporter) -> None:
    from spanscore.instrumentation._tool import error_type

    async def call() -> None:
        async with Client(make_server(Store())) as client:
            session = client.session
        await session.call_tool("get_order", {"order_id": "ORD-1001"})  # closed: it raises

    with pytest.raises(Exception) as raised:  # noqa: PT011 - whatever mcp raises, unchanged
        asyncio.run(call())
    instrumentation.uninstrument()
    (span,) = memory.get_finished_spans()
    assert (span.attributes or {})["error.type"] == error_type(raised.value)
    assert span.status.status_code.name == "ERROR"


def test_instrument_is_idempotent_and_uninstrument_restores(clean: None) -> None:
    original = ClientSession.__dict__["call_tool"]
    assert MCPInstrumentor().instrument(tracer_provider=TracerProvider())
    patched = ClientSession.__dict__["call_tool"]
    assert patched is not original
    assert MCPInstrumentor().instrument()
    assert ClientSession.__dict__["call_tool"] is patched
    MCPInstrumentor().uninstrument()
    assert ClientSession.__dict__["call_tool"] is original
    MCPInstrumentor().uninstrument()
    assert ClientSession.__dict__["call_tool"] is original
