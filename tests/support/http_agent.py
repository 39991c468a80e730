"""The example customer-service agent behind HTTP, in a process of its own, for `simulate
--agent URL`: `python -m tests.support.http_agent --model-url URL --otlp URL`; prints its port.

POST / with `{"message": ..., "conversation_id": ...}` answers `{"output": {"text": ...}}`.
It is instrumented with `spanscore.instrumentation` and takes the request's context from its
headers (W3C trace context and baggage), as any OpenTelemetry HTTP server instrumentation does:
the conversation, scenario, simulation and trial the simulator sent as baggage stamp its spans.
"""

from __future__ import annotations

import argparse
import json
import threading
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
    args = parser.parse_args()
    spanscore.instrumentation.instrument(
        endpoint=args.otlp, protocol="http/protobuf", service_name="http-agent"
    )
    answer = simulated_agent(openai.OpenAI(base_url=args.model_url, api_key="test", max_retries=0))
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
            spanscore.instrumentation.instrument().force_flush()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    finally:
        spanscore.instrumentation.uninstrument()


if __name__ == "__main__":
    main()
