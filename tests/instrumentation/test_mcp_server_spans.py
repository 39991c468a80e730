"""An MCP server with the MCP SDK's own OpenTelemetry on: the real `mcp` package (2.3.0), the
customer-service tools in a server process of their own over stdio (`mcp_traced_server.py`),
which exports its spans over OTLP/HTTP to the real collector, as this process does its own.
The SDK propagates the trace context in `_meta`, so the server's SERVER `execute_tool` span of
each call lands in the caller's trace, and in its conversation.

With the client instrumented by spanscore's MCP shim, the shim's span records each call (with
its arguments and result) and the server's span is its other side: one call each, in
`spanscore show --json`, `load_trajectory` and the `tool_calls` view. Without any client-side
tool span, the server's spans are the calls' only record, and each is one call."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from click.testing import CliRunner
from mcp import Client, StdioServerParameters
from opentelemetry.sdk.trace import TracerProvider

import spanscore.instrumentation as instrumentation
from spanscore.cli import main
from spanscore.collector import Collector
from spanscore.evaluation import load_trajectory, open_lake
from spanscore.examples.customer_service.store import Store
from spanscore.instrumentation.mcp import MCPInstrumentor

from ..support.lake import query
from ..support.polling import wait_for

SERVER = Path(__file__).with_name("mcp_traced_server.py")
SEARCH = {"query": "keyboard", "max_price": 100.0}
CALLS = [
    ("get_order", {"order_id": "ORD-1001"}),
    ("search_products", SEARCH),
    ("get_order", {"order_id": "ORD-9999"}),  # raises in the server: an isError result
]


@pytest.fixture
def clean() -> Iterator[None]:
    yield
    instrumentation.uninstrument()
    MCPInstrumentor().uninstrument()


def run_turn(collector: Collector, conversation_id: str, *, shim: bool) -> list[Any]:
    """One agent turn (a span of this process, carrying the conversation) calling the server's
    tools: `CALLS` one after another, through the MCP shim or not; every span sent."""
    provider = instrumentation.instrument(
        tracer_provider=TracerProvider(), endpoint=f"http://127.0.0.1:{collector.http_port}"
    )
    if not shim:
        MCPInstrumentor().uninstrument()
    assert MCPInstrumentor().is_instrumented == shim
    server = StdioServerParameters(
        command=sys.executable,
        args=[str(SERVER)],
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.http_port}",
            "OTEL_SERVICE_NAME": "customer-service-mcp",
        },
    )

    async def calls() -> list[Any]:
        async with Client(server) as client:
            with provider.get_tracer("tests").start_as_current_span("agent turn"):
                return [await client.call_tool(name, arguments) for name, arguments in CALLS]

    with instrumentation.conversation(conversation_id):
        results = asyncio.run(calls())
    instrumentation.uninstrument()  # sends what this process holds
    assert [r.is_error for r in results] == [False, False, True]
    return results


def tool_spans(lake_dir: Path, conversation_id: str) -> list[tuple[Any, ...]]:
    """(kind, tool) of the conversation's `execute_tool` spans, in order."""
    return query(
        lake_dir,
        "SELECT kind, tool_name FROM spans WHERE conversation_id = ? "
        "AND operation = 'execute_tool' ORDER BY start_time_unix_nano, kind",
        [conversation_id],
    )


def calls_in_view(lake_dir: Path, conversation_id: str) -> list[tuple[Any, ...]]:
    rows = query(
        lake_dir,
        "SELECT tool_name, arguments, result, error FROM tool_calls WHERE conversation_id = ? "
        "ORDER BY step_index",
        [conversation_id],
    )
    return [
        (name, json.loads(arguments) if arguments else None, result, error)
        for name, arguments, result, error in rows
    ]


def shown_calls(lake_dir: Path, conversation_id: str) -> list[tuple[Any, ...]]:
    """The tool calls of `spanscore show --json`, turn by turn."""
    shown = CliRunner().invoke(main, ["show", conversation_id, "--lake", str(lake_dir), "--json"])
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    return [
        (turn["index"], step["name"], step["arguments"], step["result"], step["error"])
        for turn in document["turns"]
        for step in turn["steps"]
        if step["kind"] == "tool_call"
    ]


def test_the_servers_span_of_a_call_the_shim_records_is_not_a_second_call(
    collector: Collector, lake_dir: Path, clean: None
) -> None:
    run_turn(collector, "mcp-server-1", shim=True)
    # The server's spans came, in the caller's trace and so in its conversation: each call
    # is recorded twice, by the shim (CLIENT) and by the server (SERVER).
    expected_spans = [(kind, name) for name, _ in CALLS for kind in ("CLIENT", "SERVER")]
    wait_for(lambda: tool_spans(lake_dir, "mcp-server-1") == expected_spans, timeout=30)

    store = Store()
    expected = [
        ("get_order", {"order_id": "ORD-1001"}, store.get_order("ORD-1001"), None),
        ("search_products", SEARCH, {"result": store.search_products("keyboard", 100.0)}, None),
        ("get_order", {"order_id": "ORD-9999"}, "Error executing tool get_order", "tool_error"),
    ]
    trajectory = load_trajectory(open_lake(lake_dir), "mcp-server-1")
    assert trajectory is not None
    assert [(c.name, c.arguments, c.result, c.error, c.source) for c in trajectory.tool_calls] == [
        (*call, "span") for call in expected
    ]
    assert len(trajectory.turns) == 1  # one trace: the agent's turn
    assert [
        (name, arguments, json.loads(result) if error is None else result, error)
        for name, arguments, result, error in calls_in_view(lake_dir, "mcp-server-1")
    ] == expected
    assert shown_calls(lake_dir, "mcp-server-1") == [(0, *call) for call in expected]


def test_the_servers_span_is_the_call_when_the_client_records_none(
    collector: Collector, lake_dir: Path, clean: None
) -> None:
    # An agent that calls an MCP server without client-side tool instrumentation: the
    # server's spans are the only record of the calls (no arguments, no result), one each.
    run_turn(collector, "mcp-server-2", shim=False)
    expected_spans = [("SERVER", name) for name, _ in CALLS]
    wait_for(lambda: tool_spans(lake_dir, "mcp-server-2") == expected_spans, timeout=30)

    expected = [
        ("get_order", None, None, None),
        ("search_products", None, None, None),
        ("get_order", None, None, "tool_error"),
    ]
    trajectory = load_trajectory(open_lake(lake_dir), "mcp-server-2")
    assert trajectory is not None
    assert [(c.name, c.arguments, c.result, c.error) for c in trajectory.tool_calls] == expected
    assert calls_in_view(lake_dir, "mcp-server-2") == expected
    assert shown_calls(lake_dir, "mcp-server-2") == [(0, *call) for call in expected]
