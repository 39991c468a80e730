"""The child process of `bench/instrumentation.py --zero-code`: tool calls that go through
spanscore's shims, timed in one way of instrumenting, printed as JSON (µs per call by workload).

    python bench/_shim_workload.py off|explicit CALLS
    opentelemetry-instrument python bench/_shim_workload.py zero-code CALLS

It imports nothing from spanscore unless the mode is `explicit` (then it calls
`spanscore.instrumentation.instrument()`, configured by the same OTEL_* variables as
`opentelemetry-instrument`). Workloads, each a tool call a framework runs and a shim records:

- `agents`: an OpenAI Agents SDK `function_span` around the call, inside a `trace` (the SDK's
  default processor, which would send to OpenAI's backend, removed in every mode);
- `langchain`: a LangChain tool's `invoke` (its callback manager, the shim's handler);
- `mcp`: `mcp.Client.call_tool` on an in-memory MCP server (fewer calls: each is a round trip
  through the SDK's streams).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any


def tool(order_id: str, n: int) -> dict[str, Any]:
    """Get order details by order ID"""
    return {"order_id": order_id, "status": "shipped", "items": [{"sku": "SKU-1", "qty": n}]}


def per_call_us(fn: Callable[[int], Any], calls: int) -> float:
    for i in range(min(1000, calls)):  # warm-up
        fn(i)
    started = time.perf_counter()
    for i in range(calls):
        fn(i)
    return (time.perf_counter() - started) / calls * 1e6


def agents_us(calls: int) -> float:
    from agents.tracing import function_span, set_trace_processors, trace
    from agents.tracing.processors import default_processor
    from agents.tracing.setup import get_trace_provider

    current = getattr(get_trace_provider(), "_multi_processor", None)
    kept = [p for p in getattr(current, "_processors", ()) if p is not default_processor()]
    set_trace_processors(kept)

    def call(i: int) -> Any:
        with function_span("get_order", input=json.dumps({"order_id": "ORD-1", "n": i})) as s:
            result = tool("ORD-1", i)
            s.span_data.output = json.dumps(result)
            return result

    with trace("bench", group_id="bench-1"):
        return per_call_us(call, calls)


def langchain_us(calls: int) -> float:
    from langchain_core.tools import tool as lc_tool

    get_order = lc_tool(tool)
    config: Any = {"configurable": {"thread_id": "bench-1"}}
    return per_call_us(lambda i: get_order.invoke({"order_id": "ORD-1", "n": i}, config), calls)


def mcp_us(calls: int) -> float:
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("bench")
    server.tool()(tool)

    async def run() -> float:
        async with Client(server) as client:
            for i in range(min(200, calls)):  # warm-up
                await client.call_tool("tool", {"order_id": "ORD-1", "n": i})
            started = time.perf_counter()
            for i in range(calls):
                await client.call_tool("tool", {"order_id": "ORD-1", "n": i})
            return (time.perf_counter() - started) / calls * 1e6

    return asyncio.run(run())


def main() -> None:
    mode, calls = sys.argv[1], int(sys.argv[2])
    if mode == "explicit":
        import spanscore.instrumentation

        spanscore.instrumentation.instrument()
    result = {
        "agents": agents_us(calls),
        "langchain": langchain_us(calls),
        "mcp": mcp_us(max(1, calls // 20)),
    }
    from opentelemetry import trace

    provider: Any = trace.get_tracer_provider()
    if hasattr(provider, "force_flush"):  # what was sent before the figures are final
        provider.force_flush()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
