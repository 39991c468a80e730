"""A currency-rate agent as its author would write it, for the tests that hold a simulation to
what production records (tests/evaluation/test_simulate_production.py).

It sets its spans up itself, at import: its own tracer provider, whose resource names the
service and its version. It asks its model (the `openai` client, at `RATE_AGENT_MODEL_URL`)
and runs the one tool the model requests, `get_rate`, which raises the agent's own exception
type for a currency it does not know. `serve()` is its production loop: one conversation per
line of stdin (`ID<TAB>message`), its spans to the collector the OTLP variables name.

Importing it instruments the process: the tests name it to `spanscore simulate`, which imports
it once the spans' way to the simulation's collector is set, and import nothing of it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import openai
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

import spanscore.instrumentation
from spanscore.instrumentation import conversation, tool

SERVICE = {"service.name": "rate-agent", "service.version": "1.4.0"}
spanscore.instrumentation.instrument(tracer_provider=TracerProvider(resource=Resource(SERVICE)))

RATES = {"EUR": 1.08, "GBP": 1.27}
TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_rate",
            "description": "The exchange rate of a currency to the US dollar.",
            "parameters": {
                "type": "object",
                "properties": {"currency": {"type": "string"}},
                "required": ["currency"],
            },
        },
    }
]


class RateServiceError(Exception):
    """The rate service knows no such currency."""


@tool
def get_rate(currency: str) -> dict[str, Any]:
    if currency not in RATES:
        raise RateServiceError(f"no rate for {currency}")
    return {"currency": currency, "rate": RATES[currency]}


def answer(message: str) -> str:
    """One user message, answered: the model, the tool it asks for, the model again."""
    client = openai.OpenAI(
        base_url=os.environ["RATE_AGENT_MODEL_URL"], api_key="test", max_retries=0
    )
    messages: list[Any] = [{"role": "user", "content": message}]
    while True:
        reply = client.chat.completions.create(model="gpt-4.1-mini", messages=messages, tools=TOOLS)
        said = reply.choices[0].message
        if not said.tool_calls:
            return said.content or ""
        messages.append(said.model_dump(exclude_none=True))
        for call in said.tool_calls:
            try:
                result = json.dumps(get_rate(**json.loads(call.function.arguments)))
            except RateServiceError as exc:
                result = f"error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


def serve() -> None:
    """Production: a conversation per line of stdin, `ID<TAB>message`; each reply on stdout."""
    for line in sys.stdin:
        conversation_id, message = line.rstrip("\n").split("\t", 1)
        with conversation(conversation_id):
            print(answer(message), flush=True)
    spanscore.instrumentation.uninstrument()  # flushes the spans
