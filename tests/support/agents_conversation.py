"""A two-turn conversation of the OpenAI Agents SDK (Responses API) against a scripted model:
its plan for the scripted model (`PLAN`: two parallel calls of one tool, one of which fails,
then a search), the tools' data, and `run_conversation`, which runs it and returns the tool
calls the agent executed. Needs the `agents` package (`openai-agents`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import Agent, RunConfig, Runner, set_default_openai_api, set_default_openai_client
from agents.tool import function_tool
from agents.tool_context import ToolContext
from openai import AsyncOpenAI

from spanscore.examples.customer_service.scripted import Conversation, Turn

GROUP = "agents-conv-1"
AGENT = "customer-service"
MODEL = "gpt-4.1-mini"
MISSING = "order ORD-9999 not found"
TURN_1 = "Hi, where are my orders ORD-1001 and ORD-9999?"
TURN_2 = "Thanks. Any keyboards under $100?"
REPLY_1 = "ORD-1001 has shipped; I could not find ORD-9999."
REPLY_2 = "The mechanical keyboard is $89."

PLAN = Conversation(
    GROUP,
    "agents_shim",
    [
        Turn(  # two parallel calls of the same tool, one of which fails
            TURN_1,
            [[("get_order", {"order_id": "ORD-1001"}), ("get_order", {"order_id": "ORD-9999"})]],
            REPLY_1,
        ),
        Turn(TURN_2, [[("search_products", {"query": "keyboard", "max_price": 100.0})]], REPLY_2),
    ],
)
ORDERS = {"ORD-1001": {"order_id": "ORD-1001", "status": "shipped"}}
PRODUCTS = [{"name": "Mechanical keyboard", "price": 89.0}]
SEARCH = {"query": "keyboard", "max_price": 100.0}


class ToolError(Exception):
    pass


def run_conversation(base_url: str) -> list[dict[str, Any]]:
    """Two turns of one conversation (two Runner.run calls, one group_id); the tool calls the
    agent executed, with the call ids the SDK handed the tools."""
    executed: list[dict[str, Any]] = []
    set_default_openai_client(
        AsyncOpenAI(base_url=base_url, api_key="test", max_retries=0), use_for_tracing=False
    )
    set_default_openai_api("responses")

    def failure(ctx: Any, error: Exception) -> str:
        return json.dumps({"error": str(error)})

    as_tool = function_tool(failure_error_function=failure)

    @as_tool
    def get_order(ctx: ToolContext[Any], order_id: str) -> str:
        """Get order details by order ID"""
        call = {"id": ctx.tool_call_id, "name": "get_order", "arguments": {"order_id": order_id}}
        executed.append(call)
        if order_id not in ORDERS:
            call["error"] = f"order {order_id} not found"
            raise ToolError(call["error"])
        return json.dumps(ORDERS[order_id])

    @as_tool
    def search_products(ctx: ToolContext[Any], query: str, max_price: float) -> str:
        """Search the product catalog by keyword and price limit"""
        arguments = {"query": query, "max_price": max_price}
        executed.append({"id": ctx.tool_call_id, "name": "search_products", "arguments": arguments})
        return json.dumps(PRODUCTS)

    agent = Agent(
        name=AGENT,
        instructions="You are a customer-service agent. Use the tools to answer.",
        model=MODEL,
        tools=[get_order, search_products],
    )

    async def conversation() -> None:
        items: list[Any] = []
        for user in (TURN_1, TURN_2):
            items = [*items, {"role": "user", "content": user}]
            config = RunConfig(group_id=GROUP, workflow_name="support")
            result = await Runner.run(agent, items, run_config=config)
            items = result.to_input_list()

    asyncio.run(conversation())
    return executed
