"""Benchmark: what instrumentation costs per tool call, shim on vs off, in the same run.

Three ways to run the same tool call (a small Python function taking and returning JSON-able
values), each timed over ``--calls`` calls:

1. off: the call alone;
2. OpenTelemetry span: the call inside an ``execute_tool`` span with the GenAI attributes our
   shims record (arguments and result as JSON, call id), with `instrument()`'s processors
   (conversation stamping, content policy, bounded batch export to a no-op exporter), inside
   ``conversation(...)``;
3. OpenAI Agents SDK: the SDK's own ``function_span`` around the call, with no trace processor
   (baseline) and with spanscore's shim registered;
4. a hand-written loop's tool: the function decorated with ``@spanscore.instrumentation.tool``
   while instrumented, its call id recovered from a model response's requested calls (each
   iteration registers one, as the OpenAI client shim does), vs the bare function;
5. the OpenAI client shim's own work per model call (no network): the `chat` span of a
   Chat Completions request with the six customer-service tools and a response requesting two
   tool calls (request and response read, messages as JSON, calls remembered).

Printed: microseconds per call and the overhead over its baseline, and, as the floor no
instrumentation can go under, the same span from a bare OpenTelemetry SDK provider with no
processor. Target (issue): under 50 µs per tool call. Nothing is asserted.

    .venv/bin/python bench/instrumentation.py
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import spanscore.instrumentation as instrumentation
from spanscore.instrumentation import _tool


class NullExporter(SpanExporter):
    """Accepts everything at once: the benchmark measures the agent's side, not the network."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def tool(order_id: str, n: int) -> dict[str, Any]:
    return {"order_id": order_id, "status": "shipped", "items": [{"sku": "SKU-1", "qty": n}]}


def _completion() -> Any:
    """A parsed Chat Completions response that requests two tool calls."""
    from openai.types.chat import ChatCompletion

    calls = [
        {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": "get_order", "arguments": f'{{"order_id": "ORD-100{n}"}}'},
        }
        for n in (1, 2)
    ]
    return ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-4.1-mini",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {"role": "assistant", "content": None, "tool_calls": calls},
                }
            ],
            "usage": {"prompt_tokens": 300, "completion_tokens": 40, "total_tokens": 340},
        }
    )


def per_call_us(fn: Callable[[int], Any], calls: int) -> float:
    for i in range(min(1000, calls)):  # warm up
        fn(i)
    started = time.perf_counter()
    for i in range(calls):
        fn(i)
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50_000)
    args = parser.parse_args()

    def off(i: int) -> Any:
        return tool("ORD-1", i)

    provider = TracerProvider()
    instrumentation.instrument(tracer_provider=provider, exporter=NullExporter())
    tracer = provider.get_tracer("spanscore.bench")
    policy = instrumentation.content_policy()

    def with_span(i: int) -> Any:
        arguments: dict[str, Any] = {"order_id": "ORD-1", "n": i}
        with tracer.start_as_current_span(
            "execute_tool get_order",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "get_order",
                "gen_ai.tool.call.id": f"call_{i}",
                "gen_ai.tool.call.arguments": policy.record(
                    "tool_arguments", json.dumps(arguments)
                ),
            },
        ) as span:
            result = tool(**arguments)
            span.set_attribute(
                "gen_ai.tool.call.result", policy.record("tool_results", json.dumps(result))
            )
            return result

    decorated = instrumentation.tool(name="get_order")(tool)

    def with_decorator(i: int) -> Any:
        _tool.remember_requested_calls([(f"call_{i}", "get_order", '{"order_id": "ORD-1"}')])
        return decorated("ORD-1", n=i)

    from spanscore.examples.customer_service.openai_loop import CHAT_TOOLS
    from spanscore.instrumentation import openai_client

    request: dict[str, Any] = {
        "model": "gpt-4.1-mini",
        "messages": [{"role": "user", "content": "Where are ORD-1001 and ORD-1002?"}],
        "tools": CHAT_TOOLS,
    }
    completion = _completion()
    client_tracer = provider.get_tracer("spanscore.instrumentation.openai_client")

    def model_call(i: int) -> Any:
        call = openai_client.ModelCall(client_tracer, "chat", None, request)
        call.enter()
        call.leave()
        call.succeed(completion)
        return call

    # The floor: the same span from a bare OpenTelemetry SDK provider, no processor at all.
    bare_tracer = TracerProvider().get_tracer("spanscore.bench.bare")

    def bare_span(i: int) -> Any:
        arguments: dict[str, Any] = {"order_id": "ORD-1", "n": i}
        with bare_tracer.start_as_current_span(
            "execute_tool get_order",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "get_order",
                "gen_ai.tool.call.id": f"call_{i}",
                "gen_ai.tool.call.arguments": json.dumps(arguments),
            },
        ) as span:
            result = tool(**arguments)
            span.set_attribute("gen_ai.tool.call.result", json.dumps(result))
            return result

    base = per_call_us(off, args.calls)
    bare = per_call_us(bare_span, args.calls)
    with instrumentation.conversation("bench-1", user_id="u-1"):
        spanned = per_call_us(with_span, args.calls)
        tooled = per_call_us(with_decorator, args.calls)
        model_calls = per_call_us(model_call, max(1, args.calls // 5))
    instrumentation.uninstrument()

    rows = [
        ("tool call alone", base, None),
        ("the same span, bare OpenTelemetry SDK (floor)", bare, bare - base),
        ("in an execute_tool span (instrument())", spanned, spanned - base),
        ("@tool, call id from the model's request", tooled, tooled - base),
        ("OpenAI client shim, one chat span (no network)", model_calls, model_calls),
    ]
    try:
        from agents.tracing import function_span, set_trace_processors, trace

        from spanscore.instrumentation.openai_agents import OpenAIAgentsInstrumentor
    except ImportError:
        agents_rows: list[tuple[str, float, float | None]] = []
        print("(openai-agents is not installed: the Agents SDK rows are skipped)")
    else:

        def sdk_call(i: int) -> Any:
            with function_span("get_order", input=json.dumps({"order_id": "ORD-1", "n": i})) as s:
                result = tool("ORD-1", i)
                s.span_data.output = json.dumps(result)
                return result

        set_trace_processors([])
        with trace("bench", group_id="bench-1"):
            sdk_off = per_call_us(sdk_call, args.calls)
        provider = TracerProvider()
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider.add_span_processor(BatchSpanProcessor(NullExporter()))
        OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
        with trace("bench", group_id="bench-1"):
            sdk_on = per_call_us(sdk_call, args.calls)
        OpenAIAgentsInstrumentor().uninstrument()
        provider.shutdown()
        agents_rows = [
            ("Agents SDK function_span, no processor", sdk_off, None),
            ("Agents SDK function_span + spanscore shim", sdk_on, sdk_on - sdk_off),
        ]
    print(f"{'':46}{'µs/call':>10}{'overhead µs':>14}")
    for label, value, overhead in rows + agents_rows:
        extra = f"{overhead:>14.1f}" if overhead is not None else f"{'(baseline)':>14}"
        print(f"{label:46}{value:>10.1f}{extra}")
    print(
        f"spanscore's own share of the instrument() span: {spanned - bare:.1f} µs "
        "(the rest is the OpenTelemetry SDK's span)"
    )
    print("target: under 50 µs of overhead per tool call (printed, not asserted)")


if __name__ == "__main__":
    main()
