"""The example customer-service agent behind HTTP, in a process of its own, for `simulate
--agent URL`: `python -m tests.support.http_agent --model-url URL --otlp URL`; prints its port.

POST / with `{"message": ..., "conversation_id": ...}` answers `{"output": {"text": ...}}`.
It is instrumented with `spanscore.instrumentation` and takes the request's context from its
headers (W3C trace context and baggage), as any OpenTelemetry HTTP server instrumentation does:
the conversation, scenario, simulation and trial the simulator sent as baggage stamp its spans.

`--instrumentation otel`: no `spanscore.instrumentation.instrument()`; the agent is traced with
the OpenTelemetry SDK alone (its own tracer provider and OTLP exporter, GenAI-convention spans:
an `invoke_agent` span with an `execute_tool` span inside), plus the one line
docs/simulation.md asks of such an agent, the `ConversationSpanProcessor` on its provider. It
answers without a model.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import openai
from opentelemetry import context, propagate

import spanscore.instrumentation
from spanscore.examples.customer_service.openai_loop import simulated_agent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-url", required=True)
    parser.add_argument("--otlp", required=True)
    parser.add_argument("--instrumentation", choices=["spanscore", "otel"], default="spanscore")
    args = parser.parse_args()
    if args.instrumentation == "otel":
        answer, flush = otel_agent(args.otlp)
    else:
        spanscore.instrumentation.instrument(
            endpoint=args.otlp, protocol="http/protobuf", service_name="http-agent"
        )
        answer = simulated_agent(
            openai.OpenAI(base_url=args.model_url, api_key="test", max_retries=0)
        )
        flush = _flush_spanscore
    states: dict[str, Any] = {}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            token = context.attach(propagate.extract(dict(self.headers)))
            try:
                with lock:
                    turn = states.setdefault(body["conversation_id"], SimpleNamespace(state={}))
                reply = answer(body["message"], turn)
            finally:
                context.detach(token)
            data = json.dumps({"output": {"text": reply}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            flush()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    finally:
        spanscore.instrumentation.uninstrument()


def _flush_spanscore() -> None:
    spanscore.instrumentation.instrument().force_flush()


def otel_agent(otlp: str) -> tuple[Callable[[str, Any], str], Callable[[], None]]:
    """An agent traced by the OpenTelemetry SDK alone, and how to flush its spans."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "http-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(f"{otlp}/v1/traces")))
    # The one line (docs/simulation.md, "Marking a remote agent's spans"):
    provider.add_span_processor(spanscore.instrumentation.ConversationSpanProcessor())
    tracer = provider.get_tracer("a-genai-instrumentation")

    def answer(message: str, turn: Any) -> str:
        agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "otel-agent"}
        with tracer.start_as_current_span("invoke_agent otel-agent", attributes=agent):
            turn.state["turns"] = turn.state.get("turns", 0) + 1
            call = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "lookup",
                "gen_ai.tool.call.id": f"call-{turn.state['turns']}",
                "gen_ai.tool.call.arguments": json.dumps({"query": message}),
            }
            with tracer.start_as_current_span("execute_tool lookup", attributes=call):
                pass
        return f"Noted: {message}"

    return answer, lambda: None  # each span is exported as it ends


if __name__ == "__main__":
    main()
