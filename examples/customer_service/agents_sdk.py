"""The customer-service agent with the OpenAI Agents SDK, instrumented by `instrument()`.

The six store tools are SDK function tools; each conversation of the scripted plans is one
`group_id` (spanscore's Agents SDK shim makes it the conversation id), one `Runner.run` per user
turn, the history carried from turn to turn. A failing tool is reported to the model as
``{"error": message}``. It runs against the real API or the scripted local one::

    with ScriptedLLM(ScriptedPolicy()) as llm:
        client = AsyncOpenAI(base_url=llm.base_url, api_key="test")
        transcript = asyncio.run(run_conversation(client, Store(), plan))

The transcript is a list of events like the plain loop's (`openai_loop`): ``{"type": "user"}``,
``{"type": "tool_call", "id", "name", "arguments", "result", "error"}`` and
``{"type": "assistant", "text"}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    OpenAIResponsesModel,
    RunConfig,
    RunContextWrapper,
    Runner,
    function_tool,
)
from agents.tool_context import ToolContext
from openai import AsyncOpenAI

import spanscore.instrumentation

from .scripted import AGENT, MODEL, Conversation, conversations
from .store import Store, ToolError

INSTRUCTIONS = (
    "You are a customer-service agent for an online shop. Use the tools to look up customers, "
    "orders and products; verify a customer before cancelling an order."
)

Event = dict[str, Any]


def make_tools(store: Store, transcript: list[Event]) -> list[FunctionTool]:
    """The store's six tools as SDK function tools; each execution is added to `transcript`."""

    def failure(ctx: RunContextWrapper[Any], error: Exception) -> str:
        return json.dumps({"error": str(error)})

    as_tool = function_tool(failure_error_function=failure)

    def run(ctx: ToolContext[Any], name: str, **arguments: Any) -> str:
        event: Event = {"type": "tool_call", "id": ctx.tool_call_id, "name": name}
        event["arguments"] = {k: v for k, v in arguments.items() if v is not None}
        transcript.append(event)
        try:
            result = store.call(name, event["arguments"])
        except ToolError as exc:
            event.update(result=None, error=str(exc))
            raise
        event.update(result=result, error=None)
        return json.dumps(result)

    @as_tool
    def lookup_customer(ctx: ToolContext[Any], email: str) -> str:
        """Look up a customer by email address"""
        return run(ctx, "lookup_customer", email=email)

    @as_tool
    def get_order(ctx: ToolContext[Any], order_id: str) -> str:
        """Get order details by order ID"""
        return run(ctx, "get_order", order_id=order_id)

    @as_tool
    def search_products(ctx: ToolContext[Any], query: str, max_price: float | None = None) -> str:
        """Search the product catalog by keyword and optional price filter"""
        return run(ctx, "search_products", query=query, max_price=max_price)

    @as_tool
    def cancel_order(ctx: ToolContext[Any], order_id: str, confirm: bool) -> str:
        """Cancel a processing order (requires confirmation)"""
        return run(ctx, "cancel_order", order_id=order_id, confirm=confirm)

    @as_tool
    def send_verification_code(ctx: ToolContext[Any], email: str) -> str:
        """Send a one-time verification code to a customer's email"""
        return run(ctx, "send_verification_code", email=email)

    @as_tool
    def verify_customer(ctx: ToolContext[Any], email: str, code: str) -> str:
        """Verify a customer's identity using their email and code"""
        return run(ctx, "verify_customer", email=email, code=code)

    return [
        lookup_customer,
        get_order,
        search_products,
        cancel_order,
        send_verification_code,
        verify_customer,
    ]


async def run_conversation(
    client: AsyncOpenAI, store: Store, plan: Conversation, model: str = MODEL
) -> list[Event]:
    """The plan's user turns, one `Runner.run` each, under the plan's conversation id."""
    transcript: list[Event] = []
    agent = Agent(
        name=AGENT,
        instructions=INSTRUCTIONS,
        model=OpenAIResponsesModel(model=model, openai_client=client),
        tools=list(make_tools(store, transcript)),
    )
    items: list[Any] = []
    for turn in plan.turns:
        transcript.append({"type": "user", "text": turn.user})
        items = [*items, {"role": "user", "content": turn.user}]
        config = RunConfig(group_id=plan.conversation_id, workflow_name="customer-service")
        result = await Runner.run(agent, items, run_config=config)
        transcript.append({"type": "assistant", "text": str(result.final_output)})
        items = result.to_input_list()
    return transcript


def main() -> None:
    """Run the scripted conversations' user turns against the API in OPENAI_BASE_URL, sending
    the spans to the spanscore collector in OTEL_EXPORTER_OTLP_ENDPOINT (default: local).

    For instance against the local scripted model::

        python -m spanscore.examples.llm_server --port 8000 &
        OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=test \\
            python -m spanscore.examples.customer_service.agents_sdk
    """
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--model", default=MODEL)
    args = parser.parse_args()
    spanscore.instrumentation.instrument(service_name="customer-service-agents")
    client = AsyncOpenAI()  # reads OPENAI_BASE_URL and OPENAI_API_KEY

    async def everything() -> None:
        for plan in conversations():
            print(f"== {plan.conversation_id}")
            for event in await run_conversation(client, Store(), plan, model=args.model):
                print("  ", json.dumps(event))

    try:
        asyncio.run(everything())
    finally:
        spanscore.instrumentation.uninstrument()  # flushes the spans


if __name__ == "__main__":
    main()
